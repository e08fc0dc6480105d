"""The compiler driver: one table of stages from traced Graph IR to a cubin.

::

    traced ──graph──▶ graph ──tile──▶ tile ──target──▶ target ──ptx──▶ ptx ──cubin──▶ cubin

:data:`STAGES` names each stage, the level it is built from and how: the three
IR-to-IR stages run the pass lists of :data:`tessera.passes.pipelines.STAGE_PASSES`
(the one definition of each pipeline, which ``tessera-opt``'s
``tessera-graph-pipeline`` and ``tessera-ptx-pipeline`` also run), ``ptx`` prints
the Target IR, ``cubin`` assembles the PTX with ptxas for ``options.arch``.
``@ts.jit`` (:meth:`Specialization.ir <tessera.frontend.jit.Specialization.ir>`,
``inspect_ir``), ``@ts.kernel`` (:func:`lower`) and the profiler (through
:data:`COMPILE_OBSERVERS`) all go through here.

Every compile is driven by one :class:`~tessera.options.CompileOptions`, built at
the API boundary by :func:`resolve_options` and passed down explicitly; it is part
of the program cache key (:mod:`tessera.runtime.program_cache`), with the traced
IR and the compiler's version. Before the ``tile`` stage, matmuls without a tuned
tile config are tuned when ``options.autotune`` asks for it
(:func:`tessera.tuning.sm90.complete`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from xdsl.dialects.builtin import ModuleOp

from tessera.options import CompileOptions
from tessera.passes import pipelines

LEVELS: tuple[str, ...] = ("traced", "graph", "tile", "target", "ptx")
"""The IR levels ``inspect_ir`` can print, in pipeline order."""

CUSTOM_VJP_ATTR = "tessera.custom_vjp"
"""Marks a traced ``custom_vjp`` call: its rule is a Python callback, so a program that
has one is never stored in the program cache."""


class Compiled(Protocol):
    """What the driver compiles (``tessera.frontend.jit.Specialization``)."""

    key: tuple[Any, ...]
    name: str
    traced: ModuleOp
    tensor_params: list[str]
    returns_tuple: bool
    options: CompileOptions
    levels: dict[str, Any]
    launch_text: str | None


# --------------------------------------------------------------------------- observers


class CompileObserver:
    """Told about each compile step of a specialization.

    Register instances in :data:`COMPILE_OBSERVERS`; ``ts.profiler`` sessions,
    ``TESSERA_DUMP_DIR`` (:mod:`tessera.runtime.dump`) and the compile progress
    bar (:mod:`tessera.runtime.progress`) are observers.
    """

    def begin(self, spec: Any, level: str, steps: int) -> None:
        """Building ``level`` starts; it takes ``steps`` passes."""

    def pass_done(self, spec: Any, name: str, module: ModuleOp, seconds: float) -> None:
        """Pass ``name`` ran in ``seconds``; ``module`` is the IR after it."""

    def stage(self, spec: Any, level: str, ir: Any, seconds: float) -> None:
        """``level`` (one of :data:`LEVELS`) was built in ``seconds``; ``ir`` is its module or text."""


COMPILE_OBSERVERS: list[CompileObserver] = []
"""Observers added by code (profiler sessions); see :func:`compile_observers`."""


def compile_observers(options: CompileOptions) -> list[CompileObserver]:
    """:data:`COMPILE_OBSERVERS` plus those the options switch on (dump folder) and the
    progress bar (on a terminal)."""
    from tessera.runtime import dump, progress

    return [*COMPILE_OBSERVERS, *dump.observers(options.dump_dir), *progress.compile_observers()]


def _pass_callback(spec: Any, observers: list[CompileObserver]) -> Callable[..., None]:
    """An xDSL PassPipeline callback reporting each pass's time (observers' own time excluded)."""
    last = [time.perf_counter()]

    def callback(prev: Any, module: ModuleOp, nxt: Any) -> None:
        if prev is not None:
            seconds = time.perf_counter() - last[0]
            for o in observers:
                o.pass_done(spec, prev.name, module, seconds)
        last[0] = time.perf_counter()

    return callback


# --------------------------------------------------------------------------- options


def resolve_options(options: CompileOptions | None = None, **overrides: Any) -> CompileOptions:
    """The options of one compile: ``options`` (default: from the environment and the current
    device, :meth:`CompileOptions.from_env`) with ``overrides``, and, when the sm90 kernels
    are on, the device's tuned tile configs (:func:`tessera.tuning.sm90.tiles_for`)."""
    opts = options if options is not None else CompileOptions.from_env()
    if overrides:
        opts = opts.replace(**overrides)
    if opts.sm90_kernels and opts.device and not opts.sm90_tiles:
        from tessera.tuning import sm90

        tiles = sm90.tiles_for(opts.device)
        if tiles:
            opts = opts.replace(sm90_tiles=tiles)
    return opts


# --------------------------------------------------------------------------- stages


def _ir_stage(stage: str) -> Callable[[Any, CompileOptions, Any], Any]:
    def run(module: ModuleOp, options: CompileOptions, callback: Any) -> ModuleOp:
        if stage == "tile":
            from tessera.tuning import sm90

            options = sm90.complete(module, options)
        return pipelines.lower(module, stage, options, callback)

    return run


def _ptx(module: ModuleOp, options: CompileOptions, callback: Any) -> str:
    # the target stage verified ``module`` (``pipelines.lower``); :func:`lower` verifies a
    # module handed in from outside before it gets here
    return pipelines.to_ptx(module, verify=False)


def _cubin(ptx: str, options: CompileOptions, callback: Any) -> bytes:
    from tessera.errors import TesseraError
    from tessera.runtime import ptxas

    if options.arch is None:
        raise TesseraError("compile to cubin: no target architecture (no CUDA device)")
    return ptxas.assemble(ptx, options.arch + ("a" if options.arch == "sm_90" else ""))


@dataclass(frozen=True)
class Stage:
    """One step of the table: ``name`` is built from ``source`` by ``run(ir, options,
    pass_callback)``; ``passes`` is its number of passes (for progress bars), None for
    the printing and assembling stages."""

    name: str
    source: str
    run: Callable[[Any, CompileOptions, Any], Any]
    passes: Callable[[CompileOptions], int] | None = None


STAGES: tuple[Stage, ...] = (
    Stage("graph", "traced", _ir_stage("graph"), lambda o: len(pipelines.graph_pipeline(o))),
    Stage("tile", "graph", _ir_stage("tile"), lambda o: len(pipelines.stage_passes("tile", o))),
    Stage("target", "tile", _ir_stage("target"), lambda o: 1),
    Stage("ptx", "target", _ptx),
    Stage("cubin", "ptx", _cubin),
)
"""The stages in order (see the module docstring)."""

_BY_NAME = {s.name: s for s in STAGES}


def lower(module: ModuleOp, level: str, options: CompileOptions | None = None) -> Any:
    """``module`` (at the level just below ``level``) built up to ``level`` by its stage, with
    no observers or caching: ``lower(tile_module, "target")``, ``lower(target, "ptx")``."""
    stage = _BY_NAME[level]
    if level == "ptx":
        module.verify()
    return stage.run(module, options if options is not None else resolve_options(), None)


def lower_through(module: ModuleOp, source: str, level: str, options: CompileOptions) -> Any:
    """``module`` (at level ``source``) built stage by stage up to ``level``."""
    names = [s.name for s in STAGES]
    ir = module
    for name in names[names.index(source) + 1 : names.index(level) + 1]:
        ir = _BY_NAME[name].run(ir, options, None)
    return ir


def build(spec: Compiled, level: str) -> Any:
    """The IR of ``spec`` at ``level`` (one of :data:`LEVELS` or ``cubin``), built on first
    use from the level below and kept in ``spec.levels``; PTX comes from the program cache
    when it has it (:func:`ptx_of`)."""
    if level == "traced":
        return spec.traced
    if level in spec.levels:
        return spec.levels[level]
    if level == "ptx":
        return ptx_of(spec)
    return _run_stage(spec, _BY_NAME[level])


def _run_stage(spec: Compiled, stage: Stage) -> Any:
    below = build(spec, stage.source)
    observers = compile_observers(spec.options)
    steps = stage.passes(spec.options) if stage.passes is not None else 1
    for o in observers:
        o.begin(spec, stage.name, steps)
    cb = _pass_callback(spec, observers) if observers and stage.name == "graph" else None
    t0 = time.perf_counter()
    ir = stage.run(below, spec.options, cb)
    seconds = time.perf_counter() - t0
    spec.levels[stage.name] = ir
    if stage.name in LEVELS:
        for o in observers:
            o.stage(spec, stage.name, ir, seconds)
    return ir


# --------------------------------------------------------------------------- program cache


def program_key(spec: Compiled) -> str | None:
    """The program cache key of ``spec``: its options' key, its traced IR, name, tensor
    parameters and result form, and the compiler's fingerprint; None when it must not be
    cached (the disk cache is off, an observer wants to see every pass, or the program
    calls a ``custom_vjp`` rule, which is Python code of the process)."""
    from tessera.runtime import program_cache

    traced = str(spec.traced)
    if not program_cache.enabled() or compile_observers(spec.options):
        return None
    if CUSTOM_VJP_ATTR in traced:
        return None
    source = [spec.name, ",".join(spec.tensor_params), str(spec.returns_tuple), traced]
    return program_cache.program_key(spec.options.key(), source)


def ptx_of(spec: Compiled) -> str:
    """The PTX of ``spec``: from the program cache (its launch module parsed and kept in
    ``spec.launch_text``/``launch_module``), else lowered and then stored there. A cached
    entry whose launch text does not load is discarded and rebuilt."""
    from tessera.runtime import program_cache

    key = program_key(spec)
    if key is not None:
        found = program_cache.load(key)
        if found is not None:
            try:
                launch = program_cache.parse_launch_module(found.launch)
            except Exception as e:  # any parse or verify failure: heal the entry
                program_cache.discard(key, f"its launch module does not load: {e}")
            else:
                spec.levels["ptx"] = found.ptx
                spec.launch_text = found.launch
                spec._launch = launch  # type: ignore[attr-defined]
                return found.ptx
    ptx = _run_stage(spec, _BY_NAME["ptx"])
    if key is not None:
        launch_text = program_cache.launch_module_text(spec.levels["target"])
        program_cache.store(key, program_cache.CompiledProgram(ptx=ptx, launch=launch_text))
    return ptx


def launch_module(spec: Compiled) -> ModuleOp:
    """The Target-level module the GPU runtime runs: the lowered one when it was built in
    this process, else the launch module from the program cache."""
    if "target" in spec.levels:
        return spec.levels["target"]
    launch = getattr(spec, "_launch", None)
    if launch is not None:
        return launch
    return build(spec, "target")
