"""Per-op knowledge, registered the same way for every concern.

Each concern that knows something about individual ops (the numpy semantics of a
Graph IR op, its Tile IR lowering, its adjoint, its cost, its sharding rule, the
Target IR lowering of a Tile IR op) keeps an :class:`OpRegistry`, and an entry is a function registered with
a decorator next to the others of its family::

    COSTS = OpRegistry[CostRule]("cost")

    @COSTS.register(g.ElementwiseUnaryOp, g.ElementwiseBinaryOp)
    def _elementwise(op): ...

A lookup takes the op's class or, when that has no entry, the nearest registered
base class (method resolution order), so a rule registered for a family base such
as ``ElementwiseUnaryOp`` covers every op of the family and a more specific entry
(``MeanOp`` under ``ReductionOp``) wins over it. Registering one class twice in a
registry is an error (two modules silently overriding each other is how rules get
lost). :meth:`OpRegistry.lookup` raises a :class:`UnregisteredOpError` naming the
concern and the op; :meth:`OpRegistry.get` returns ``None`` for callers that have
their own answer for an unknown op.

docs/ARCHITECTURE.md ("Adding an op") lists the registries an op needs an entry in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from xdsl.ir import Operation

from tessera.errors import TesseraError

F = TypeVar("F", bound=Callable[..., object])


class UnregisteredOpError(TesseraError, NotImplementedError):
    """An op with no entry in the registry of a concern (no lowering, no adjoint ...)."""


class OpRegistry(Generic[F]):
    """Functions of one concern by op class, filled with the :meth:`register` decorator."""

    def __init__(self, concern: str):
        self.concern = concern
        self._entries: dict[type[Operation], F] = {}
        self._resolved: dict[type[Operation], F | None] = {}

    def register(self, *ops: type[Operation]) -> Callable[[F], F]:
        """Register the decorated function for the op classes ``ops`` (and, unless they
        have entries of their own, their subclasses)."""
        if not ops:
            raise TesseraError(f"{self.concern} registry: register() needs at least one op class")

        def deco(fn: F) -> F:
            for t in ops:
                if t in self._entries:
                    raise TesseraError(
                        f"{self.concern} registry: {_name(t)} is registered twice "
                        f"({_qual(self._entries[t])} and {_qual(fn)})"
                    )
                self._entries[t] = fn
            self._resolved.clear()
            return fn

        return deco

    def get(self, op: Operation | type[Operation]) -> F | None:
        """The entry of ``op``'s class or of its nearest registered base (None if none)."""
        t = op if isinstance(op, type) else type(op)
        try:
            return self._resolved[t]
        except KeyError:
            pass
        found = next((self._entries[c] for c in t.__mro__ if c in self._entries), None)
        self._resolved[t] = found
        return found

    def lookup(self, op: Operation, where: str = "") -> F:
        """The entry of ``op``; an :class:`UnregisteredOpError` naming the concern, the op
        and ``where`` (a pass name, a function) when there is none."""
        fn = self.get(op)
        if fn is None:
            prefix = f"{where}: " if where else ""
            raise UnregisteredOpError(f"{prefix}{op.name}: no {self.concern} is registered for this op")
        return fn

    def __contains__(self, op: Operation | type[Operation]) -> bool:
        return self.get(op) is not None

    def __iter__(self) -> Iterator[type[Operation]]:
        """The op classes registered directly (not their subclasses)."""
        return iter(self._entries)

    def names(self) -> tuple[str, ...]:
        """Sorted names of the op classes registered directly."""
        return tuple(sorted(_name(t) for t in self._entries))

    def __repr__(self) -> str:
        return f"OpRegistry({self.concern!r}, {len(self._entries)} ops)"


def _name(t: type[Operation]) -> str:
    name = getattr(t, "name", None)
    return name if isinstance(name, str) else t.__name__


def _qual(fn: object) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"
