"""JSON stores of tuning results, safe to share between processes.

Every update is a read-modify-write of one JSON object under an exclusive
``filelock`` lock (a ``.lock`` file next to the store), written to a temporary
file that replaces the store atomically; the temporary file is removed when the
write fails. A store that is missing, unreadable, not JSON, or JSON of another
shape reads as empty (entries that are not objects are dropped), so a damaged
store never crashes a compile: the next update rewrites it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from tessera.options import cache_root
from tessera.runtime.cache import write_atomic

LOCK_TIMEOUT = 60.0
"""Seconds an update waits for another process's lock before giving up (silently)."""


def store_path(name: str) -> Path:
    """The store ``name`` (``"matmul_sm90.json"``) under :func:`~tessera.options.cache_root`."""
    return cache_root() / name


def _read(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):  # absent, unreadable, not JSON or not UTF-8
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, dict)}


class JsonStore:
    """A JSON object of entries (each a JSON object) in one file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, dict[str, Any]]:
        """All entries (empty when the file is absent or damaged)."""
        return _read(self.path)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.read().get(key)

    def update(self, key: str, entry: dict[str, Any]) -> bool:
        """Set ``key`` to ``entry`` under the lock; False when the store is not writable."""
        return self.modify(lambda data: data.__setitem__(key, entry))

    def modify(self, change: Callable[[dict[str, dict[str, Any]]], None]) -> bool:
        """Apply ``change`` to the entries under the lock and write them back."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(self.path) + ".lock", timeout=LOCK_TIMEOUT):
                data = _read(self.path)
                change(data)
                write_atomic(self.path, json.dumps(data, indent=1, sort_keys=True).encode())
        except (OSError, Timeout):
            return False
        return True
