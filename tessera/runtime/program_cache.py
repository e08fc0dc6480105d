"""Persistent cache of compiled programs, one entry per compiled signature.

A compiled :class:`~tessera.frontend.jit.Specialization` is, for running it, two
pieces of text: the PTX of its kernels and its *launch module*, the Target-level
module with every kernel's body cut down to ``ttarget.ret`` (the host ``func.func`` that allocates
outputs and launches kernels, the ``memref.global`` constants it uses, and each
``ttarget.func``'s name, parameter types and block size). Both are stored as one
JSON file under ``$TESSERA_CACHE_DIR/programs/`` (default
``~/.cache/tessera/programs``), so a fresh process that traces the same function
with the same signature skips the graph pipeline and both lowerings: it parses
the small launch module and hands the PTX to the cubin cache
(:mod:`tessera.runtime.cache`).

The key (:func:`program_key`) is the sha256 of everything that changes the result:

* the traced Graph IR as text: the function body, static arguments, each tensor
  argument's shape, dtype and numeric policy, the mesh;
* the symbol name, the tensor parameters and whether the result is a tuple;
* the compiler: a hash of every ``.py`` file of the ``tessera`` package, its
  version, and the versions of xDSL, numpy, ml_dtypes and Python;
* what the lowering reads besides the IR (:func:`lowering_context`): every
  ``TESSERA_*`` environment variable except those that only steer caching,
  logging or launching (:data:`NEUTRAL_ENV`), the current CUDA device's name and
  compute capability (which decide, with ``TESSERA_SM90_MATMUL``, whether matmuls
  lower for sm90), and the contents of the sm90 autotuning cache file.

Programs that depend on Python state of the process are never cached
(:func:`cacheable`): a traced ``custom_vjp`` (its rule is a Python callback),
a graph pass registered from outside Tessera and xDSL, a replaced lowering in
:data:`tessera.frontend.jit.LOWERINGS`, or an active compile observer (a
profiler session or ``TESSERA_DUMP_DIR`` wants to see every pass run). Set
``TESSERA_NO_DISK_CACHE=1`` to turn this cache (and the cubin cache) off.

Entries are written atomically (temp file + rename). An entry that cannot be
read or does not have the expected form is reported with a warning, ignored, and
replaced by the rebuilt program.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tessera.runtime.cache import cache_dir

FORMAT = 1
"""Version of the entry layout; part of the key and checked on load."""

NEUTRAL_ENV: frozenset[str] = frozenset({
    "TESSERA_CACHE_DIR", "TESSERA_NO_DISK_CACHE", "TESSERA_DUMP_DIR", "TESSERA_PROGRESS",
    "TESSERA_PROGRESS_MIN_STEPS", "TESSERA_CUDA_SYNC", "TESSERA_PTXAS", "TESSERA_DEBUG",
    "TESSERA_BENCH",
})
"""``TESSERA_*`` variables that do not change the compiled program (left out of the key)."""

CUSTOM_VJP_ATTR = "tessera.custom_vjp"


@dataclass(frozen=True)
class CompiledProgram:
    """What running a specialization needs: its PTX and its launch module's text."""

    ptx: str
    launch: str


def enabled() -> bool:
    """Whether the disk caches are on (``TESSERA_NO_DISK_CACHE`` unset or empty)."""
    return not os.environ.get("TESSERA_NO_DISK_CACHE")


def programs_dir() -> Path:
    """The folder of program entries: ``cache_dir() / "programs"``."""
    return cache_dir() / "programs"


# --------------------------------------------------------------------------- keys


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of the compiler itself: every ``tessera/**/*.py`` file and the versions of
    Tessera, xDSL, numpy, ml_dtypes and Python (computed once per process)."""
    import ml_dtypes
    import numpy
    import xdsl

    import tessera

    h = hashlib.sha256()
    root = Path(tessera.__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    for part in (
        getattr(tessera, "__version__", ""), getattr(xdsl, "__version__", ""),
        numpy.__version__, ml_dtypes.__version__, sys.version,
    ):
        h.update(str(part).encode())
        h.update(b"\0")
    return h.hexdigest()


def _device() -> str:
    """The current CUDA device's name and compute capability, or "none"."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            return "none"
    try:
        if not torch.cuda.is_available():
            return "none"
        index = torch.cuda.current_device()
        return f"{torch.cuda.get_device_name(index)}|{torch.cuda.get_device_capability(index)}"
    except Exception as e:  # a broken driver: lowering sees no device either
        return f"none ({type(e).__name__})"


def _file_hash(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "absent"


def lowering_context() -> list[str]:
    """What the lowering depends on besides the IR (see the module docstring)."""
    from tessera.passes.matmul_config import cache_path

    env = sorted(
        f"{k}={v}" for k, v in os.environ.items()
        if k.startswith("TESSERA_") and k not in NEUTRAL_ENV
    )
    return [
        *env,  # TESSERA_SM90_MATMUL among them
        f"device={_device()}",  # what lower_matmul_sm90.selected() reads when that is unset
        f"autotune={_file_hash(cache_path())}",
    ]


def cacheable(spec: Any, traced_text: str) -> bool:
    """Whether ``spec``'s program depends only on what :func:`program_key` covers."""
    from tessera.frontend import jit
    from tessera.passes.pipelines import GRAPH_PASSES
    from tessera.runtime import dump

    if not enabled() or jit.COMPILE_OBSERVERS or dump.observers():
        return False
    if CUSTOM_VJP_ATTR in traced_text:
        return False
    for _, factory in GRAPH_PASSES:
        if not getattr(factory, "__module__", "").startswith(("tessera.", "xdsl.")):
            return False
    return all(
        getattr(jit.LOWERINGS.get(level), "__module__", "").startswith("tessera.")
        for level in ("tile", "target", "ptx")
    )


def program_key(spec: Any) -> str | None:
    """The cache key of ``spec``'s compiled program, None if it must not be cached."""
    traced = str(spec.traced)
    if not cacheable(spec, traced):
        return None
    h = hashlib.sha256()
    parts = [
        f"format={FORMAT}",
        compiler_fingerprint(),
        spec.name,
        ",".join(spec.tensor_params),
        str(spec.returns_tuple),
        *lowering_context(),
        traced,
    ]
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


# --------------------------------------------------------------------------- entries


def entry_path(key: str) -> Path:
    return programs_dir() / f"{key}.json"


def load(key: str) -> CompiledProgram | None:
    """The stored program of ``key``; None when absent. A damaged entry gives a warning
    (naming its file) and None, so the caller rebuilds and overwrites it."""
    path = entry_path(key)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        warnings.warn(f"tessera: cannot read compile cache entry {path}: {e}", stacklevel=3)
        return None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("format") != FORMAT or data.get("key") != key:
            raise ValueError("format or key does not match its file name")
        ptx, launch = data.get("ptx"), data.get("launch")
        if not isinstance(ptx, str) or not isinstance(launch, str) or not ptx or not launch:
            raise ValueError("'ptx' or 'launch' missing")
    except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        warnings.warn(
            f"tessera: ignoring corrupt compile cache entry {path} ({e}); rebuilding it",
            stacklevel=3,
        )
        return None
    return CompiledProgram(ptx=ptx, launch=launch)


def store(key: str, program: CompiledProgram) -> Path | None:
    """Write an entry atomically; returns its path, None if the cache is not writable."""
    d = programs_dir()
    data = {"format": FORMAT, "key": key, "ptx": program.ptx, "launch": program.launch}
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        final = entry_path(key)
        os.replace(tmp, final)
        return final
    except OSError:
        return None


# --------------------------------------------------------------------------- launch modules


def launch_module_text(target: Any) -> str:
    """The launch module of a Target-level module as text: a copy with every
    ``ttarget.func`` replaced by one of the same name, parameters, block size and
    target whose body is a single ``ttarget.ret``."""
    from tessera.ir import target as tt

    m = target.clone()
    for op in list(m.body.block.ops):
        if isinstance(op, tt.FuncOp):
            params = [p.type.ty.data for p in op.block.args]
            stub = tt.FuncOp(op.sym_name.data, params, op.maxntid.data, op.target.data)
            stub.block.add_op(tt.RetOp())
            m.body.block.insert_op_before(stub, op)
            m.body.block.erase_op(op)
    return str(m)


def parse_launch_module(text: str) -> Any:
    """Parse a launch module's text (from :func:`launch_module_text`)."""
    from xdsl.dialects.memref import MemRef
    from xdsl.parser import Parser

    from tessera.passes.pipelines import default_context

    ctx = default_context()
    if MemRef.name not in ctx.registered_dialect_names:
        ctx.load_dialect(MemRef)
    return Parser(ctx, text).parse_module()
