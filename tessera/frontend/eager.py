"""Eager calls: an operator called outside a traced function, on arrays, runs at once.

``Y = op.matmul(A, B)`` at the top level of a script (the guide writes it so), with numpy
arrays or torch tensors, compiles a function of that one operator with ``ts.jit``, runs it
on the arguments and returns what the compiled function would: numpy arrays for numpy
arguments, torch tensors for torch ones (on their device). JAX dispatches ``jnp`` calls
op by op the same way.

* The compiled function is kept per (operator, non-array arguments), so a repeated call
  reuses it, and ``ts.jit``'s own cache keeps one specialization per shapes and dtypes.
* Arrays may sit in lists or tuples (``ts.concat([a, b])``); every other argument is a
  constant of the compiled function (a shape, an axis, ``tile_shape=``).
* A call with no array argument (``ts.constant(1.0)``), and any collective
  (``all_reduce`` ...), still raises the located error of a call outside a traced
  function: a collective needs the ranks of a mesh, which only a compiled function over
  one has.
"""

from __future__ import annotations

import functools
import numbers
import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.frontend.tracing import active_trace

NOT_EAGER = frozenset({
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_slice", "send", "recv",
})
"""Operators that never run eagerly (collectives: they need a mesh's ranks)."""

CACHE_SIZE = 256
"""Compiled one-operator functions kept (least recently used dropped first)."""

_CACHE: OrderedDict[tuple[Any, ...], Any] = OrderedDict()


class _Slot:
    """Where the ``index``-th array argument goes in the rebuilt call."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Slot) and other.index == self.index

    def __hash__(self) -> int:
        return hash(("slot", self.index))

    def __repr__(self) -> str:
        return f"<array {self.index}>"


def _is_array(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _split(value: Any, arrays: list[Any]) -> Any:
    """``value`` with its arrays (also inside lists and tuples) replaced by slots, which
    are appended to ``arrays``."""
    if _is_array(value):
        arrays.append(value)
        return _Slot(len(arrays) - 1)
    if isinstance(value, list | tuple):
        return type(value)(_split(v, arrays) for v in value)
    return value


def _join(value: Any, arrays: tuple[Any, ...]) -> Any:
    """:func:`_split` undone with ``arrays`` (traced tensors) in the slots."""
    if isinstance(value, _Slot):
        return arrays[value.index]
    if isinstance(value, list | tuple):
        return type(value)(_join(v, arrays) for v in value)
    return value


def _typed(value: Any) -> Any:
    """A cache key for a non-array argument that tells apart what ``==`` does not: ``1``,
    ``1.0`` and ``True`` (they promote differently) and ``0.0`` and ``-0.0``."""
    if isinstance(value, list | tuple):
        return (type(value), tuple(_typed(v) for v in value))
    if isinstance(value, numbers.Number | np.generic):
        return (type(value), repr(value))
    return (type(value), value)


def _compiled(fn: Callable[..., Any], opname: str, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Any:
    from tessera.frontend.jit import CompiledFunction

    def one_op(*arrays: Any) -> Any:
        return fn(*_join(args, arrays), **_join(kwargs, arrays))

    one_op.__name__ = one_op.__qualname__ = opname
    return CompiledFunction(one_op)


def call(fn: Callable[..., Any], opname: str, args: tuple[Any, ...],
         kwargs: dict[str, Any]) -> tuple[bool, Any]:
    """``(True, result)`` of running ``fn(*args, **kwargs)`` eagerly, or ``(False, None)``
    when the call has no array argument."""
    arrays: list[Any] = []
    static_args = _split(args, arrays)
    static_kwargs = {k: _split(v, arrays) for k, v in kwargs.items()}
    if not arrays:
        return False, None
    key: tuple[Any, ...] | None = (
        fn, _typed(static_args), tuple(sorted((k, _typed(v)) for k, v in static_kwargs.items()))
    )
    try:
        hash(key)
    except TypeError:  # an unhashable argument: compiled for this call only
        key = None
    compiled = _CACHE.get(key) if key is not None else None
    if compiled is None:
        compiled = _compiled(fn, opname, static_args, static_kwargs)
        if key is not None:
            _CACHE[key] = compiled
            while len(_CACHE) > CACHE_SIZE:
                _CACHE.popitem(last=False)
    elif key is not None:
        _CACHE.move_to_end(key)
    return True, compiled(*arrays)


def eager(fn: Callable[..., Any], opname: str) -> Callable[..., Any]:
    """``fn`` (the operator ``opname``), also callable outside traced functions on arrays
    (see the module docstring); inside a trace it is ``fn`` itself."""
    if opname in NOT_EAGER:
        return fn

    @functools.wraps(fn)
    def operator(*args: Any, **kwargs: Any) -> Any:
        if active_trace() is None:
            ran, out = call(fn, opname, args, kwargs)
            if ran:
                return out
        return fn(*args, **kwargs)

    return operator
