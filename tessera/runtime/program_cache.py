"""Persistent cache of compiled programs, one entry per compiled signature.

A compiled ``@ts.jit`` signature is, for running it, two pieces of text: the PTX
of its kernels and its *launch module*, the Target-level module with every
kernel's body cut down to ``ttarget.ret`` (the host ``func.func`` that allocates
outputs and launches kernels, the ``memref.global`` constants it uses, and each
``ttarget.func``'s name, parameter types and block size). Both are stored as one
JSON file under ``<cache root>/programs/`` (:func:`tessera.options.cache_root`),
so a fresh process that traces the same function with the same signature skips
the graph pipeline and both lowerings: it parses the small launch module and
hands the PTX to the cubin cache (:mod:`tessera.runtime.cache`).

The key (:func:`program_key`) is the sha256 of

* the compile options' key (``CompileOptions.key()``: device, enabled kernels,
  tuned tile configs, graph pipeline; everything besides the IR that changes the
  generated code);
* the source: the traced Graph IR as text and the specialization's name, tensor
  parameters and result form, as the compiler driver (:mod:`tessera.compiler`)
  passes them;
* the compiler (:func:`compiler_fingerprint`): a hash of every ``.py`` file of the
  ``tessera`` package and the versions of Tessera, xDSL, numpy, ml_dtypes and Python.

Entries carry a sha256 checksum of their PTX and launch text and are written
atomically (temp file + rename, the temp file removed on failure). An entry that
cannot be read, has another form, fails its checksum (an edited PTX) or whose
launch text does not parse is reported with a warning, removed, and replaced by
the rebuilt program: no entry can wedge a signature. ``TESSERA_NO_DISK_CACHE=1``
turns this cache (and the cubin cache) off.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from tessera.options import RuntimeOptions, cache_root
from tessera.runtime.cache import write_atomic

FORMAT = 2
"""Version of the entry layout; part of the key and checked on load."""


@dataclass(frozen=True)
class CompiledProgram:
    """What running a specialization needs: its PTX and its launch module's text."""

    ptx: str
    launch: str

    def checksum(self) -> str:
        h = hashlib.sha256(self.ptx.encode())
        h.update(b"\0")
        h.update(self.launch.encode())
        return h.hexdigest()


def enabled() -> bool:
    """Whether the disk caches are on (``TESSERA_NO_DISK_CACHE`` unset or empty)."""
    return RuntimeOptions.from_env().disk_cache


def programs_dir() -> Path:
    """The folder of program entries: ``cache_root() / "programs"``."""
    return cache_root() / "programs"


# --------------------------------------------------------------------------- keys


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of the compiler itself: every ``tessera/**/*.py`` file and the versions of
    Tessera, xDSL, numpy, ml_dtypes and Python (computed once per process)."""
    import ml_dtypes
    import numpy
    import xdsl

    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    try:
        version = metadata.version("tessera")
    except metadata.PackageNotFoundError:
        version = ""
    for part in (
        version, getattr(xdsl, "__version__", ""), numpy.__version__, ml_dtypes.__version__,
        sys.version,
    ):
        h.update(str(part).encode())
        h.update(b"\0")
    return h.hexdigest()


def program_key(options_key: str, source: Sequence[str]) -> str:
    """The cache key of a program: the options' key, the source parts (traced IR text,
    name, parameters ...) and :func:`compiler_fingerprint`."""
    h = hashlib.sha256()
    for part in (f"format={FORMAT}", compiler_fingerprint(), options_key, *source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


# --------------------------------------------------------------------------- entries


def entry_path(key: str) -> Path:
    return programs_dir() / f"{key}.json"


def _reject(path: Path, why: str) -> None:
    warnings.warn(
        f"tessera: ignoring corrupt compile cache entry {path} ({why}); rebuilding it",
        stacklevel=4,
    )
    with contextlib.suppress(OSError):
        path.unlink()


def load(key: str) -> CompiledProgram | None:
    """The stored program of ``key``; None when absent. A damaged entry (unreadable, of
    another form, or failing its checksum) gives a warning naming its file, is removed,
    and None is returned, so the caller rebuilds and stores the program again."""
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
        program = CompiledProgram(ptx=ptx, launch=launch)
        if data.get("sha256") != program.checksum():
            raise ValueError("checksum mismatch: the PTX or launch text was changed")
    except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        _reject(path, str(e))
        return None
    return program


def discard(key: str, why: str) -> None:
    """Remove the entry of ``key`` with a warning (its launch text did not load)."""
    _reject(entry_path(key), why)


def store(key: str, program: CompiledProgram) -> Path | None:
    """Write an entry atomically; returns its path, None if the cache is not writable."""
    data = {
        "format": FORMAT, "key": key, "sha256": program.checksum(),
        "ptx": program.ptx, "launch": program.launch,
    }
    path = entry_path(key)
    try:
        write_atomic(path, json.dumps(data).encode())
    except OSError:
        return None
    return path


# --------------------------------------------------------------------------- launch modules


def launch_module_text(target: Any) -> str:
    """The launch module of a Target-level module as text: a copy with every
    ``ttarget.func`` replaced by one of the same name, parameters, block size and
    target whose body is a single ``ttarget.ret``."""
    from xdsl.dialects.builtin import ModuleOp

    from tessera.ir import target as tt

    ops = []
    for op in target.body.block.ops:  # kernel bodies are not copied: they can be large
        if isinstance(op, tt.FuncOp):
            params = [p.type.ty.data for p in op.block.args]
            stub = tt.FuncOp(
                op.sym_name.data, params, op.maxntid.data, op.target.data,
                cluster=op.cluster.data if op.cluster is not None else None,
                minnctapersm=op.minnctapersm.data if op.minnctapersm is not None else None,
            )
            stub.block.add_op(tt.RetOp())
            ops.append(stub)
        else:
            ops.append(op.clone())
    m = ModuleOp(ops)
    m.attributes.update(target.attributes)
    return str(m)


def parse_launch_module(text: str) -> Any:
    """Parse and verify a launch module's text (from :func:`launch_module_text`); raises
    xDSL's ``ParseError``/``VerifyException`` (or a ``ValueError``) when it is not one."""
    from xdsl.dialects.memref import MemRef
    from xdsl.parser import Parser

    from tessera.ir.context import default_context

    ctx = default_context()
    if MemRef.name not in ctx.registered_dialect_names:
        ctx.load_dialect(MemRef)
    module = Parser(ctx, text).parse_module()
    module.verify()
    return module
