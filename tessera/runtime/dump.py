"""``TESSERA_DUMP_DIR``: write every IR stage of every compile to files.

With ``TESSERA_DUMP_DIR=/some/dir`` set, each compiled specialization of a
``@ts.jit`` function gets a folder ``<function>-<signature hash>/`` holding one
file per stage, numbered in the order they were produced::

    00-traced.mlir           the traced Graph IR
    01-canonicalize.mlir     the IR after each graph-pipeline pass
    ...
    09-dce.mlir              (the last pass of the default pipeline)
    10-graph.mlir            the optimized Graph IR
    11-tile.mlir             Tile IR, Target IR and PTX, when they are built
    12-target.mlir           (a GPU call or inspect_ir("tile" | "target" | "ptx"))
    13-ptx.ptx

(the numbers follow the pipeline's passes: tools should match ``*-graph.mlir``).

The signature hash covers the specialization key (argument shapes, dtypes,
policies, static values) and the traced IR, so two signatures of one function,
or two functions of one name, get different folders. Files of an earlier run
in a folder this process writes to first are removed.
"""

from __future__ import annotations

import hashlib
import re
import weakref
from pathlib import Path
from typing import Any

ENV = "TESSERA_DUMP_DIR"

_STAGE_FILE = re.compile(r"^\d\d+-.*\.(mlir|ptx)$")


def signature_hash(spec: Any) -> str:
    """A short hash of a specialization's key and traced IR."""
    h = hashlib.sha256(repr(spec.key).encode())
    h.update(str(spec.traced).encode())
    return h.hexdigest()[:12]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class DumpObserver:
    """A compile observer writing each stage under ``root``."""

    def __init__(self, root: Path):
        self.root = root
        self._folders: dict[int, tuple[weakref.ref[Any], Path, list[int]]] = {}

    def folder(self, spec: Any) -> Path:
        """The folder of ``spec`` (created, and cleared of old stage files, on first use)."""
        entry = self._folders.get(id(spec))
        if entry is not None and entry[0]() is spec:
            return entry[1]
        path = self.root / f"{_safe(spec.name)}-{signature_hash(spec)}"
        path.mkdir(parents=True, exist_ok=True)
        for old in path.iterdir():
            if _STAGE_FILE.match(old.name):
                old.unlink()
        self._folders[id(spec)] = (weakref.ref(spec), path, [0])
        return path

    def write(self, spec: Any, stage: str, ir: Any) -> Path:
        """Write ``ir`` (a module or PTX text) as the next numbered file of ``spec``."""
        path = self.folder(spec)
        counter = self._folders[id(spec)][2]
        ext = "ptx" if stage == "ptx" else "mlir"
        out = path / f"{counter[0]:02d}-{_safe(stage)}.{ext}"
        counter[0] += 1
        text = ir if isinstance(ir, str) else str(ir)
        out.write_text(text if text.endswith("\n") else text + "\n")
        return out

    def begin(self, spec: Any, level: str, steps: int) -> None:
        pass

    def pass_done(self, spec: Any, name: str, module: Any, seconds: float) -> None:
        self.write(spec, name, module)

    def stage(self, spec: Any, level: str, ir: Any, seconds: float) -> None:
        self.write(spec, level, ir)


_OBSERVERS: dict[str, DumpObserver] = {}


def observers(root: str | None) -> list[DumpObserver]:
    """The dump observer writing under ``root`` (``CompileOptions.dump_dir``, from
    ``$TESSERA_DUMP_DIR``); none when it is None or empty."""
    if not root:
        return []
    obs = _OBSERVERS.get(root)
    if obs is None:
        obs = _OBSERVERS[root] = DumpObserver(Path(root))
    return [obs]
