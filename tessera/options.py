"""Compile and runtime options: the one place Tessera reads its environment.

A :class:`CompileOptions` is a frozen, hashable value that says everything
besides the IR that decides the code Tessera generates: the device compiled for,
which hand-written kernels are enabled, the graph pass pipeline, the tuned tile
configurations and whether to autotune, and the determinism and numerics defaults
(:attr:`~CompileOptions.deterministic`, :attr:`~CompileOptions.allow_tf32`). It is built once per compile at the API
boundary (:meth:`CompileOptions.from_env` from ``TESSERA_*`` variables and a
device query, then completed by :func:`tessera.compiler.resolve_options`) and
passed down the pipeline explicitly; no pass reads the environment. Its
:meth:`~CompileOptions.key` is part of the program cache key
(:mod:`tessera.runtime.program_cache`).

Fields that do not change the generated code (debug and dump switches) are
declared with ``compare=False``: they are left out of ``==``, ``hash`` and
:meth:`~CompileOptions.key`.

:class:`RuntimeOptions` holds the switches of loading and launching (disk
caches, ptxas, synchronous launches, progress bars); :func:`cache_root` is where
every on-disk cache lives.

Environment variables (read only here):

=============================  ====================================================
``TESSERA_SM90_MATMUL``        ``1``/``0``: use the sm_90a (TMA + wgmma) matmul and
                               attention kernels; unset: when the device is sm_90
``TESSERA_SM90_ATTENTION_BWD`` ``0``: with the sm_90a kernels, keep the attention
                               backward on the ``mma.sync`` kernels (default ``1``:
                               the TMA + wgmma ones)
``TESSERA_AUTOTUNE``           ``1``: time the sm90 tile configs of a matmul shape
                               that has no tuned entry yet
``TESSERA_DETERMINISTIC``      ``0``: lowered programs may run ``all_reduce`` in the
                               communication library's own (unordered) reduction
                               order; default ``1``: bitwise-reproducible results
``TESSERA_ALLOW_TF32``         ``1``: f32 matmuls may round their operands to TF32
                               on tensor cores (as ``torch.backends.cuda.matmul.
                               allow_tf32``); default ``0``: full f32
``TESSERA_SPLIT_K``            split-K of sm90 matmuls with too few output tiles:
                               ``auto`` (default: the cost rule of
                               ``matmul_config.split_k``), ``off`` or a count of K
                               ranges
``TESSERA_IMPLICIT_CONV``      ``0``: conv2d on sm90 through an im2col buffer and the
                               GEMM; default ``1``: the implicit GEMM (no im2col)
``TESSERA_SM90_STORE``         how sm90 matmul results that TMA does not store (f32,
                               split-K partials, N % 8 != 0) leave: ``staged``
                               (default: through shared memory, coalesced) or
                               ``registers`` (``st.global`` from the accumulators)
``TESSERA_DUMP_DIR``           write every IR stage of every compile there
``TESSERA_DEBUG``              ``tessera-opt`` shows Python tracebacks
``TESSERA_CACHE_DIR``          the cache root (else ``$XDG_CACHE_HOME/tessera``, else
                               the platform's user cache folder)
``TESSERA_NO_DISK_CACHE``      ``1``: no program or cubin cache on disk
``TESSERA_PTXAS``              the ptxas executable to use
``TESSERA_CUDA_SYNC``          ``1``: synchronize after every kernel launch
``TESSERA_CUDA_GRAPHS``        ``1``: replay repeated calls as recorded CUDA graphs
                               (each plan then keeps its intermediates' memory)
``TESSERA_CHECK_KERNELS``      ``1``: run every GPU kernel launch on the Tile IR
                               interpreter too and raise where they differ
                               (:mod:`tessera.runtime.kernel_check`)
``TESSERA_INTERPRET_TILE``     ``1``: a compiled function called on CPU arrays (``ts.jit``,
                               its torch autograd backward, ``torch.compile``
                               partitions, sharded segments) runs its GPU lowering's
                               Tile IR on the Tile IR interpreter instead of its Graph
                               IR on the Graph IR interpreter
                               (:func:`tessera.runtime.dispatch.run_on_cpu`); fused
                               optimizer steps and forward-mode ``jvp`` keep the Graph
                               IR interpreter
``TESSERA_PROGRESS``           ``0``: no progress bars
``TESSERA_PROGRESS_MIN_STEPS`` fewest passes a compile stage needs to get a bar
=============================  ====================================================

Besides this module only ``tessera/tools/tool_client.py`` touches the environment: it is
a standard-library script run with ``python -S`` before anything of Tessera is imported
(lit's RUN lines start it), so it reads ``TESSERA_TOOL_SERVER`` /
``TESSERA_TOOL_PYTHON`` itself and hands its whole environment to the fork server, whose
child takes it with :func:`adopt_environment`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tessera.errors import TesseraError

DEFAULT_GRAPH_PASSES: tuple[str, ...] = (
    "canonicalize",
    "algebraic-simplify",
    "spectral-rewrite",
    "cse",
    "fuse-attention",
    "fuse-matmul-epilogue",
    "fuse-elementwise",
    "fused-f32-intermediates",
    "merge-sibling-reductions",
    "dce",
)
"""The graph pipeline, in order (pass names of ``tessera-opt``): the one definition of
it. Attention and epilogue fusion run before elementwise fusion so that the scale, mask,
bias and activation ops they absorb are still standalone; fused bodies of functions that
ask for it compute their 16-bit intermediates in f32; sibling reductions merge once
their bodies are fused."""

TileConfig = tuple[int, int, int, int, int]
"""An sm90 matmul tile configuration as plain numbers: ``(bn, stages, consumers, group_m,
cluster)`` (``tessera.passes.matmul_config.Sm90Config``)."""


class OptionsError(TesseraError, ValueError):
    """An option value or ``TESSERA_*`` variable that Tessera does not accept."""


def _flag(env: dict[str, str] | os._Environ[str], name: str) -> bool | None:
    """A boolean variable: None when unset, False for ``""``/``0``, True otherwise."""
    v = env.get(name)
    if v is None:
        return None
    return v not in ("", "0")


@dataclass(frozen=True)
class Device:
    """The CUDA device compiled for: its name and compute capability."""

    name: str
    capability: tuple[int, int]

    @property
    def arch(self) -> str:
        """``sm_XY``."""
        return f"sm_{self.capability[0]}{self.capability[1]}"


@functools.lru_cache(maxsize=16)
def _device_at(index: int) -> Device | None:
    import torch

    try:
        return Device(
            torch.cuda.get_device_name(index), tuple(torch.cuda.get_device_capability(index))
        )
    except Exception:  # a broken driver: compile as if there were no device
        return None


def _no_driver() -> bool:
    """Whether this is a Linux machine without the NVIDIA driver (then there is no CUDA
    device to ask torch about, and torch need not be imported to find that out)."""
    if not sys.platform.startswith("linux"):
        return False
    return not (Path("/proc/driver/nvidia").exists() or Path("/dev/nvidiactl").exists())


def current_device() -> Device | None:
    """The current CUDA device (torch's), or None when there is none (or no torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        if _no_driver():
            return None
        try:
            import torch
        except ImportError:
            return None
    try:
        if not torch.cuda.is_available():
            return None
        return _device_at(torch.cuda.current_device())
    except Exception:
        return None


@dataclass(frozen=True)
class CompileOptions:
    """What decides the generated code besides the IR (see the module docstring)."""

    arch: str | None = None
    """The compute capability compiled for (``"sm_90"``), None without a GPU."""
    device: str = ""
    """The device's name ("" without a GPU): tuned tile configs are per device."""
    sm90_kernels: bool = False
    """Lower bf16/f16 matmuls and attention to the sm_90a TMA + wgmma kernels
    (``lower-matmul-sm90``, ``lower-attention-sm90``)."""
    sm90_attention_bwd: bool = True
    """With :attr:`sm90_kernels`: lower ``flash_attention_bwd`` to the TMA + wgmma backward
    kernels (``tessera.passes.sm90.attention_bwd_sm90``); False keeps the ``mma.sync`` ones."""
    autotune: bool = False
    """Time the sm90 tile configs of a matmul shape with no tuned entry (needs the GPU)."""
    sm90_tiles: tuple[tuple[str, TileConfig], ...] = ()
    """Tuned sm90 matmul tile configs of :attr:`device`, as ``(shape key, config)`` pairs
    sorted by key (``tessera.tuning.sm90``); shapes without one use the heuristic."""
    allow_tf32: bool = False
    """f32 matmuls may round their operands to TF32 (10-bit mantissa) and run as one TF32
    tensor-core product (``torch.backends.cuda.matmul.allow_tf32``'s trade); False keeps
    full f32 accuracy (on sm90: the error-compensated 3xTF32 product)."""
    implicit_conv: bool = True
    """With :attr:`sm90_kernels`: ``conv2d`` (bf16, f16 and f32 on TF32 parts) as the
    implicit-GEMM wgmma kernel (``tessera.passes.sm90.conv_implicit``; pointwise
    convolutions as one batched GEMM) instead of im2col + GEMM
    (``TESSERA_IMPLICIT_CONV=0``)."""
    graph_passes: tuple[str, ...] = DEFAULT_GRAPH_PASSES
    """The graph pipeline (pass names, in order)."""
    deterministic: bool = True
    """Same inputs, same mesh: bitwise-identical outputs. Kernels always reduce in a fixed
    order; with False, ``lower-graph-to-tile`` lowers every ``all_reduce`` as
    ``nondeterministic`` (the communication library's reduction order, faster), as
    ``ts.all_reduce(..., nondeterministic=True)`` asks for one collective."""
    allow_tf32: bool = False
    """f32 matmuls may round their operands to TF32 (10-bit mantissa) on tensor cores and
    accumulate in f32. Passed to ``lower-graph-to-tile`` (``allow-tf32``), where the f32
    GEMM lowering chooses its kernel; off, f32 matmuls are computed in full f32."""
    split_k: str = "auto"
    """Split-K of sm90 matmuls whose output tiles are too few for the SMs: ``"auto"`` (the
    cost rule of ``tessera.passes.matmul_config.split_k``), ``"off"`` or a count
    ``"N"`` of K ranges wherever the product may split. Partials are added in a fixed
    order (deterministic)."""
    sm90_store: str = "staged"
    """With :attr:`sm90_kernels`: how matmul results that the TMA store does not take (f32
    results, split-K's f32 partials, 16-bit results with N % 8 != 0) leave the kernel:
    ``"staged"`` (each consumer warpgroup moves its tile through a shared-memory buffer
    and stores whole rows, coalesced: ``tessera.passes.sm90.staged_store``) or
    ``"registers"`` (``st.global`` straight from the accumulator fragment, the earlier
    path, kept for comparison). Both store the same bits (``TESSERA_SM90_STORE``)."""
    dump_dir: str | None = field(default=None, compare=False)
    """Write every IR stage of every compile under this folder."""

    def __post_init__(self) -> None:
        if self.sm90_store not in ("staged", "registers"):
            raise OptionsError(f"CompileOptions: sm90_store must be 'staged' or 'registers', "
                               f"got {self.sm90_store!r}")
        if not (self.split_k in ("off", "auto") or self.split_k.isdigit() and int(self.split_k) >= 1):
            raise OptionsError(f"CompileOptions: split_k must be 'off', 'auto' or a count >= 1, "
                               f"got {self.split_k!r}")
    debug: bool = field(default=False, compare=False)
    """Show internal tracebacks (``tessera-opt``)."""

    @staticmethod
    def from_env(
        env: dict[str, str] | None = None, device: Device | None | bool = True, **overrides: Any
    ) -> CompileOptions:
        """Options from ``TESSERA_*`` variables (``env``, default ``os.environ``) and the
        current device (``device=True``: query it; a :class:`Device` or None: use that),
        then ``overrides`` (field names)."""
        e = os.environ if env is None else env
        dev = current_device() if device is True else device or None
        arch = dev.arch if dev is not None else None
        sm90 = _flag(e, "TESSERA_SM90_MATMUL")
        opts = CompileOptions(
            arch=arch,
            device=dev.name if dev is not None else "",
            sm90_kernels=arch == "sm_90" if sm90 is None else sm90,
            sm90_attention_bwd=_flag(e, "TESSERA_SM90_ATTENTION_BWD") is not False,
            autotune=bool(_flag(e, "TESSERA_AUTOTUNE")),
            deterministic=_flag(e, "TESSERA_DETERMINISTIC") is not False,
            allow_tf32=bool(_flag(e, "TESSERA_ALLOW_TF32")),
            split_k=e.get("TESSERA_SPLIT_K", "auto").strip().lower() or "auto",
            implicit_conv=_flag(e, "TESSERA_IMPLICIT_CONV") is not False,
            sm90_store=e.get("TESSERA_SM90_STORE", "staged").strip().lower() or "staged",
            dump_dir=e.get("TESSERA_DUMP_DIR") or None,
            debug=bool(_flag(e, "TESSERA_DEBUG")),
        )
        return opts.replace(**overrides) if overrides else opts

    def replace(self, **changes: Any) -> CompileOptions:
        """A copy with ``changes``; an unknown field name is an :class:`OptionsError`."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise OptionsError(
                f"CompileOptions: unknown option(s) {', '.join(unknown)}; "
                f"options: {', '.join(sorted(names))}"
            )
        if "graph_passes" in changes:
            changes["graph_passes"] = tuple(changes["graph_passes"])
        if "sm90_tiles" in changes:
            changes["sm90_tiles"] = tuple(sorted((str(k), tuple(v)) for k, v in changes["sm90_tiles"]))
        return dataclasses.replace(self, **changes)

    def key(self) -> str:
        """A stable digest of the fields that change the generated code (the same in every
        process, unlike ``hash``)."""
        parts = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.compare
        }
        text = json.dumps(parts, sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()

    def sm90_tile(self, shape_key: str) -> TileConfig | None:
        """The tuned config of ``shape_key`` (``tessera.tuning.sm90.shape_key``), or None."""
        for k, cfg in self.sm90_tiles:
            if k == shape_key:
                return cfg
        return None


@dataclass(frozen=True)
class RuntimeOptions:
    """Switches of loading and launching; none of them changes the generated code."""

    disk_cache: bool = True
    """Keep compiled programs and cubins on disk under :func:`cache_root`."""
    ptxas: str | None = None
    """The ptxas executable (else found on ``PATH`` or in the ``nvidia-cuda-nvcc`` wheel)."""
    cuda_sync: bool = False
    """Synchronize the stream after every launch (errors at the launch that caused them)."""
    cuda_graphs: bool = False
    """Replay a host plan's repeated launches as one CUDA graph
    (:mod:`tessera.runtime.cuda_graphs`)."""
    check_kernels: bool = False
    """Check every kernel launch against the Tile IR interpreter
    (:mod:`tessera.runtime.kernel_check`)."""
    interpret_tile: bool = False
    """Run CPU calls of compiled functions on their Tile IR (the GPU lowering, kernels
    and host function) in the Tile IR interpreter rather than on the Graph IR
    interpreter (:func:`tessera.runtime.dispatch.run_on_cpu`)."""
    progress: bool = True
    """Draw progress bars (on a terminal only)."""
    progress_min_steps: int | None = None
    """Fewest passes a compile stage needs before it gets a bar (None: the default)."""

    @staticmethod
    def from_env(env: dict[str, str] | None = None) -> RuntimeOptions:
        e = os.environ if env is None else env
        steps = e.get("TESSERA_PROGRESS_MIN_STEPS")
        try:
            min_steps = int(steps) if steps not in (None, "") else None
        except ValueError:
            raise OptionsError(
                f"TESSERA_PROGRESS_MIN_STEPS={steps!r} is not an integer"
            ) from None
        return RuntimeOptions(
            disk_cache=not _flag(e, "TESSERA_NO_DISK_CACHE"),
            ptxas=e.get("TESSERA_PTXAS") or None,
            cuda_sync=bool(_flag(e, "TESSERA_CUDA_SYNC")),
            cuda_graphs=bool(_flag(e, "TESSERA_CUDA_GRAPHS")),
            check_kernels=bool(_flag(e, "TESSERA_CHECK_KERNELS")),
            interpret_tile=bool(_flag(e, "TESSERA_INTERPRET_TILE")),
            progress=e.get("TESSERA_PROGRESS", "") != "0",
            progress_min_steps=min_steps,
        )


def cache_root(env: dict[str, str] | None = None) -> Path:
    """The folder of every on-disk cache: ``$TESSERA_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/tessera``, else the platform's user cache folder
    (``~/Library/Caches/tessera`` on macOS, ``%LOCALAPPDATA%\\tessera\\Cache`` on
    Windows, ``~/.cache/tessera`` elsewhere), as ``platformdirs`` resolves it."""
    e = os.environ if env is None else env
    explicit = e.get("TESSERA_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = e.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():  # the XDG spec ignores relative paths
        return Path(xdg) / "tessera"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "tessera"
    if sys.platform == "win32":
        local = e.get("LOCALAPPDATA")
        base = Path(local) if local else Path.home() / "AppData" / "Local"
        return base / "tessera" / "Cache"
    return Path.home() / ".cache" / "tessera"


def adopt_environment(env: Mapping[str, str]) -> None:
    """Make ``env`` this process's whole environment (the tool server's forked child
    becomes its client's command, with the client's variables)."""
    os.environ.clear()
    os.environ.update(env)


def process_group_env(free_port: Callable[[], int]) -> int:
    """Prepare torch.distributed's ``env://`` rendezvous and return this process's local
    rank: torchrun's variables when set (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT``, ``LOCAL_RANK``); without them, a one-process group on localhost on
    the port ``free_port()`` gives."""
    if "RANK" not in os.environ:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
    return int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
