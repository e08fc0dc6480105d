"""The autodiff API of the guide: ``ts.grad``, ``ts.value_and_grad``, ``ts.jvp``,
``@ts.autodiff`` and ``ts.custom_vjp``.

``ts.grad(f, argnums=0)`` follows JAX: ``argnums`` selects the positional
parameters to differentiate (an int gives one gradient, a tuple a tuple of
gradients; parameter names are accepted too). ``f`` must return one scalar
floating-point tensor. The gradient is an ordinary compiled function: the
``autodiff`` pass turns the traced Graph IR of ``f`` into ``<f>_grad``, which
runs on the numpy interpreter or the GPU like any graph and shows in
``inspect_ir("graph")``.

``@ts.autodiff`` marks a function as differentiated; ``@ts.autodiff(argnums=(1, 2))``
(or ``wrt=("W", "b")``) also records the default ``argnums`` that ``ts.grad``
uses for it. A bare ``@ts.autodiff`` keeps JAX's default ``argnums=0``.
"""

from __future__ import annotations

import inspect
import itertools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import SSAValue

from tessera.autodiff.custom import ATTR, CUSTOM_VJPS, CustomVJPRecord
from tessera.autodiff.rules import AutodiffError
from tessera.frontend.errors import TesseraError, TesseraTypeError
from tessera.frontend.jit import CompiledFunction, Specialization
from tessera.ir import graph as g
from tessera.passes.autodiff import jvp_function, vjp_function

Argnums = int | str | Sequence[int | str]
_MARK = "__tessera_autodiff__"


def _compiled(f: Any) -> CompiledFunction:
    if isinstance(f, CompiledFunction):
        return f
    if isinstance(f, CustomVJPFunction):
        return CompiledFunction(f, f.__name__)
    if callable(f):
        return CompiledFunction(f)
    raise TesseraTypeError(f"expected a function to differentiate, got {type(f).__name__}")


def _default_argnums(f: Any) -> Argnums:
    for obj in (f, getattr(f, "fn", None)):
        mark = getattr(obj, _MARK, None)
        if mark is not None:
            return mark
    return 0


def _only_func(module: ModuleOp) -> func.FuncOp:
    fns = [op for op in module.ops if isinstance(op, func.FuncOp)]
    assert len(fns) == 1
    return fns[0]


def _positional(sig: inspect.Signature) -> list[inspect.Parameter]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p for p in sig.parameters.values() if p.kind in kinds]


def _wrt_args(
    name: str, sig: inspect.Signature, argnums: Argnums, tensor_params: Sequence[str]
) -> list[int]:
    """Function-argument indices (positions among the tensor params) for ``argnums``."""
    nums = list(argnums) if isinstance(argnums, tuple | list) else [argnums]
    pos = _positional(sig)
    out = []
    for a in nums:
        if isinstance(a, str):
            pname = a
            if pname not in sig.parameters:
                raise TesseraTypeError(
                    f"grad of {name}: no parameter named '{a}' "
                    f"(parameters: {', '.join(sig.parameters)})"
                )
        elif isinstance(a, int) and not isinstance(a, bool):
            if not -len(pos) <= a < len(pos):
                raise TesseraTypeError(
                    f"grad of {name}: argnums {a} out of range for {len(pos)} positional "
                    "parameters"
                )
            pname = pos[a].name
        else:
            raise TesseraTypeError(f"grad of {name}: argnums must be ints or names, got {a!r}")
        if pname not in tensor_params:
            raise TesseraTypeError(
                f"grad of {name}: parameter '{pname}' is not a tensor argument (a static "
                "Python value cannot be differentiated)"
            )
        out.append(tensor_params.index(pname))
    return out


class GradFunction(CompiledFunction):
    """``ts.grad(f)`` / ``ts.value_and_grad(f)``: a compiled function returning gradients.

    Each specialization traces ``f`` (sharing its cache), then builds
    ``<f>_grad`` with the ``autodiff`` pass; that function is the traced IR of
    this compiled function.
    """

    def __init__(self, f: Any, argnums: Argnums | None, with_value: bool):
        primal = _compiled(f)
        self.primal = primal
        self.argnums = _default_argnums(f) if argnums is None else argnums
        self.with_value = with_value
        super().__init__(primal.fn, f"{primal.name}_grad", mesh=primal.mesh)

    def _trace(self, key: tuple[Any, ...], infos: list[Any]) -> Specialization:
        spec = self.primal._specialize(infos)
        primal_fn = _only_func(spec.traced)
        wrt = _wrt_args(self.primal.name, self.signature, self.argnums, spec.tensor_params)
        try:
            gf = vjp_function(
                primal_fn,
                wrt=wrt,
                return_value=self.with_value,
                cotangent_args=False,
                name=self.name,
            )
        except AutodiffError as e:
            msg = str(e).removeprefix("autodiff: ")
            raise TesseraError(f"grad of {self.primal.name}: {msg}") from None
        module = ModuleOp([gf])
        module.verify()
        return Specialization(
            key=key,
            name=self.name,
            traced=module,
            tensor_params=spec.tensor_params,
            returns_tuple=True,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = list(super().__call__(*args, **kwargs))
        grads = flat[1:] if self.with_value else flat
        out = tuple(grads) if isinstance(self.argnums, tuple | list) else grads[0]
        return (flat[0], out) if self.with_value else out

    def __repr__(self) -> str:
        return f"<tessera gradient of {self.primal.name}, argnums={self.argnums!r}>"


def grad(f: Any, argnums: Argnums | None = None) -> GradFunction:
    """The gradient of scalar-valued ``f`` with respect to ``argnums`` (default 0, or the
    ``argnums`` recorded by ``@ts.autodiff``)."""
    return GradFunction(f, argnums, with_value=False)


def value_and_grad(f: Any, argnums: Argnums | None = None) -> GradFunction:
    """Like :func:`grad`, returning ``(f(*args), gradient(s))``."""
    return GradFunction(f, argnums, with_value=True)


def autodiff(fn: Any = None, *, argnums: Argnums | None = None, wrt: Any = None) -> Any:
    """Mark ``fn`` as differentiated; ``argnums`` / ``wrt`` (parameter names) set the default
    arguments ``ts.grad`` differentiates with respect to."""
    if argnums is not None and wrt is not None:
        raise TesseraTypeError("ts.autodiff: give argnums or wrt, not both")
    chosen = wrt if wrt is not None else argnums

    def mark(f: Any) -> Any:
        try:
            setattr(f, _MARK, 0 if chosen is None else chosen)
        except AttributeError:
            raise TesseraTypeError(
                f"ts.autodiff: cannot mark {type(f).__name__} objects; decorate a function"
            ) from None
        return f

    return mark if fn is None else mark(fn)


_JVP_CACHE: weakref.WeakKeyDictionary[CompiledFunction, dict[Any, ModuleOp]] = (
    weakref.WeakKeyDictionary()
)


def jvp(f: Any, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
    """Forward mode: ``(f(*primals), J(primals) · tangents)``, as in ``jax.jvp``.

    There is one tangent per primal (``None`` for static Python arguments). The
    tangent function ``<f>_jvp`` is built by the ``autodiff`` pass in forward mode.
    """
    from tessera.runtime import convert
    from tessera.runtime.graph_interpreter import run_function

    cf = _compiled(f)
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise TesseraTypeError(
            f"jvp of {cf.name}: {len(primals)} primals but {len(tangents)} tangents"
        )
    spec = cf.specialize(*primals)
    cache = _JVP_CACHE.setdefault(cf, {})
    module = cache.get(spec.key)
    if module is None:
        try:
            module = ModuleOp([jvp_function(_only_func(spec.traced), name=f"{cf.name}_jvp")])
        except AutodiffError as e:
            raise TesseraError(f"jvp of {cf.name}: {str(e).removeprefix('autodiff: ')}") from None
        cache[spec.key] = module
    pos = [p.name for p in _positional(cf.signature)]
    by_name = dict(zip(pos, zip(primals, tangents)))
    args, tans = [], []
    for p in spec.tensor_params:
        if p not in by_name:
            raise TesseraTypeError(f"jvp of {cf.name}: tensor parameter '{p}' must be positional")
        x, t = by_name[p]
        xa = convert.to_numpy(x, where=f"jvp primal '{p}'")
        ta = convert.to_numpy(t, where=f"jvp tangent '{p}'") if t is not None else None
        if ta is None or ta.shape != xa.shape:
            raise TesseraTypeError(
                f"jvp of {cf.name}: tangent for '{p}' must be an array of shape {list(xa.shape)}"
            )
        args.append(xa)
        tans.append(ta.astype(xa.dtype, copy=False))
    res = run_function(module, f"{cf.name}_jvp", [*args, *tans])
    if any(convert.is_torch_tensor(x) for x in primals):
        res = [convert.to_torch(r) for r in res]
    n = len(res) // 2
    outs, touts = res[:n], res[n:]
    if spec.returns_tuple:
        return tuple(outs), tuple(touts)
    return outs[0], touts[0]


class CustomVJPFunction:
    """``@ts.custom_vjp``: a function with a user-defined backward pass.

    ``f.defvjp(fwd, bwd)``: ``fwd(*args)`` returns ``(y, saved)``; ``bwd(saved,
    grad_output)`` returns the gradient of each tensor argument (a tuple when
    there are several). Inside a traced function the call traces ``fwd`` (inside
    ``fwd``, calling ``f`` again runs its plain body) and marks its output, so the
    ``autodiff`` pass uses ``bwd`` for it. Called on arrays, ``f`` runs as ``ts.jit(f)``.
    """

    _counter = itertools.count()

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "custom_vjp")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn
        self.__signature__ = inspect.signature(fn)
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None
        self._in_fwd = 0
        self._jitted: CompiledFunction | None = None

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Set the forward (``(y, saved)``) and backward (``bwd(saved, g) -> grads``) rules."""
        if not callable(fwd) or not callable(bwd):
            raise TesseraTypeError(f"{self.__name__}.defvjp: fwd and bwd must be functions")
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tessera.frontend.tracing import TracedTensor

        traced = [a for a in (*args, *kwargs.values()) if isinstance(a, TracedTensor)]
        if not traced:
            if self._jitted is None:
                self._jitted = CompiledFunction(self.fn, self.__name__)
            return self._jitted(*args, **kwargs)
        if self.fwd is None or self.bwd is None or self._in_fwd:
            return self.fn(*args, **kwargs)
        self._in_fwd += 1
        try:
            res = self.fwd(*args, **kwargs)
        finally:
            self._in_fwd -= 1
        if not (isinstance(res, tuple) and len(res) == 2):
            raise TesseraTypeError(
                f"custom_vjp {self.__name__}: fwd must return (output, saved), got "
                f"{type(res).__name__}"
            )
        y, saved = res
        if not isinstance(y, TracedTensor):
            raise TesseraTypeError(
                f"custom_vjp {self.__name__}: fwd output must be a single tensor, got "
                f"{type(y).__name__}"
            )
        key = f"{self.__name__}#{next(self._counter)}"
        CUSTOM_VJPS[key] = CustomVJPRecord(
            name=self.__name__,
            bwd=self.bwd,
            inputs=[a.value for a in traced],
            saved=_values(saved),
        )
        marker = g.ReshapeOp(operands=[y.value], result_types=[y.value.type])
        marker.attributes[ATTR] = StringAttr(key)
        y.trace.add(marker)
        return TracedTensor(marker.results[0], y.trace)


def _values(x: Any) -> Any:
    from tessera.frontend.tracing import TracedTensor

    if isinstance(x, TracedTensor):
        return x.value
    if isinstance(x, tuple | list):
        return type(x)(_values(v) for v in x)
    if isinstance(x, np.ndarray | SSAValue) or np.isscalar(x) or x is None:
        return x
    raise TesseraTypeError(
        f"custom_vjp: saved values must be tensors, Python scalars or tuples of them, got "
        f"{type(x).__name__}"
    )


def custom_vjp(fn: Callable[..., Any]) -> CustomVJPFunction:
    """Decorator: give ``fn`` a custom backward pass with ``fn.defvjp(fwd, bwd)``."""
    return CustomVJPFunction(fn)
