"""Tessera's dialects and passes, registered lazily for ``tessera-opt`` and ``xdsl-opt``.

Stock ``xdsl-opt`` finds this universe through the ``xdsl.universe`` entry point
in ``pyproject.toml``.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.universe import Universe
from xdsl.utils.target import Target

from tessera.ir.context import ALL_DIALECTS
from tessera.passes import ALL_PASSES


def _ptx_target() -> type[Target]:
    from tessera.passes.emit_ptx import PtxTarget

    return PtxTarget


ALL_TARGETS: dict[str, Callable[[], type[Target]]] = {
    "ptx": _ptx_target,
}

TESSERA_UNIVERSE = Universe(
    all_dialects=ALL_DIALECTS, all_passes=ALL_PASSES, all_targets=ALL_TARGETS
)
