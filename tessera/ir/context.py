"""Tessera's dialects, registered lazily, and the parsing context that holds them."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.context import Context
from xdsl.ir import Dialect


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


ALL_DIALECTS: dict[str, Callable[[], Dialect]] = {
    "tessera": _tessera,
    "tgraph": _graph,
    "ttile": _tile,
    "ttarget": _target,
}
"""Tessera's dialects by name (loaded on first use)."""


def default_context() -> Context:
    """A context with every Tessera dialect and xDSL's builtin/func/arith/scf loaded."""
    from xdsl.dialects.arith import Arith
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func
    from xdsl.dialects.scf import Scf

    ctx = Context()
    for d in (Builtin, Func, Arith, Scf):
        ctx.load_dialect(d)
    for name, factory in ALL_DIALECTS.items():
        if name not in ctx.registered_dialect_names:
            ctx.register_dialect(name, factory)
    return ctx
