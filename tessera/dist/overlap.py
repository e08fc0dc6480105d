"""Compute/communication overlap of a per-rank program (:mod:`tessera.dist.segments`).

Two parts, both deterministic functions of the program, so every rank makes the same
schedule and the results are bitwise the same as without overlap (the same ops run on
the same values; only when they run changes):

* :func:`hoist_collectives` reorders the per-rank function's ops so that each
  collective is issued as early as possible: the ops it needs first, then it, then the
  rest (collectives keep their order among themselves, which every rank must agree on;
  other ops keep their relative order except to compute a collective's inputs first).
  :func:`tessera.dist.segments.split` with ``overlap=True`` then also starts a new
  segment at the first op that uses the result of a collective still in flight, so
  the compute that does not need it forms segments of its own.
* :class:`StreamOverlap` runs that schedule on a GPU: each collective is issued on a
  communication stream of its own after an event recorded on the compute stream
  (its inputs are ready), and records an event when done; a later segment that uses
  its results makes the compute stream wait for that event, and every other segment
  runs on the compute stream at once, while the collective is in flight. Tensors
  crossing streams are marked with ``record_stream`` so the caching allocator does not
  reuse them early. On the CPU (gloo) the same steps run in order, synchronously.

:func:`overlap_plan` describes the schedule: for each collective step, the segments
that run while it is in flight and the step that waits for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.dialects import func
from xdsl.ir import Operation, SSAValue


def _deps(op: Operation, producers: dict[SSAValue, Operation]) -> list[Operation]:
    """The ops of the block that ``op`` (and the ops nested in it) use values of."""
    out: list[Operation] = []
    for inner in op.walk():
        for v in inner.operands:
            p = producers.get(v)
            if p is not None and p is not op and p not in out:
                out.append(p)
    return out


def _closure(op: Operation, deps: dict[Operation, list[Operation]]) -> set[Operation]:
    """Every op ``op`` depends on, transitively."""
    out: set[Operation] = set()
    todo = list(deps[op])
    while todo:
        d = todo.pop()
        if d not in out:
            out.add(d)
            todo.extend(deps[d])
    return out


def hoist_collectives(fn: func.FuncOp, collectives: tuple[type[Operation], ...]) -> bool:
    """Reorder ``fn``'s top-level ops in place so each op of a type in ``collectives``
    runs as soon as its operands are computed (see the module docstring). Returns
    whether the order changed."""
    block = fn.body.block
    ops = list(block.ops)
    ret = ops[-1] if ops and isinstance(ops[-1], func.ReturnOp) else None
    body = ops[:-1] if ret is not None else ops
    index = {op: i for i, op in enumerate(body)}
    producers = {r: op for op in body for r in op.results}
    deps = {op: _deps(op, producers) for op in body}
    placed: set[Operation] = set()
    order: list[Operation] = []
    colls = [op for op in body if isinstance(op, collectives)]
    others = [op for op in body if not isinstance(op, collectives)]
    while len(order) < len(body):
        # the next collective, as soon as everything it uses is placed
        if colls and all(d in placed for d in deps[colls[0]]):
            nxt = colls.pop(0)
        else:
            # the earliest ready op the next collective needs, else the earliest ready op
            # (program order is topological, so one is ready)
            need = _closure(colls[0], deps) if colls else set()
            ready = [op for op in others if all(d in placed for d in deps[op])]
            nxt = next((op for op in ready if op in need), ready[0])
            others.remove(nxt)
        order.append(nxt)
        placed.add(nxt)
    if [index[o] for o in order] == list(range(len(body))):
        return False
    for op in body:
        op.detach()
    for op in order:
        if ret is not None:
            block.insert_op_before(op, ret)
        else:
            block.add_op(op)
    return True


@dataclass(frozen=True)
class InFlight:
    """One collective step of a schedule: the segments that run while it is in flight
    (by step index) and the step that waits for its results (None: the end)."""

    step: int
    overlapped: tuple[int, ...]
    waited_by: int | None


def overlap_plan(steps: Sequence[Any]) -> list[InFlight]:
    """The overlap of each collective step of ``steps`` (segments and collective steps of
    :func:`tessera.dist.segments.split`): the later segments before the first step that
    uses one of its results."""
    from tessera.dist.segments import CollectiveStep, Segment

    out: list[InFlight] = []
    for i, s in enumerate(steps):
        if not isinstance(s, CollectiveStep):
            continue
        results = set(s.op.results)
        overlapped: list[int] = []
        waited: int | None = None
        for j in range(i + 1, len(steps)):
            t = steps[j]
            uses = t.inputs if isinstance(t, Segment) else list(t.op.operands)
            if results & set(uses):
                waited = j
                break
            if isinstance(t, Segment):
                overlapped.append(j)
        out.append(InFlight(i, tuple(overlapped), waited))
    return out


class StreamOverlap:
    """The CUDA streams and events of one overlapped run (see the module docstring)."""

    def __init__(self, torch_module: Any = None) -> None:
        if torch_module is None:
            import torch as torch_module
        torch = self.torch = torch_module
        self.compute = torch.cuda.current_stream()
        self.comm = torch.cuda.Stream(device=self.compute.device)
        self.pending: dict[SSAValue, Any] = {}
        self.used_streams: list[str] = []
        """``"compute"`` / ``"comm"`` per step, in order (for tests and traces)."""

    def before_segment(self, inputs: Sequence[SSAValue]) -> None:
        """Make the compute stream wait for the collectives whose results ``inputs`` uses."""
        for v in inputs:
            ev = self.pending.pop(v, None)
            if ev is not None:
                self.compute.wait_event(ev)
        self.used_streams.append("compute")

    def collective(self, run: Any, ins: Sequence[Any], results: Sequence[SSAValue]) -> Any:
        """Run ``run()`` (the collective on ``ins``) on the communication stream after the
        compute stream's work so far; its results become pending on an event."""
        torch = self.torch
        ready = torch.cuda.Event()
        ready.record(self.compute)
        self.comm.wait_event(ready)
        for t in ins:
            if isinstance(t, torch.Tensor) and t.is_cuda:
                t.record_stream(self.comm)
        with torch.cuda.stream(self.comm):
            outs = run()
        done = torch.cuda.Event()
        done.record(self.comm)
        for v, t in zip(results, outs):
            self.pending[v] = done
            if isinstance(t, torch.Tensor) and t.is_cuda:
                t.record_stream(self.compute)
        self.used_streams.append("comm")
        return outs

    def finish(self, values: Sequence[SSAValue]) -> None:
        """Make the compute stream wait for every collective still pending (the results
        are the caller's on its current stream)."""
        seen: set[int] = set()
        for ev in self.pending.values():
            if id(ev) not in seen:
                seen.add(id(ev))
                self.compute.wait_event(ev)
        self.pending.clear()
