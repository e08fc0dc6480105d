"""``from tessera import graph``: ``@graph.module("name")`` compiles an operator graph."""

from tessera.frontend.jit import CompiledFunction, module

__all__ = ["CompiledFunction", "module"]
