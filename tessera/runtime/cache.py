"""Caches for compiled kernels.

* In memory: one loaded ``CUmodule`` per (PTX hash, device) for the life of the
  process (:class:`ModuleCache`, used by :mod:`tessera.runtime.cuda`).
* On disk: cubins under ``$TESSERA_CACHE_DIR`` (default ``~/.cache/tessera``),
  keyed by :func:`cache_key` = sha256 of (PTX text, arch, ptxas version,
  driver version). The PTX is printed 1:1 from the Target IR, so its hash is the
  IR's hash. Files are written atomically (temp file + rename); a corrupt or
  unreadable entry is treated as absent and rewritten.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """Where cubins are kept: ``$TESSERA_CACHE_DIR`` or ``~/.cache/tessera``."""
    env = os.environ.get("TESSERA_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "tessera"


def cache_key(ptx: str, arch: str, toolchain: str, driver: str) -> str:
    """The disk cache key of one PTX module compiled for ``arch``."""
    h = hashlib.sha256()
    for part in (ptx, arch, toolchain, driver):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def load_cubin(key: str) -> bytes | None:
    path = cache_dir() / f"{key}.cubin"
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data or None


def store_cubin(key: str, data: bytes) -> Path | None:
    """Write a cubin atomically; returns its path, None if the cache is not writable."""
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        final = d / f"{key}.cubin"
        os.replace(tmp, final)
        return final
    except OSError:
        return None


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
