"""Tessera's dialects and passes, registered lazily for ``tessera-opt`` and ``xdsl-opt``.

Stock ``xdsl-opt`` finds this universe through the ``xdsl.universe`` entry point
in ``pyproject.toml``.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Dialect
from xdsl.universe import Universe
from xdsl.utils.target import Target

from tessera.passes import ALL_PASSES


def _tessera() -> Dialect:
    from tessera.ir.attrs import Tessera

    return Tessera


def _graph() -> Dialect:
    from tessera.ir.graph import Graph

    return Graph


def _tile() -> Dialect:
    from tessera.ir.tile import Tile

    return Tile


def _target() -> Dialect:
    from tessera.ir.target import Target

    return Target


def _ptx_target() -> type[Target]:
    from tessera.passes.emit_ptx import PtxTarget

    return PtxTarget


ALL_DIALECTS: dict[str, Callable[[], Dialect]] = {
    "tessera": _tessera,
    "tgraph": _graph,
    "ttile": _tile,
    "ttarget": _target,
}

ALL_TARGETS: dict[str, Callable[[], type[Target]]] = {
    "ptx": _ptx_target,
}

TESSERA_UNIVERSE = Universe(
    all_dialects=ALL_DIALECTS, all_passes=ALL_PASSES, all_targets=ALL_TARGETS
)
