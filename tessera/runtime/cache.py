"""Caches for compiled kernels, and the atomic file writes every disk cache uses.

* In memory: one loaded ``CUmodule`` per (PTX hash, device) for the life of the
  process (:class:`ModuleCache`, used by :mod:`tessera.runtime.cuda`).
* On disk: cubins under :func:`cache_dir` (:func:`tessera.options.cache_root`),
  keyed by :func:`cache_key` = sha256 of (PTX text, arch, ptxas version, driver
  version). The PTX is printed 1:1 from the Target IR, so its hash is the IR's
  hash. Each file starts with a checksum of its contents: a file that is
  truncated, edited or unreadable is treated as absent and rewritten.

:func:`write_atomic` writes a file through a temporary file in the same folder
and a rename, and removes the temporary file when anything fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tessera.options import cache_root

_MAGIC = b"tessera-cubin-1\0"
"""The start of a cubin file, followed by the sha256 of the cubin and the cubin."""


def cache_dir() -> Path:
    """Where cubins are kept: :func:`tessera.options.cache_root`."""
    return cache_root()


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (a temporary file in the same folder, then a
    rename); the temporary file never stays behind. Raises ``OSError`` on failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def cache_key(ptx: str, arch: str, toolchain: str, driver: str) -> str:
    """The disk cache key of one PTX module compiled for ``arch``."""
    h = hashlib.sha256()
    for part in (ptx, arch, toolchain, driver):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def cubin_path(key: str) -> Path:
    return cache_dir() / f"{key}.cubin"


def load_cubin(key: str) -> bytes | None:
    """The stored cubin of ``key``; None when absent, unreadable or failing its checksum."""
    try:
        raw = cubin_path(key).read_bytes()
    except OSError:
        return None
    head = len(_MAGIC) + 32
    if not raw.startswith(_MAGIC) or len(raw) <= head:
        return None
    digest, data = raw[len(_MAGIC):head], raw[head:]
    return data if hashlib.sha256(data).digest() == digest else None


def store_cubin(key: str, data: bytes) -> Path | None:
    """Write a cubin atomically; returns its path, None if the cache is not writable."""
    path = cubin_path(key)
    try:
        write_atomic(path, _MAGIC + hashlib.sha256(data).digest() + data)
    except OSError:
        return None
    return path


def discard_cubin(key: str) -> None:
    """Remove the stored cubin of ``key`` (one the driver refused to load)."""
    with contextlib.suppress(OSError):
        cubin_path(key).unlink()


def cubin_for(ptx: str, arch: str, toolchain: str, driver: str, build: Callable[[], bytes]) -> bytes:
    """The cached cubin for ``ptx``, building and storing it with ``build`` on a miss."""
    key = cache_key(ptx, arch, toolchain, driver)
    data = load_cubin(key)
    if data is None:
        data = build()
        store_cubin(key, data)
    return data


class ModuleCache:
    """Loaded modules of this process, by (PTX hash, device ordinal)."""

    def __init__(self) -> None:
        self._modules: dict[tuple[str, int], Any] = {}

    @staticmethod
    def key(ptx: str, device: int) -> tuple[str, int]:
        return hashlib.sha256(ptx.encode()).hexdigest(), device

    def get(self, ptx: str, device: int) -> Any | None:
        return self._modules.get(self.key(ptx, device))

    def put(self, ptx: str, device: int, module: Any) -> None:
        self._modules[self.key(ptx, device)] = module

    def __len__(self) -> int:
        return len(self._modules)

    def clear(self) -> None:
        self._modules.clear()
