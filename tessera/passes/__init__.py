"""Tessera's passes, one module per pass, registered here by their command-line name.

Each entry maps the pass name (as used in ``tessera-opt -p NAME``) to a function
returning the pass class, so importing this package stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass

ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {}


def _autodiff() -> type[ModulePass]:
    from tessera.passes.autodiff import AutodiffPass

    return AutodiffPass


ALL_PASSES["autodiff"] = _autodiff
