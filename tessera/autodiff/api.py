"""The autodiff API of the guide: ``ts.grad``, ``ts.value_and_grad``, ``ts.jvp``,
``@ts.autodiff`` and ``ts.custom_vjp``.

Which arguments ``ts.grad(f)`` differentiates (docs/AUTODIFF.md):

1. ``argnums=`` (positions or parameter names; ``wrt=`` is the same) given to
   ``ts.grad``: as in JAX, an int gives one gradient, a tuple a tuple of gradients;
2. else ``argnums=`` / ``wrt=`` declared with ``@ts.autodiff(...)``;
3. else, for a function marked with a bare ``@ts.autodiff``, its **parameters**: every
   tensor argument that is not named as data (``x``, ``y``, ``input(s)``,
   ``target(s)``, ``label(s)``, ``batch`` or a name starting ``x_``/``y_``, such as
   ``y_true``), in argument order; one parameter gives its gradient, several a tuple.
   When every tensor argument is named as data, the first one is differentiated;
4. else (an unmarked function) JAX's default, ``argnums=0``.

So the guide's ``grad_W, grad_b = ts.grad(loss_function)(x, W, b, y_true)`` and
``grad_W = ts.grad(distributed_loss)(x, W)`` return the gradients of the weights,
and ``ts.grad(loss_fn)(W)`` the gradient of its one argument.

``f`` must return one scalar floating-point tensor. The gradient is an ordinary
compiled function: the ``autodiff`` pass turns the traced Graph IR of ``f`` into
``<f>_grad``, which runs on the numpy interpreter or the GPU like any graph and
shows in ``inspect_ir("graph")``. Called with traced tensors (inside another
traced function), a gradient is inlined into the caller.
"""

from __future__ import annotations

import inspect
import itertools
import threading
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


class _Parameters:
    """The default of a bare ``@ts.autodiff``: the arguments not named as data."""

    def __repr__(self) -> str:
        return "parameters"


PARAMETERS = _Parameters()
"""``argnums`` value meaning "the function's parameters" (rule 3 of the module docstring)."""

DATA_NAMES = frozenset(
    {"x", "y", "input", "inputs", "target", "targets", "label", "labels", "batch"}
)
"""Argument names (lower-cased) that mark data rather than parameters; names starting
with ``x_`` or ``y_`` (``y_true``, ``x_batch``) are data too."""


def is_data_name(name: str) -> bool:
    """Whether argument ``name`` is named as data (inputs, targets), not as a parameter."""
    n = name.lower()
    return n in DATA_NAMES or n.startswith(("x_", "y_"))


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
    if argnums is PARAMETERS:
        if not tensor_params:
            raise TesseraTypeError(f"grad of {name}: the function has no tensor arguments")
        chosen = [i for i, p in enumerate(tensor_params) if not is_data_name(p.split("[")[0])]
        return chosen or [0]
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
            captures=spec.captures,
            options=spec.options,  # the primal's compile options (sm90 kernels, tiles, ...)
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tessera.frontend.jit import _traced_call

        if _traced_call(args, kwargs):
            flat: list[Any] = self._inline(args, kwargs)
        else:
            flat = list(super().__call__(*args, **kwargs))
        grads = flat[1:] if self.with_value else flat
        several = isinstance(self.argnums, tuple | list) or (
            self.argnums is PARAMETERS and len(grads) > 1
        )
        out = tuple(grads) if several else grads[0]
        return (flat[0], out) if self.with_value else out

    def _inline(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The gradient function's ops copied into the trace of the traced arguments."""
        from tessera.dist.mesh import use_mesh
        from tessera.frontend.inline import (
            _adopt_mesh,
            caller_trace,
            inline_specialization,
            traced_infos,
        )

        trace = caller_trace(self.name, args, kwargs)
        _adopt_mesh(self, trace)
        infos, tensors = traced_infos(self, args, kwargs)
        if self.mesh is None and trace.mesh:
            with use_mesh(trace.mesh):
                spec = self._specialize(infos)
        else:
            spec = self._specialize(infos)
        return list(inline_specialization(spec, trace, tensors))

    def __repr__(self) -> str:
        return f"<tessera gradient of {self.primal.name}, argnums={self.argnums!r}>"


def _chosen(where: str, argnums: Any, wrt: Any) -> Any:
    if argnums is not None and wrt is not None:
        raise TesseraTypeError(f"{where}: give argnums or wrt, not both")
    return wrt if wrt is not None else argnums


def grad(f: Any, argnums: Argnums | None = None, *, wrt: Argnums | None = None) -> GradFunction:
    """The gradient of scalar-valued ``f`` with respect to ``argnums`` (or ``wrt``); by
    default what ``@ts.autodiff`` declared, its parameters for a bare ``@ts.autodiff``,
    else argument 0 (see the module docstring)."""
    return GradFunction(f, _chosen("ts.grad", argnums, wrt), with_value=False)


def value_and_grad(
    f: Any, argnums: Argnums | None = None, *, wrt: Argnums | None = None
) -> GradFunction:
    """Like :func:`grad`, returning ``(f(*args), gradient(s))``."""
    return GradFunction(f, _chosen("ts.value_and_grad", argnums, wrt), with_value=True)


def autodiff(fn: Any = None, *, argnums: Argnums | None = None, wrt: Any = None) -> Any:
    """Mark ``fn`` as differentiated; ``argnums`` / ``wrt`` (parameter names) set the default
    arguments ``ts.grad`` differentiates with respect to, and without them its parameters
    (the arguments not named as data, see the module docstring)."""
    chosen = _chosen("ts.autodiff", argnums, wrt)

    def mark(f: Any) -> Any:
        try:
            setattr(f, _MARK, PARAMETERS if chosen is None else chosen)
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
    from tessera.frontend.jit import _traced_call
    from tessera.runtime import convert
    from tessera.runtime.graph_interpreter import run_function

    cf = _compiled(f)
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise TesseraTypeError(
            f"jvp of {cf.name}: {len(primals)} primals but {len(tangents)} tangents"
        )
    if _traced_call(primals, {}):
        return _traced_jvp(cf, primals, tangents)
    spec = cf.specialize(*primals)
    module = _jvp_module(cf, spec)
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


def _jvp_module(cf: CompiledFunction, spec: Specialization) -> ModuleOp:
    """The forward-mode function ``<f>_jvp`` of a specialization (built once)."""
    cache = _JVP_CACHE.setdefault(cf, {})
    module = cache.get(spec.key)
    if module is None:
        try:
            module = ModuleOp([jvp_function(_only_func(spec.traced), name=f"{cf.name}_jvp")])
        except AutodiffError as e:
            raise TesseraError(f"jvp of {cf.name}: {str(e).removeprefix('autodiff: ')}") from None
        cache[spec.key] = module
    return module


def _traced_jvp(
    cf: CompiledFunction, primals: tuple[Any, ...], tangents: tuple[Any, ...]
) -> tuple[Any, Any]:
    """``ts.jvp`` called inside a traced function: the tangent function's ops are copied
    into the caller's trace."""
    from tessera.dist.mesh import use_mesh
    from tessera.frontend import ops
    from tessera.frontend.errors import located
    from tessera.frontend.inline import _adopt_mesh, caller_trace, inline_function, traced_infos
    from tessera.frontend.tracing import TracedTensor, tracing

    trace = caller_trace(f"jvp of {cf.name}", primals, {})
    _adopt_mesh(cf, trace)
    infos, tensors = traced_infos(cf, primals, {})
    if cf.mesh is None and trace.mesh:
        with use_mesh(trace.mesh):
            spec = cf._specialize(infos)
    else:
        spec = cf._specialize(infos)
    fn = _only_func(_jvp_module(cf, spec))
    by_name = dict(zip([p.name for p in _positional(cf.signature)], tangents))
    tans = []
    for p in spec.tensor_params:
        t, x = by_name.get(p), tensors[p]
        if t is not None and not isinstance(t, TracedTensor):
            with tracing(trace):
                t = ops.constant(t, x.policy)
        if not isinstance(t, TracedTensor) or t.shape != x.shape:
            raise TesseraTypeError(
                located(f"jvp of {cf.name}: tangent for '{p}' must be a tensor of shape "
                        f"{list(x.shape)}")
            )
        if t.type != x.type:
            with tracing(trace):
                t = ops.cast(t, x.policy)
        tans.append(t)
    with tracing(trace):  # captured tensors: constant along the tangent
        caps = list(spec.captures)
        cap_tans = [ops.broadcast_to(ops.constant(0.0, like=c), c.shape) for c in caps]
    res = inline_function(
        fn, trace, [*(tensors[p] for p in spec.tensor_params), *caps, *tans, *cap_tans]
    )
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
        self._fwd_depth = threading.local()
        """Per thread: >0 while this thread traces ``fwd`` (where ``f`` means its plain body)."""
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
        depth = getattr(self._fwd_depth, "n", 0)
        if self.fwd is None or self.bwd is None or depth:
            return self.fn(*args, **kwargs)
        self._fwd_depth.n = depth + 1
        try:
            res = self.fwd(*args, **kwargs)
        finally:
            self._fwd_depth.n = depth
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
