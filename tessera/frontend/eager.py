"""Eager calls: an operator called outside a traced function, on arrays, runs at once.

``Y = op.matmul(A, B)`` at the top level of a script (the guide writes it so), with numpy
arrays or torch tensors, compiles a function of that one operator with ``ts.jit``, runs it
on the arguments and returns what the compiled function would: numpy arrays for numpy
arguments, torch tensors for torch ones (on their device). JAX dispatches ``jnp`` calls
op by op the same way.

* The compiled function is kept per (operator, non-array arguments), so a repeated call
  reuses it, and ``ts.jit``'s own cache keeps one specialization per shapes and dtypes.
* An array is an input of the compiled function where the operator takes tensors: a
  parameter annotated ``Any`` or ``Sequence[Any]`` (``ts.concat([a, b])`` takes a list of
  them). Every other argument is a constant of the compiled function, as inside a
  traced function, arrays included (``ts.reshape(x, np.array([2, 3]))``).
* A call with no array input (``ts.constant``, whose ``value: ArrayLike`` is a value,
  not a tensor, has none) and any collective (``all_reduce`` ...: it needs the ranks of a
  mesh, which only a compiled function over one has) still raise the located error of a
  call outside a traced function.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.frontend.tracing import active_trace

NOT_EAGER = frozenset({
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_slice", "send", "recv",
})
"""Operators that never run eagerly: the collectives."""

TENSOR_ANNOTATIONS = frozenset({"Any", "Sequence[Any]"})
"""How the operator functions annotate the parameters that take tensors."""

CACHE_SIZE = 256
"""Compiled one-operator functions kept (least recently used dropped first)."""

_CACHE: OrderedDict[tuple[Any, ...], Any] = OrderedDict()


@dataclass(frozen=True)
class _Slot:
    """Where the ``index``-th array input goes in the rebuilt call."""

    index: int


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


def _compiled(fn: Callable[..., Any], opname: str, sig: inspect.Signature,
              statics: dict[str, Any]) -> Any:
    from tessera.frontend.jit import CompiledFunction

    def one_op(*arrays: Any) -> Any:
        bound = inspect.BoundArguments(sig, {k: _join(v, arrays) for k, v in statics.items()})
        return fn(*bound.args, **bound.kwargs)

    one_op.__name__ = one_op.__qualname__ = opname
    return CompiledFunction(one_op)


def call(fn: Callable[..., Any], opname: str, sig: inspect.Signature, tensor_params: frozenset[str],
         args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, Any]:
    """``(True, result)`` of running ``fn(*args, **kwargs)`` eagerly, or ``(False, None)``
    when the call binds no array to a tensor parameter (or does not bind at all: the
    operator itself then says why)."""
    from tessera.frontend.jit import static_identity

    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return False, None
    arrays: list[Any] = []
    statics = {name: _split(v, arrays) if name in tensor_params else v
               for name, v in bound.arguments.items()}
    if not arrays:
        return False, None
    key: tuple[Any, ...] | None = (
        fn, tuple((name, static_identity(v)) for name, v in statics.items()))
    try:
        hash(key)
    except TypeError:  # an unhashable argument: compiled for this call only
        key = None
    compiled = _CACHE.get(key) if key is not None else None
    if compiled is None:
        compiled = _compiled(fn, opname, sig, statics)
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
    sig = inspect.signature(fn)
    tensor_params = frozenset(
        name for name, p in sig.parameters.items() if p.annotation in TENSOR_ANNOTATIONS)

    @functools.wraps(fn)
    def operator(*args: Any, **kwargs: Any) -> Any:
        if active_trace() is None:
            ran, out = call(fn, opname, sig, tensor_params, args, kwargs)
            if ran:
                return out
        return fn(*args, **kwargs)

    return operator
