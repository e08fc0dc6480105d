"""A ``ts.jit`` function as a differentiable torch function.

When a compiled function is called with torch tensors that require grad (and
autograd is recording), the call goes through :class:`JitFunction`, a
``torch.autograd.Function``: its forward runs the compiled function as usual
(numpy reference interpreter for CPU tensors, the GPU for CUDA tensors), its
backward runs the vector-Jacobian product that the ``autodiff`` pass builds
from the same traced Graph IR (the program ``ts.grad`` runs), with one
cotangent argument per floating-point result. The VJP program is built on the
first backward of a signature and cached.

Only floating-point tensor arguments that require grad are differentiated;
integer and bool results are marked non-differentiable.
"""

from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from tessera.autodiff.rules import AutodiffError
from tessera.frontend.errors import TesseraError
from tessera.frontend.jit import CompiledFunction, Specialization, _flatten, _unflatten
from tessera.passes.autodiff import vjp_function
from tessera.runtime import convert


@dataclass
class _Call:
    """One differentiable call: the function, its specialization and argument layout."""

    fn: CompiledFunction
    spec: Specialization
    bound: inspect.BoundArguments
    wrt: list[int]
    """Positions (among ``spec.tensor_params``) of the arguments to differentiate."""
    out_float: list[bool] = field(default_factory=list)

    def run(self, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
        """The compiled function on ``tensors`` (the tensor arguments, in parameter order)."""
        values = dict(_flatten(self.bound))
        values.update(zip(self.spec.tensor_params, tensors))
        pos, kw = _unflatten(self.fn.signature, values)
        out = CompiledFunction.__call__(self.fn, *pos, **kw)  # results as the spec has them
        outs = tuple(out) if self.spec.returns_tuple else (out,)
        return tuple(
            o.reshape(shape) if tuple(o.shape) != shape else o
            for o, shape in zip(outs, _output_shapes(self.spec))
        )


_VJP_CACHE: weakref.WeakKeyDictionary[CompiledFunction, dict[Any, Specialization]] = (
    weakref.WeakKeyDictionary()
)
"""VJP programs per compiled function, keyed by (specialization key, wrt)."""


def _vjp_spec(call: _Call) -> Specialization:
    """The VJP program of ``call``'s specialization for its ``wrt`` (built once)."""
    key = (call.spec.key, tuple(call.wrt))
    cache = _VJP_CACHE.setdefault(call.fn, {})
    spec = cache.get(key)
    if spec is not None:
        return spec
    fns = [op for op in call.spec.traced.ops if isinstance(op, func.FuncOp)]
    name = f"{call.spec.name}_vjp"
    try:
        vf = vjp_function(fns[0], wrt=call.wrt, cotangent_args=True, name=name)
    except AutodiffError as e:
        raise TesseraError(
            f"{call.fn.name}: cannot differentiate through torch autograd: "
            f"{str(e).removeprefix('autodiff: ')}"
        ) from None
    module = ModuleOp([vf])
    module.verify()
    params = [*call.spec.tensor_params, *(f"grad_out[{i}]" for i, f in enumerate(call.out_float) if f)]
    spec = Specialization(
        key=key, name=name, traced=module, tensor_params=params, returns_tuple=True,
        options=call.spec.options,
    )
    cache[key] = spec
    return spec


def _run_spec(spec: Specialization, args: list[Any]) -> list[Any]:
    """Run ``spec`` on torch tensors: the GPU for CUDA tensors, else the numpy interpreter."""
    from tessera.runtime import dispatch

    if any(convert.is_cuda_tensor(a) for a in args):
        out = dispatch.run_on_gpu(spec, [a.contiguous() for a in args])
        return list(out) if isinstance(out, tuple | list) else [out]
    arrays = [convert.to_numpy(a, where=f"{spec.name} argument {i}") for i, a in enumerate(args)]
    return [convert.to_torch(r) for r in dispatch.run_on_cpu(spec, arrays)]


class JitFunction(torch.autograd.Function):
    """Forward: the compiled function; backward: its VJP program from the ``autodiff`` pass."""

    @staticmethod
    def forward(ctx: Any, call: _Call, *tensors: Any) -> Any:  # type: ignore[override]
        outs = call.run(tensors)
        call.out_float = [bool(torch.is_floating_point(o)) for o in outs]
        ctx.call = call
        ctx.save_for_backward(*tensors)
        ctx.mark_non_differentiable(*[o for o, f in zip(outs, call.out_float) if not f])
        return outs

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
        call: _Call = ctx.call
        tensors = ctx.saved_tensors
        spec = _vjp_spec(call)
        dtypes = _output_dtypes(call)
        shapes = _output_shapes(call.spec)
        cts = [
            grads[i].to(dtypes[i]).reshape(shapes[i]).contiguous()
            for i, f in enumerate(call.out_float)
            if f
        ]
        got = _run_spec(spec, [*tensors, *cts])
        result: list[Any] = [None] * len(tensors)
        for i, g in zip(call.wrt, got):
            result[i] = g.reshape(tensors[i].shape).to(tensors[i].device)
        return (None, *result)


def _output_shapes(spec: Specialization) -> list[tuple[int, ...]]:
    """The shapes of the compiled function's results, from its traced IR."""
    fns = [op for op in spec.traced.ops if isinstance(op, func.FuncOp)]
    return [tuple(t.get_shape()) for t in fns[0].function_type.outputs.data]


def _output_dtypes(call: _Call) -> list[Any]:
    """The torch dtypes of the compiled function's results."""
    from tessera.ir.attrs import policy_of

    fns = [op for op in call.spec.traced.ops if isinstance(op, func.FuncOp)]
    out = []
    for t in fns[0].function_type.outputs.data:
        try:
            out.append(policy_of(t).storage.torch_dtype)
        except Exception:
            out.append(None)
    return out


def call_differentiable(fn: CompiledFunction, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call ``fn`` so that its torch results carry a ``grad_fn`` into :class:`JitFunction`."""
    detached_args = tuple(_detach(a) for a in args)
    detached_kwargs = {k: _detach(v) for k, v in kwargs.items()}
    if not torch.is_grad_enabled():
        return CompiledFunction.__call__(fn, *detached_args, **detached_kwargs)
    bound = fn._bind(args, kwargs)
    spec = fn.specialize(*detached_args, **detached_kwargs)
    by_key = dict(_flatten(bound))
    tensors = [_as_torch(by_key[p]) for p in spec.tensor_params]
    wrt = [
        i
        for i, t in enumerate(tensors)
        if isinstance(t, torch.Tensor) and t.requires_grad and torch.is_floating_point(t)
    ]
    if not wrt:
        return CompiledFunction.__call__(fn, *detached_args, **detached_kwargs)
    if fn.mesh is not None:
        raise TesseraError(
            f"{fn.name}: a sharded function (mesh=...) cannot be differentiated through torch "
            "autograd; use ts.grad inside the sharded program"
        )
    call = _Call(fn=fn, spec=spec, bound=fn._bind(detached_args, detached_kwargs), wrt=wrt)
    outs = JitFunction.apply(call, *tensors)
    return tuple(outs) if spec.returns_tuple else outs[0]


def _as_torch(v: Any) -> Any:
    """A numpy argument beside torch ones, as a CPU tensor (autograd saves tensors only)."""
    return torch.from_numpy(v) if isinstance(v, np.ndarray) and v.dtype.kind in "biuf" else v


def _detach(v: Any) -> Any:
    return v.detach() if isinstance(v, torch.Tensor) else v


__all__ = ["JitFunction", "call_differentiable"]
