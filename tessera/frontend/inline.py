"""Compiled functions called inside traced functions: composition by inlining.

A ``@ts.jit`` function called with traced tensors (from another ``@ts.jit``
function, a ``ts.grad``/``ts.jvp`` of a plain function, a ``custom_vjp`` body)
does not compile on its own: its body is traced into the caller's function,
so the caller's IR holds its ops and the ``autodiff`` pass differentiates
through them. The callee keeps what its declaration says:

* parameters annotated ``ts.Tensor[...]`` are checked (rank, fixed and symbolic
  dims, storage dtype) and take the annotation's policy: a traced argument of the
  same storage but another policy is cast to it (``ts.cast``);
* a ``-> ts.Tensor[...]`` return annotation is checked;
* ``mesh=`` becomes the caller's mesh when the caller has none, and must equal
  it otherwise.

Every error names the call site (``file:line``). Functions whose IR is built by
a pass rather than by tracing (``ts.grad`` of a jitted function) are inlined by
copying the ops of their specialization (:func:`inline_specialization`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xdsl.dialects import func
from xdsl.ir import SSAValue

from tessera.frontend.annotations import bind_shape
from tessera.frontend.errors import ShapeError, TesseraTypeError, TraceError, located
from tessera.frontend.tracing import Trace, TracedTensor, tracing

if TYPE_CHECKING:
    from tessera.frontend.jit import CompiledFunction, Specialization, _ArgInfo


def _traced_values(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[TracedTensor]:
    out: list[TracedTensor] = []
    for a in (*args, *kwargs.values()):
        items = a if isinstance(a, tuple | list) else (a,)
        out += [x for x in items if isinstance(x, TracedTensor)]
    return out


def caller_trace(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Trace:
    """The one trace the traced arguments of a call of ``name`` belong to."""
    traces = {id(t.trace): t.trace for t in _traced_values(args, kwargs)}
    if len(traces) != 1:
        raise TraceError(
            located(f"{name}: the traced arguments come from {len(traces)} different traces")
        )
    return next(iter(traces.values()))


def _adopt_mesh(cf: CompiledFunction, trace: Trace) -> None:
    """Give ``trace`` the callee's ``mesh=`` (or check that it already has the same one)."""
    if cf.mesh is None:
        return
    if trace.mesh is None:
        trace.mesh = dict(cf.mesh)
    elif trace.mesh != cf.mesh:
        raise ShapeError(
            located(
                f"{cf.name}: compiled for mesh {cf.mesh}, but called inside a function traced "
                f"for mesh {trace.mesh}"
            )
        )


def _param(pname: str) -> str:
    """``args[2]`` / ``kw.k`` -> the declared parameter name."""
    return pname.split("[")[0].split(".")[0]


def _annotated(
    cf: CompiledFunction, pname: str, value: Any, symbols: dict[str, tuple[int, str]]
) -> Any:
    """``value`` checked against the annotation of ``pname`` and cast to its policy (an
    array becomes a constant of the active trace)."""
    from tessera.frontend import ops
    from tessera.frontend.ops.base import _is_array

    if _is_array(value):
        value = ops.constant(value)  # an array closed over by the caller: a constant
    ann = cf.annotations.get(_param(pname))
    if ann is None:
        return value
    if not isinstance(value, TracedTensor):
        raise TesseraTypeError(
            located(
                f"{cf.name}: argument '{pname}' is annotated {ann!r} but got "
                f"{type(value).__name__} inside a traced function; pass a traced tensor"
            )
        )
    try:
        bind_shape(ann, value.shape, symbols, pname)
    except ShapeError as e:
        raise ShapeError(located(f"{cf.name}: {e}")) from None
    pol = ann.policy
    if pol is None:
        return value
    if value.is_complex or value.dtype != pol.storage:
        got = value.type.element_type if value.is_complex else value.dtype
        raise TesseraTypeError(
            located(
                f"{cf.name}: argument '{pname}' has dtype {got!r}, but its annotation says "
                f"{ann.dtype!r}; cast it before the call"
            )
        )
    return value if value.policy == pol else ops.cast(value, pol)


def inline_call(cf: CompiledFunction, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Trace ``cf``'s body into the trace of its traced arguments; its results."""
    from tessera.frontend.jit import _flatten, _unflatten

    trace = caller_trace(cf.name, args, kwargs)
    bound = cf._bind(args, kwargs)
    _adopt_mesh(cf, trace)
    symbols: dict[str, tuple[int, str]] = {}
    with tracing(trace):
        values = {pname: _annotated(cf, pname, v, symbols) for pname, v in _flatten(bound)}
        pos, kw = _unflatten(cf.signature, values)
        out = cf.fn(*pos, **kw)
    outs = list(out) if isinstance(out, tuple | list) else [out]
    for k, o in enumerate(outs):
        if not isinstance(o, TracedTensor) or o.trace is not trace:
            raise TesseraTypeError(
                located(
                    f"{cf.name}: result {k} is {type(o).__name__}; a function called inside "
                    "a traced function must return tensors of that trace"
                )
            )
    if not isinstance(out, tuple | list):
        _check_return(cf, out, symbols)
    return out


def _check_return(cf: CompiledFunction, out: TracedTensor, symbols: dict[str, Any]) -> None:
    from tessera.frontend.annotations import TensorAnnotation
    from tessera.frontend.jit import _resolve_return

    ann = cf.signature.return_annotation
    if isinstance(ann, str):
        ann = _resolve_return(cf.fn, ann)
    if not isinstance(ann, TensorAnnotation):
        return
    try:
        bind_shape(ann, out.shape, symbols, "the result")
    except ShapeError as e:
        raise ShapeError(located(f"{cf.name}: {e}")) from None
    pol = ann.policy
    if pol is not None and (out.is_complex or out.policy != pol):
        got = out.type.element_type if out.is_complex else out.policy
        raise TesseraTypeError(
            located(f"{cf.name}: the result is {got!r}, but the return annotation says {ann.dtype!r}")
        )


def traced_infos(
    cf: CompiledFunction, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[_ArgInfo], dict[str, TracedTensor]]:
    """The argument infos of a call with traced tensors (their shapes and policies), and the
    traced value of each tensor parameter."""
    from tessera.frontend.jit import _ArgInfo, _flatten, _is_static

    bound = cf._bind(args, kwargs)
    symbols: dict[str, tuple[int, str]] = {}
    infos: list[_ArgInfo] = []
    tensors: dict[str, TracedTensor] = {}
    trace = caller_trace(cf.name, args, kwargs)
    for pname, v in _flatten(bound):
        with tracing(trace):
            v = _annotated(cf, pname, v, symbols)
        if isinstance(v, TracedTensor):
            if v.is_complex:
                raise TesseraTypeError(
                    located(f"{cf.name}: argument '{pname}' is complex; it cannot be inlined")
                )
            infos.append(_ArgInfo(pname, "tensor", v.shape, v.policy))
            tensors[pname] = v
        elif _is_static(v):
            infos.append(_ArgInfo(pname, "static", static=v))
        else:
            raise TesseraTypeError(
                located(
                    f"{cf.name}: argument '{pname}' has type {type(v).__name__}; inside a "
                    "traced function pass traced tensors or Python scalars"
                )
            )
    return infos, tensors


def inline_specialization(
    spec: Specialization, trace: Trace, tensors: dict[str, TracedTensor]
) -> list[TracedTensor]:
    """Copy the ops of ``spec``'s function into ``trace``, its arguments replaced by
    ``tensors`` (by parameter name); the copied results."""
    fns = [op for op in spec.traced.ops if isinstance(op, func.FuncOp)]
    assert len(fns) == 1, "a specialization holds one function"
    args = [tensors[p] for p in spec.tensor_params] + list(spec.captures)
    return inline_function(fns[0], trace, args)


def inline_function(
    fn: func.FuncOp, trace: Trace, args: list[TracedTensor]
) -> list[TracedTensor]:
    """Copy the ops of ``fn`` into ``trace`` with its arguments replaced by ``args``;
    the copied results."""
    body = fn.body.block
    assert len(body.args) == len(args), "one value per argument"
    with tracing(trace):  # captured tensors resolve to their values in ``trace``
        mapping: dict[SSAValue, SSAValue] = {arg: a.value for arg, a in zip(body.args, args)}
    results: list[TracedTensor] = []
    for op in body.ops:
        if isinstance(op, func.ReturnOp):
            results = [TracedTensor(mapping[v], trace) for v in op.operands]
            break
        new = op.clone(value_mapper=mapping)
        trace.add(new)
    return results


__all__ = [
    "caller_trace", "inline_call", "inline_function", "inline_specialization", "traced_infos",
]
