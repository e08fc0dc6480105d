"""``ts.profiler.session()``: record compile passes, ops, kernels and collectives.

While a :class:`Session` is active (``with ts.profiler.session() as prof:``)
it installs hooks, and removes them when it ends (outside a session every hook
is ``None`` and costs one check):

* compile stages and each graph-pipeline pass of every ``@ts.jit`` function
  (``tessera.frontend.jit.COMPILE_OBSERVERS``), timed with ``perf_counter``;
* CPU reference execution: each op the Graph IR interpreter runs
  (``tessera.runtime.graph_interpreter.LISTENER_FACTORY``, an xDSL interpreter
  listener), wall time per op;
* GPU execution: each kernel launch (``tessera.runtime.cuda.LAUNCH_HOOK``) is
  bracketed by a pair of ``torch.cuda.Event`` s on the launch stream; times are
  read when the session ends;
* collectives of :mod:`tessera.dist.collectives`
  (``COLLECTIVE_HOOK``): latency (wall time, the device synchronized before and
  after for CUDA tensors) and payload bytes.

FLOPs and bytes of ops and kernels come from the IR (:mod:`tessera.profiler.costs`).
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from xdsl.dialects import func
from xdsl.interpreter import Interpreter
from xdsl.ir import Operation

from tessera.profiler import costs
from tessera.profiler.roofline import Ceilings, Point


@dataclass
class Event:
    """One timed thing: a compile stage or pass, an op, a kernel, a collective."""

    name: str
    category: str  # "compile", "pass", "op", "kernel", "collective"
    function: str
    start_us: float
    dur_us: float
    flops: int | None = None
    bytes: int | None = None
    device: str = "cpu"
    depth: int = 0
    key: Any = None
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    """Events of one op / kernel / pass / collective, summed."""

    category: str
    function: str
    name: str
    label: str
    calls: int = 0
    total_us: float = 0.0
    flops: int | None = 0
    bytes: int | None = 0

    @property
    def mean_us(self) -> float:
        return self.total_us / self.calls if self.calls else 0.0

    @property
    def gflops_per_s(self) -> float | None:
        return self.flops / self.total_us / 1e3 if self.flops and self.total_us > 0 else None

    @property
    def gbytes_per_s(self) -> float | None:
        return self.bytes / self.total_us / 1e3 if self.bytes and self.total_us > 0 else None


_SESSIONS: list[Session] = []


def active() -> list[Session]:
    """The sessions now recording (innermost last)."""
    return list(_SESSIONS)


def _now_ns() -> int:
    return time.perf_counter_ns()


def _function_of(op: Operation) -> str:
    p: Operation | None = op
    while p is not None:
        if isinstance(p, func.FuncOp):
            return p.sym_name.data
        p = p.parent_op()
    return ""


def _depth(op: Operation) -> int:
    """0 for an op of a function body, 1 inside a fused op's body, and so on."""
    d, p = 0, op.parent_op()
    while p is not None and not isinstance(p, func.FuncOp):
        d, p = d + 1, p.parent_op()
    return d


def _shape_label(op: Operation) -> str:
    from xdsl.dialects.builtin import TensorType

    def fmt(t: Any) -> str:
        return "x".join(str(d) for d in t.get_shape()) or "scalar"

    ins = [fmt(v.type) for v in op.operands if isinstance(v.type, TensorType)]
    outs = [fmt(r.type) for r in op.results if isinstance(r.type, TensorType)]
    return f"({', '.join(ins)}) -> {', '.join(outs)}"


# --------------------------------------------------------------------------- hooks


class _OpListener(Interpreter.Listener):
    """Times each op the Graph IR interpreter runs and reports it to the active sessions."""

    _SKIP = ("func.return", "tgraph.yield")

    def __init__(self) -> None:
        self.stack: list[tuple[Operation, int]] = []

    def will_interpret_op(self, op: Operation, args: Any) -> None:
        self.stack.append((op, _now_ns()))

    def did_interpret_op(self, op: Operation, results: Any) -> None:
        end = _now_ns()
        while self.stack and self.stack[-1][0] is not op:
            self.stack.pop()
        if not self.stack:
            return
        _, start = self.stack.pop()
        if op.name in self._SKIP or isinstance(op, func.FuncOp):
            return
        for s in _SESSIONS:
            s._record_op(op, start, end)


class _CompileObserver:
    """Records compile stages and passes (a ``jit.CompileObserver``)."""

    def begin(self, spec: Any, level: str, steps: int) -> None:
        pass

    def pass_done(self, spec: Any, name: str, module: Any, seconds: float) -> None:
        end = _now_ns()
        for s in _SESSIONS:
            s._record_span("pass", name, spec.name, end - int(seconds * 1e9), end)

    def stage(self, spec: Any, level: str, ir: Any, seconds: float) -> None:
        end = _now_ns()
        for s in _SESSIONS:
            s._record_span("compile", level, spec.name, end - int(seconds * 1e9), end)


class _LaunchHook:
    """``tessera.runtime.cuda.LAUNCH_HOOK``: CUDA events around each kernel launch."""

    def __init__(self) -> None:
        self.spec: Any = None
        self._flops: dict[tuple[int, str], dict[str, int | None]] = {}

    def specialization(self, spec: Any) -> None:
        self.spec = spec

    def kernel_flops(self, host: str, kernel: Any) -> int | None:
        module = kernel.parent_op()
        if self.spec is None or module is None:
            return None
        key = (id(module), host)
        table = self._flops.get(key)
        if table is None:
            from tessera.ir import target as tt

            names = [k.sym_name.data for k in module.walk() if isinstance(k, tt.FuncOp)]
            table = costs.kernel_flops(self.spec.ir("graph"), host, names)
            self._flops[key] = table
        return table.get(kernel.sym_name.data)

    def launch(self, host: str, kernel: Any, grid: Any, values: list[Any], run: Any) -> None:
        import torch

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        for s in _SESSIONS:
            s._gpu_reference()
        start.record()
        run()
        end.record()
        nbytes = sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))
        flops = self.kernel_flops(host, kernel)
        device = f"cuda:{torch.cuda.current_device()}"
        for s in _SESSIONS:
            s._pending.append((kernel.sym_name.data, host, start, end, flops, nbytes, device,
                               list(grid)))


_COLLECTIVE_DEPTH = [0]


def _payload_bytes(x: Any) -> int:
    if x is None:
        return 0
    if hasattr(x, "element_size"):
        return int(x.numel() * x.element_size())
    return int(getattr(x, "nbytes", 0))


def _sync_if_cuda(x: Any) -> None:
    if getattr(getattr(x, "device", None), "type", None) == "cuda":
        import torch

        torch.cuda.synchronize(x.device)


def _collective_hook(name: str, run: Any, x: Any) -> Any:
    """``tessera.dist.collectives.COLLECTIVE_HOOK``: latency and bytes of the outermost call."""
    if _COLLECTIVE_DEPTH[0]:
        return run()
    _COLLECTIVE_DEPTH[0] += 1
    try:
        _sync_if_cuda(x)
        start = _now_ns()
        out = run()
        _sync_if_cuda(out if x is None else x)
        end = _now_ns()
    finally:
        _COLLECTIVE_DEPTH[0] -= 1
    nbytes = _payload_bytes(x) if x is not None else _payload_bytes(out)
    device = str(getattr(x if x is not None else out, "device", "cpu"))
    for s in _SESSIONS:
        s._record_span("collective", name, "", start, end, nbytes=nbytes, device=device)
    return out


_OBSERVER = _CompileObserver()
_LAUNCH = _LaunchHook()


def _install() -> None:
    from tessera.dist import collectives
    from tessera.frontend import jit
    from tessera.runtime import cuda, graph_interpreter

    if cuda.LAUNCH_HOOK is not None:
        from tessera.errors import TesseraError

        raise TesseraError(
            "ts.profiler: kernel checking (tessera.runtime.kernel_check) holds the runtime's "
            "launch hook; a profiler session cannot time launches while they are checked"
        )
    jit.COMPILE_OBSERVERS.append(_OBSERVER)  # type: ignore[arg-type]
    graph_interpreter.LISTENER_FACTORY = lambda module: _OpListener()
    cuda.LAUNCH_HOOK = _LAUNCH
    collectives.COLLECTIVE_HOOK = _collective_hook


def _uninstall() -> None:
    from tessera.dist import collectives
    from tessera.frontend import jit
    from tessera.runtime import cuda, graph_interpreter

    if _OBSERVER in jit.COMPILE_OBSERVERS:
        jit.COMPILE_OBSERVERS.remove(_OBSERVER)  # type: ignore[arg-type]
    graph_interpreter.LISTENER_FACTORY = None
    cuda.LAUNCH_HOOK = None
    collectives.COLLECTIVE_HOOK = None
    _LAUNCH.spec = None


# --------------------------------------------------------------------------- session


class Session:
    """A profile: events recorded between ``__enter__`` and ``__exit__`` (see module doc)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.started: datetime.datetime | None = None
        self._t0 = 0
        self._pending: list[tuple[Any, ...]] = []
        self._gpu_ref: tuple[Any, int] | None = None
        self._costs: dict[int, tuple[Operation, costs.Cost, str, str, int]] = {}
        self._ceilings: Ceilings | None = None

    # ------------------------------------------------------------ lifetime
    def __enter__(self) -> Session:
        if self in _SESSIONS:
            raise RuntimeError("ts.profiler: this session is already active")
        self.started = datetime.datetime.now(datetime.UTC)
        self._t0 = _now_ns()
        if not _SESSIONS:
            _install()
        _SESSIONS.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _SESSIONS.remove(self)
        if not _SESSIONS:
            _uninstall()
        self._resolve_gpu()

    # ------------------------------------------------------------ recording
    def _us(self, ns: int) -> float:
        return (ns - self._t0) / 1e3

    def _record_span(
        self, category: str, name: str, function: str, start: int, end: int,
        nbytes: int | None = None, device: str = "cpu",
    ) -> None:
        self.events.append(Event(name, category, function, self._us(start), (end - start) / 1e3,
                                 bytes=nbytes, device=device, key=(category, function, name)))

    def _record_op(self, op: Operation, start: int, end: int) -> None:
        entry = self._costs.get(id(op))
        if entry is None or entry[0] is not op:
            entry = (op, costs.op_cost(op), _shape_label(op), _function_of(op), _depth(op))
            self._costs[id(op)] = entry
        _, cost, label, function, depth = entry
        self.events.append(Event(
            op.name, "op", function, self._us(start), (end - start) / 1e3,
            flops=cost.flops, bytes=cost.bytes, depth=depth, key=("op", id(op)),
            args={"shapes": label, "depth": depth},
        ))

    def _gpu_reference(self) -> None:
        if self._gpu_ref is None:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._gpu_ref = (ev, _now_ns())

    def _resolve_gpu(self) -> None:
        """Turn the recorded CUDA event pairs into kernel events (synchronizes once)."""
        if not self._pending:
            return
        assert self._gpu_ref is not None
        ref, ref_ns = self._gpu_ref
        for name, host, start, end, flops, nbytes, device, grid in self._pending:
            end.synchronize()
            t_us = self._us(ref_ns) + ref.elapsed_time(start) * 1e3
            self.events.append(Event(
                name, "kernel", host, t_us, start.elapsed_time(end) * 1e3, flops=flops,
                bytes=nbytes, device=device, key=("kernel", host, name), args={"grid": grid},
            ))
        self._pending.clear()
        self.events.sort(key=lambda e: e.start_us)

    # ------------------------------------------------------------ summaries
    def rows(self, category: str) -> list[Row]:
        """Events of ``category`` summed per op / kernel / pass, in first-seen order.

        For ``"op"`` only the ops of a function body count (ops inside a
        ``tgraph.fused`` body are part of the fused op's time).
        """
        self._resolve_gpu()
        out: dict[Any, Row] = {}
        for e in self.events:
            if e.category != category or (category == "op" and e.depth != 0):
                continue
            key = e.key if category != "collective" else (e.name, e.bytes, e.device)
            r = out.get(key)
            if r is None:
                label = e.name
                if category == "op":
                    label = f"{e.name.removeprefix('tgraph.')} {e.args.get('shapes', '')}"
                r = out[key] = Row(category, e.function, e.name, label,
                                   flops=e.flops, bytes=e.bytes)
            else:
                r.flops = None if r.flops is None or e.flops is None else r.flops + e.flops
                r.bytes = None if r.bytes is None or e.bytes is None else r.bytes + e.bytes
            r.calls += 1
            r.total_us += e.dur_us
        return list(out.values())

    def table(self, file: TextIO | None = None) -> str:
        """The profile as text tables (printed to ``file``, stdout by default) and returned."""
        from tessera.profiler.report import format_table

        text = format_table(self)
        print(text, file=file or sys.stdout)
        return text

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write the events as Chrome-trace / Perfetto JSON (see :mod:`tessera.profiler.trace`)."""
        from tessera.profiler.trace import write_chrome_trace

        self._resolve_gpu()
        meta = {"started": self.started.isoformat() if self.started else None,
                "tool": "tessera.profiler"}
        return write_chrome_trace(path, self.events, meta)

    # ------------------------------------------------------------ roofline
    def on_gpu(self) -> bool:
        """Whether the session recorded GPU kernels."""
        self._resolve_gpu()
        return any(e.category == "kernel" for e in self.events)

    def ceilings(self) -> Ceilings:
        """The device's ceilings, measured now (once per session): GPU if kernels ran, else CPU."""
        if self._ceilings is None:
            from tessera.profiler import roofline

            self._ceilings = roofline.measure_gpu() if self.on_gpu() else roofline.measure_cpu()
        return self._ceilings

    def roofline_points(self) -> list[Point]:
        """Kernels (GPU) or top-level ops (CPU) with known FLOPs > 0, bytes and time."""
        rows = self.rows("kernel") if self.on_gpu() else self.rows("op")
        return [Point(r.label if r.category == "kernel" else r.name.removeprefix("tgraph."),
                      r.flops, r.bytes, r.total_us / 1e6)
                for r in rows if r.flops and r.bytes and r.total_us > 0]

    def roofline(self, path: str | os.PathLike[str], title: str = "") -> Path:
        """Draw the profiled kernels/ops against the measured ceilings as a PNG."""
        from tessera.profiler import roofline

        c = self.ceilings()
        where = "GPU kernels" if self.on_gpu() else "CPU reference ops"
        return roofline.plot(self.roofline_points(), c, path,
                             title or f"Tessera roofline: {where} on {c.device}")


def session() -> Session:
    """A new profiling session, for ``with ts.profiler.session() as prof:``."""
    return Session()
