"""Compiled per-rank execution: a per-rank program split at its collectives.

A per-rank Graph IR function (the output of ``spmd-partition``, or a program
with hand-written collectives) is a sequence of local ops with collectives
(``tgraph.all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``,
``all_slice``, ``send``, ``recv``) in between. :func:`split` cuts it into

* :class:`Segment` s: maximal runs of local ops of one pipeline stage, each
  outlined into its own ``func.func`` (arguments: the values it uses from
  earlier steps; results: the values later steps or the return use), compiled
  like any jitted function (graph pipeline, then Tile IR, Target IR and PTX);
* :class:`CollectiveStep` s: the collectives, run by
  :class:`tessera.dist.interpreter.DistFunctions` over torch.distributed
  (deterministic: all_to_all, rank-ordered sum, all_gather).

:class:`SegmentedProgram` runs the steps in order on one rank. On ``"cpu"``
each segment runs its optimized Graph IR on the numpy reference interpreter
(gloo transports the collectives); on ``"cuda"`` each segment runs its PTX on
torch CUDA tensors through :func:`tessera.runtime.cuda.run_host` (NCCL
transports the collectives, on the same tensors). Steps whose
``tessera.stage`` is not this rank's coordinate on the stage axis are skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue

from tessera.dist.mesh import Mesh
from tessera.errors import TesseraError
from tessera.ir import graph as g
from tessera.passes.shard_propagation import SHARD, STAGE, USER_COLLECTIVES

DEVICES = ("cpu", "cuda")
"""Where segments run: the numpy reference interpreter, or PTX on CUDA tensors."""


class SegmentError(TesseraError, RuntimeError):
    """A per-rank program that cannot be split or run as asked."""


@dataclass
class Segment:
    """Local ops outlined into ``spec``'s function ``name``: ``inputs`` -> ``outputs``."""

    name: str
    inputs: list[SSAValue]
    outputs: list[SSAValue]
    stage: int | None
    spec: Any  # tessera.frontend.jit.Specialization


@dataclass
class CollectiveStep:
    """One collective of the per-rank program (run between segments)."""

    op: Operation
    stage: int | None


Step = Segment | CollectiveStep


def _stage(op: Operation) -> int | None:
    a = op.attributes.get(STAGE)
    return a.value.data if isinstance(a, IntegerAttr) else None


def _outline(name: str, ops: list[Operation], later_uses: set[SSAValue]) -> Segment:
    """A function holding clones of ``ops``; its arguments are the values defined outside."""
    from tessera.frontend.jit import Specialization

    inside = {r for op in ops for r in op.results}
    inputs: list[SSAValue] = []
    for op in ops:
        for o in op.walk():
            for v in o.operands:
                if v not in inside and v not in inputs and not _defined_within(v, op):
                    inputs.append(v)
    outputs = [r for op in ops for r in op.results if r in later_uses]
    block = Block(arg_types=[v.type for v in inputs])
    mapping: dict[SSAValue, SSAValue] = dict(zip(inputs, block.args))
    for op in ops:
        new = op.clone(value_mapper=mapping)
        for k in (SHARD, STAGE):
            new.attributes.pop(k, None)
        block.add_op(new)
        mapping.update(zip(op.results, new.results))
    block.add_op(func.ReturnOp(*[mapping[v] for v in outputs]))
    fn = func.FuncOp(
        name, ([v.type for v in inputs], [v.type for v in outputs]), Region(block)
    )
    module = ModuleOp([fn])
    module.verify()
    spec = Specialization(
        key=("segment", name),
        name=name,
        traced=module,
        tensor_params=[f"in{i}" for i in range(len(inputs))],
        returns_tuple=True,
    )
    return Segment(name, inputs, outputs, _stage(ops[0]), spec)


def _defined_within(v: SSAValue, op: Operation) -> bool:
    """Whether ``v`` is defined inside one of ``op``'s regions (a nested block value)."""
    parent = v.owner.parent_op()
    while parent is not None:
        if parent is op:
            return True
        parent = parent.parent_op()
    return False


def split(fn: func.FuncOp, overlap: bool = False) -> tuple[list[Step], list[SSAValue]]:
    """The steps of per-rank function ``fn`` and the values it returns.

    A new segment starts after each collective and wherever the pipeline stage
    changes, so every segment runs on the ranks of one stage. With ``overlap``, also
    at the first op that uses a result of a collective issued after the segment began
    (:mod:`tessera.dist.overlap`): what comes before it can run while the collective
    is in flight.
    """
    ops = list(fn.body.block.ops)
    ret = ops[-1] if ops else None
    if not isinstance(ret, func.ReturnOp):
        raise SegmentError(f"@{fn.sym_name.data}: the function does not end with func.return")
    ops = ops[:-1]
    groups: list[list[Operation] | Operation] = []
    in_flight: set[SSAValue] = set()  # results of collectives since the last cut
    for op in ops:
        if isinstance(op, USER_COLLECTIVES):
            groups.append(op)
            in_flight.update(op.results)
            continue
        last = groups[-1] if groups else None
        waits = overlap and any(v in in_flight for o in op.walk() for v in o.operands)
        if waits:
            in_flight.clear()
        if isinstance(last, list) and _stage(last[0]) == _stage(op) and not waits:
            last.append(op)
        else:
            groups.append([op])
    steps: list[Step] = []
    base = fn.sym_name.data
    for k, grp in enumerate(groups):
        if isinstance(grp, Operation):
            steps.append(CollectiveStep(grp, _stage(grp)))
            continue
        later: set[SSAValue] = set(ret.operands)
        for other in groups[k + 1 :]:
            for o in [other] if isinstance(other, Operation) else other:
                for inner in o.walk():
                    later.update(inner.operands)
        seg = _outline(f"{base}_seg{len(steps)}", grp, later)
        if seg.outputs:
            steps.append(seg)
    return steps, list(ret.operands)


@dataclass
class SegmentedProgram:
    """A per-rank function ready to run step by step on one rank of ``mesh``."""

    module: ModuleOp
    name: str
    mesh: Mesh
    stage_axis: str = "pp"
    overlap: bool = True
    """Overlap collectives with the compute that does not need them
    (:mod:`tessera.dist.overlap`): hoisted collectives and the segments cut at their
    first use; on ``"cuda"`` a communication stream with events. Results are bitwise
    the same either way."""
    steps: list[Step] = field(init=False)
    results: list[SSAValue] = field(init=False)

    def __post_init__(self) -> None:
        fns = [
            op for op in self.module.walk()
            if isinstance(op, func.FuncOp) and op.sym_name.data == self.name
        ]
        if not fns:
            raise SegmentError(f"no function '{self.name}' in the module")
        self.function = fns[0]
        if self.overlap:
            from tessera.dist.overlap import hoist_collectives

            self.function = self.function.clone()
            hoist_collectives(self.function, USER_COLLECTIVES)
        self.steps, self.results = split(self.function, self.overlap)
        self.streams: list[str] = []
        """The stream of each step of the last overlapped CUDA run (``compute`` / ``comm``)."""

    @property
    def segments(self) -> list[Segment]:
        return [s for s in self.steps if isinstance(s, Segment)]

    def compile(self, device: str) -> None:
        """Build every segment's code for ``device`` now (PTX for ``"cuda"``)."""
        for s in self.segments:
            s.spec.ir("ptx" if device == "cuda" else "graph")

    def run(self, args: Sequence[Any], device: str) -> list[Any]:
        """Run on this rank's ``args`` (numpy arrays on ``"cpu"``, CUDA tensors on
        ``"cuda"``); a result of a pipeline stage this rank does not run is ``None``."""
        from tessera.dist.interpreter import DistFunctions

        if device not in DEVICES:
            raise SegmentError(f"@{self.name}: unknown device '{device}' (valid: cpu, cuda)")
        params = self.function.body.block.args
        if len(args) != len(params):
            raise SegmentError(f"@{self.name}: takes {len(params)} arguments, got {len(args)}")
        rank = self.mesh.check_world()
        self.mesh.device_mesh()
        coords = self.mesh.coords(rank)
        mine = coords.get(self.stage_axis)
        env: dict[SSAValue, Any] = dict(zip(params, args))
        colls = DistFunctions(self.mesh)
        streams = None
        if self.overlap and device == "cuda":
            from tessera.dist.overlap import StreamOverlap

            streams = StreamOverlap()
        for step in self.steps:
            if step.stage is not None and mine is not None and step.stage != mine:
                continue
            if isinstance(step, Segment):
                ins = [self._value(env, v, step.name) for v in step.inputs]
                if streams is not None:
                    streams.before_segment(step.inputs)
                outs = self._run_segment(step, ins, device)
                env.update(zip(step.outputs, outs))
            elif streams is not None:
                op = step.op
                ins = [self._value(env, v, op.name) for v in op.operands]
                outs = streams.collective(
                    lambda op=op: self._collective(colls, op, env, device), ins, op.results)
                env.update(zip(op.results, outs))
            else:
                env.update(zip(step.op.results, self._collective(colls, step.op, env, device)))
        if streams is not None:
            streams.finish(self.results)
            self.streams = streams.used_streams
        return [env.get(v) for v in self.results]

    def _value(self, env: dict[SSAValue, Any], v: SSAValue, where: str) -> Any:
        if v not in env:
            raise SegmentError(
                f"@{self.name}: {where} uses a value that this rank did not compute "
                "(a value of another pipeline stage that was not sent)"
            )
        return env[v]

    def _run_segment(self, seg: Segment, ins: list[Any], device: str) -> list[Any]:
        if device == "cuda":
            from tessera.runtime import dispatch

            out = dispatch.run_on_gpu(seg.spec, ins)
            return list(out)
        from tessera.runtime import dispatch

        return dispatch.run_on_cpu(seg.spec, ins)

    def _collective(
        self, colls: Any, op: Operation, env: dict[SSAValue, Any], device: str
    ) -> tuple[Any, ...]:
        from tessera.dist import collectives as C

        ins = tuple(self._value(env, v, op.name) for v in op.operands)
        if isinstance(op, g.SendOp):
            C.send(ins[0], op.axis.data, op.peer.value.data, mesh=self.mesh)
            return ()
        if isinstance(op, g.RecvOp) and device == "cuda":
            import torch

            from tessera.runtime.cuda import torch_dtype

            t = op.result.type
            assert isinstance(t, TensorType)
            like = torch.empty(
                (0,), dtype=torch_dtype(t.element_type),
                device=torch.device("cuda", torch.cuda.current_device()),
            )
            return (
                C.recv(tuple(t.get_shape()), None, op.axis.data, op.peer.value.data,
                       mesh=self.mesh, like=like),
            )
        impl = {
            g.AllReduceOp: colls.run_all_reduce, g.AllGatherOp: colls.run_all_gather,
            g.ReduceScatterOp: colls.run_reduce_scatter, g.AllToAllOp: colls.run_all_to_all,
            g.AllSliceOp: colls.run_all_slice, g.RecvOp: colls.run_recv,
        }[type(op)]
        out = impl(None, op, ins).values
        if device == "cpu":
            return tuple(np.asarray(o, order="C") for o in out)
        return tuple(o.contiguous() for o in out)
