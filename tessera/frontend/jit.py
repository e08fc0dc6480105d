"""``@ts.jit`` and ``@graph.module``: compiled functions of tensors.

A :class:`CompiledFunction` traces its Python function into Graph IR once per
argument signature (each tensor's shape and dtype/policy, plus the values of
static Python arguments) and caches the result. Calling it with numpy arrays
or CPU torch tensors runs the Graph IR on the numpy reference interpreter; a
CUDA tensor goes to :func:`tessera.runtime.dispatch.run_on_gpu`. A GPU call of a
signature seen before runs the backend's prepared call for it
(:func:`tessera.runtime.dispatch.gpu_runner`) without binding or keying; arguments
it declines take the full path with all its checks.

Argument rules: a parameter annotated ``ts.Tensor[...]`` must get an array
whose dims fit the annotation (symbolic dims agree across parameters) and
whose dtype is the annotation's storage dtype; the annotation's policy then
becomes the parameter's type. Python ``int``/``float``/``bool``/``str``/``None``
arguments (and tuples of them) are static: they are passed to the function as they are and are part
of the cache key. Anything else is an error.
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tessera import compiler
from tessera.compiler import COMPILE_OBSERVERS, LEVELS, CompileObserver
from tessera.frontend.annotations import (
    TensorAnnotation,
    bind_shape,
    shape_from_annotation,
)
from tessera.frontend.errors import ShapeError, TesseraError, TesseraTypeError, located
from tessera.frontend.tracing import Trace, TracedTensor, active_trace, tracing
from tessera.ir.attrs import tensor_type
from tessera.ir.dtypes import dtype_of
from tessera.ir.policy import NumericPolicy
from tessera.options import CompileOptions

__all__ = [
    "COMPILE_OBSERVERS", "LEVELS", "CompileObserver", "CompiledFunction", "Specialization",
    "jit", "module",
]

_STATIC_TYPES = (int, float, bool, str, type(None), np.integer, np.floating, np.bool_)


def _is_static(v: Any) -> bool:
    """Python scalars, strings, None and tuples of them are static (compile-time) values."""
    if isinstance(v, tuple):
        return all(_is_static(x) for x in v)
    return isinstance(v, _STATIC_TYPES)


def static_identity(v: Any) -> Any:
    """A static value as a key: equal for values that compile alike. Unlike ``==`` it tells
    apart ``0.0`` and ``-0.0`` (they add differently) and ``1`` and ``1.0`` (they promote
    differently), and a NaN equals itself (so its specialization is found again)."""
    if isinstance(v, list | tuple):
        return (type(v), tuple(static_identity(x) for x in v))
    if isinstance(v, float | np.floating):
        return (type(v), float(v).hex())
    if isinstance(v, complex | np.complexfloating):
        return (type(v), complex(v).real.hex(), complex(v).imag.hex())
    return (type(v), v)


@dataclass
class Specialization:
    """One compiled signature: its IR at each level and how to call it."""

    key: tuple[Any, ...]
    name: str
    traced: ModuleOp
    tensor_params: list[str]
    returns_tuple: bool
    options: CompileOptions = field(default_factory=lambda: compiler.resolve_options())
    """The options this signature compiles under, resolved when it was traced (from the
    environment and the current device unless given: a bare ``CompileOptions()`` would
    turn the device's kernels off)."""
    levels: dict[str, Any] = field(default_factory=dict)
    captures: list[Any] = field(default_factory=list, repr=False)
    """Tensors of enclosing traces the function captured (its arguments after the
    declared ones); only nested specializations have them, and they are not cached."""
    launch_text: str | None = field(default=None, repr=False)
    """The launch module's text (:mod:`tessera.runtime.program_cache`) when the PTX came
    from the disk cache instead of lowering."""
    _launch: Any = field(default=None, repr=False, compare=False)

    def ir(self, level: str) -> Any:
        """The module (or PTX text) at ``level``, computed on first use by the compiler
        driver (:func:`tessera.compiler.build`).

        The PTX is looked up in the persistent program cache first
        (:mod:`tessera.runtime.program_cache`); on a hit the other levels are still
        computed from the traced module when asked for."""
        return compiler.build(self, level)

    def launch_module(self) -> ModuleOp:
        """The Target-level module the GPU runtime runs: the lowered one when it was built
        in this process, else the launch module from the program cache."""
        return compiler.launch_module(self)


def _fast_key(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """A hashable key of positional arguments: (shape, dtype, device) for tensors, the value
    otherwise; None when some argument cannot be keyed (then the full path runs)."""
    key: list[Any] = []
    for a in args:
        if hasattr(a, "data_ptr") and hasattr(a, "device"):
            key.append((tuple(a.shape), a.dtype, a.device))
        elif isinstance(a, int | float | bool | str | type(None)):
            key.append(static_identity(a))
        else:
            return None
    return tuple(key)


HOT_SIGNATURES = 4
"""GPU signatures per compiled function whose prepared call is tried before any keying."""


def _hot_call(
    run: Callable[[Any], Any], args: tuple[Any, ...], positions: tuple[int, ...]
) -> Callable[[tuple[Any, ...]], Any]:
    """A call of ``run`` for positional arguments shaped like ``args``: tensors at
    ``positions`` (``run`` checks them), the other arguments equal to theirs in type and
    value; None when they are not."""
    n = len(args)
    if positions == tuple(range(n)):
        return run  # all tensors: run checks the count and each tensor
    statics = tuple((i, type(a), static_identity(a)) for i, a in enumerate(args)
                    if i not in positions)

    def call(call_args: tuple[Any, ...]) -> Any:
        if len(call_args) != n:
            return None
        for i, t, v in statics:
            a = call_args[i]
            if type(a) is not t or static_identity(a) != v:
                return None
        return run([call_args[i] for i in positions])

    return call


def _symbol_name(name: str) -> str:
    """``name`` as an IR / PTX symbol: identifier characters only (``<lambda>`` -> ``lambda``)."""
    sym = re.sub(r"[^0-9A-Za-z_]", "_", name).strip("_") or "fn"
    return sym if not sym[0].isdigit() else "fn_" + sym


@dataclass(frozen=True)
class _ArgInfo:
    param: str
    kind: str  # "tensor" or "static"
    shape: tuple[int, ...] = ()
    policy: NumericPolicy | None = None
    static: Any = None


def _resolve_annotations(fn: Callable[..., Any]) -> dict[str, TensorAnnotation]:
    """The parameters annotated with ``ts.Tensor[...]``.

    String annotations (``from __future__ import annotations``) are evaluated in
    the function's globals and closure; one that cannot be evaluated is an error
    rather than being ignored.
    """
    sig = inspect.signature(fn)
    namespace: dict[str, Any] = dict(getattr(fn, "__globals__", {}))
    code, closure = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is not None and closure:
        for var, cell in zip(code.co_freevars, closure):
            try:
                namespace[var] = cell.cell_contents
            except ValueError:
                pass
    out = {}
    for name, p in sig.parameters.items():
        ann = p.annotation
        if isinstance(ann, str):
            try:
                ann = eval(ann, namespace)  # noqa: S307 - the user's own annotation text
            except Exception as e:
                raise TesseraTypeError(
                    f"{getattr(fn, '__name__', 'fn')}: cannot evaluate the annotation "
                    f"{p.annotation!r} of parameter '{name}': {type(e).__name__}: {e}"
                ) from None
        if isinstance(ann, TensorAnnotation):
            out[name] = ann
    return out


def _resolve_return(fn: Callable[..., Any], text: str) -> Any:
    try:
        return eval(text, dict(getattr(fn, "__globals__", {})))  # noqa: S307
    except Exception:
        return None


class CompiledFunction:
    """A Python function of tensors compiled to Graph IR (see the module docstring)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        *,
        mesh: Any = None,
        options: CompileOptions | None = None,
    ):
        self.fn = fn
        self.options = options
        """Compile options given by the caller (None: from the environment and the device),
        completed by :func:`tessera.compiler.resolve_options` for each traced signature."""
        self.name = name or getattr(fn, "__name__", "fn")
        self.__name__ = self.name
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn
        self.mesh = _mesh_sizes(mesh)
        self.runtime_mesh = mesh if hasattr(mesh, "device_mesh") else None
        """The ``dist.Mesh`` given as ``mesh=`` (None for axis sizes only): sharded calls run on it."""
        self.signature = inspect.signature(fn)
        self.annotations = _resolve_annotations(fn)
        self._cache: dict[tuple[Any, ...], Specialization] = {}
        self._last: Specialization | None = None
        self._fast: dict[tuple[Any, ...], tuple[Specialization, tuple[int, ...]]] = {}
        """GPU calls seen before, keyed by the positional arguments' shapes, dtypes and devices
        (static values by value): a repeated call skips binding and specialization."""
        self._hot: list[Callable[[tuple[Any, ...]], Any]] = []
        """Prepared GPU calls of the last :data:`HOT_SIGNATURES` signatures, newest first:
        each runs the call and returns its result, or returns None when the arguments
        are not its signature (or need checks, copies or errors: the full path then)."""
        self._params = list(self.signature.parameters.values())
        self._plain_positional = all(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in self._params
        )

    def __repr__(self) -> str:
        return f"<tessera compiled function {self.name}>"

    # ------------------------------------------------------------ signatures
    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TesseraTypeError(located(f"{self.name}: {e}")) from None
        bound.apply_defaults()
        return bound

    def _arg_infos(self, bound: inspect.BoundArguments, arrays: dict[str, np.ndarray]) -> list[_ArgInfo]:
        infos: list[_ArgInfo] = []
        symbols: dict[str, tuple[int, str]] = {}
        for pname, value in _flatten(bound):
            ann = self.annotations.get(pname.split("[")[0].split(".")[0])
            if pname in arrays:
                arr = arrays[pname]
                try:
                    dt = dtype_of(arr.dtype)
                except TypeError:
                    raise TesseraTypeError(
                        located(f"{self.name}: argument '{pname}' has unsupported dtype {arr.dtype}")
                    ) from None
                policy = NumericPolicy(dt)
                if ann is not None:
                    try:
                        bind_shape(ann, arr.shape, symbols, pname)
                    except ShapeError as e:
                        raise ShapeError(located(f"{self.name}: {e}")) from None
                    apol = ann.policy
                    if apol is not None:
                        if apol.storage != dt:
                            raise TesseraTypeError(
                                located(
                                    f"{self.name}: argument '{pname}' has dtype {dt!r}, but its "
                                    f"annotation says {ann.dtype!r}; convert it before the call"
                                )
                            )
                        policy = apol
                infos.append(_ArgInfo(pname, "tensor", tuple(arr.shape), policy))
            elif _is_static(value):
                if ann is not None:
                    raise TesseraTypeError(
                        located(
                            f"{self.name}: argument '{pname}' is annotated {ann!r} but got "
                            f"{type(value).__name__} {value!r}"
                        )
                    )
                infos.append(_ArgInfo(pname, "static", static=value))
            else:
                raise TesseraTypeError(
                    located(
                        f"{self.name}: argument '{pname}' has unsupported type "
                        f"{type(value).__name__}; expected a numpy array, a torch tensor or a "
                        "Python scalar"
                    )
                )
        return infos

    def _annotation_infos(self, sizes: dict[str, int]) -> list[_ArgInfo]:
        infos = []
        for pname, p in self.signature.parameters.items():
            if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            ann = self.annotations.get(pname)
            if ann is None:
                if p.default is not inspect.Parameter.empty and _is_static(p.default):
                    infos.append(_ArgInfo(pname, "static", static=p.default))
                    continue
                raise TesseraError(
                    f"{self.name}: parameter '{pname}' has no ts.Tensor annotation and the "
                    "function was never called; call it once with arguments or annotate it"
                )
            pol = ann.policy
            if pol is None:
                raise TesseraError(
                    f"{self.name}: the annotation of '{pname}' has no dtype; add one "
                    f"(e.g. ts.Tensor[..., ts.f32]) or call the function once"
                )
            try:
                shape = shape_from_annotation(ann, sizes, pname)
            except TesseraTypeError as e:
                raise TesseraError(f"{self.name}: {e}") from None
            infos.append(_ArgInfo(pname, "tensor", shape, pol))
        return infos

    # ------------------------------------------------------------ tracing
    def trace_mesh(self) -> dict[str, int] | None:
        """The mesh axis sizes collectives are traced with: ``mesh=`` of the decorator,
        else the mesh of an enclosing ``with mesh:`` / ``dist.use_mesh(...)``, else None
        (then a collective is an error)."""
        if self.mesh is not None:
            return self.mesh
        return _mesh_sizes(context_mesh())

    def _specialize(self, infos: list[_ArgInfo]) -> Specialization:
        key: tuple[Any, ...] = tuple(
            (i.param, i.kind, i.shape, i.policy, _static_key(i.static)) for i in infos
        )
        if self.mesh is None:
            ctx = _mesh_sizes(context_mesh())
            if ctx is not None:
                key = (*key, ("mesh", tuple(ctx.items())))
        spec = self._cache.get(key)
        if spec is None:
            spec = self._trace(key, infos)
            if not spec.captures:  # a closure over traced values is traced per call
                self._cache[key] = spec
        self._last = spec
        return spec

    def _trace(self, key: tuple[Any, ...], infos: list[_ArgInfo]) -> Specialization:
        t0 = time.perf_counter()
        trace = Trace(_symbol_name(self.name), self.trace_mesh())
        call_args: dict[str, Any] = {}
        for i in infos:
            if i.kind == "tensor":
                assert i.policy is not None
                call_args[i.param] = trace.add_argument(tensor_type(i.shape, i.policy))
            else:
                call_args[i.param] = i.static
        pos, kw = _unflatten(self.signature, call_args)
        with tracing(trace):
            out = self.fn(*pos, **kw)
        returns_tuple = isinstance(out, tuple | list)
        outs = list(out) if returns_tuple else [out]
        for k, o in enumerate(outs):
            if not isinstance(o, TracedTensor):
                raise TesseraTypeError(located(
                    f"{self.name}: result {k} is {type(o).__name__} {o!r}; a traced function "
                    "must return tensors"
                ))
            if o.trace is not trace:
                raise TesseraTypeError(
                    located(f"{self.name}: result {k} comes from another trace"))
        if not returns_tuple:
            self._check_return(outs[0], infos)
        module = trace.finish(outs)
        spec = Specialization(
            key=key,
            name=_symbol_name(self.name),
            traced=module,
            tensor_params=[i.param for i in infos if i.kind == "tensor"],
            returns_tuple=returns_tuple,
            captures=trace.captured(),
            options=compiler.resolve_options(self.options),
        )
        seconds = time.perf_counter() - t0
        for o in compiler.compile_observers(spec.options):
            o.stage(spec, "traced", module, seconds)
        return spec

    def _check_return(self, out: TracedTensor, infos: list[_ArgInfo]) -> None:
        """Check a single result against a ``-> ts.Tensor[...]`` return annotation."""
        ann = self.signature.return_annotation
        if isinstance(ann, str):
            ann = _resolve_return(self.fn, ann)
        if not isinstance(ann, TensorAnnotation):
            return
        symbols: dict[str, tuple[int, str]] = {}
        for i in infos:
            a = self.annotations.get(i.param.split("[")[0].split(".")[0])
            if i.kind == "tensor" and a is not None:
                bind_shape(a, i.shape, symbols, i.param)
        try:
            bind_shape(ann, out.shape, symbols, "the result")
        except ShapeError as e:
            raise ShapeError(located(f"{self.name}: {e}")) from None
        pol = ann.policy
        if pol is not None and (out.is_complex or out.policy != pol):
            got = out.type.element_type if out.is_complex else out.policy
            raise TesseraTypeError(
                f"{self.name}: the result is {got!r}, but the return annotation says "
                f"{ann.dtype!r}"
            )

    def specialize(self, *args: Any, **kwargs: Any) -> Specialization:
        """The compiled specialization for these arguments (traced on first use)."""
        bound = self._bind(args, kwargs)
        arrays = _arrays_of(bound, self.name, meta=True)  # shapes and dtypes only
        return self._specialize(self._arg_infos(bound, arrays))

    def trace(self, *args: Any, **kwargs: Any) -> ModuleOp:
        """The traced (unoptimized) Graph IR module for these arguments."""
        return self.specialize(*args, **kwargs).traced

    # ------------------------------------------------------------ calling
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # the prepared GPU calls first: each takes only plain CUDA tensors of its
        # signature that do not require grad (so never traced values, nor a call that
        # autograd must see), and returns None for anything else
        if self._hot and not kwargs and (self.mesh is not None or context_mesh() is None):
            for hot in self._hot:
                out = hot(args)
                if out is not None:
                    return out
        if _traced_call(args, kwargs):
            from tessera.frontend.inline import inline_call

            return inline_call(self, args, kwargs)
        if _requires_grad(args, kwargs):
            from tessera.frontend.torch_autograd import call_differentiable

            return call_differentiable(self, args, kwargs)
        from tessera.runtime import convert, dispatch

        fast = (
            _fast_key(args)
            if not kwargs and self._fast and (self.mesh is not None or context_mesh() is None)
            else None
        )
        if fast is not None:
            hit = self._fast.get(fast)
            if hit is not None:
                spec, positions = hit
                return dispatch.run_on_gpu(spec, [args[i] for i in positions])
        bound = self._bind(args, kwargs)
        values = [v for _, v in _flatten(bound)]
        from tessera.dist.jit import call_sharded, sharded_call

        if sharded_call(self, values):
            return call_sharded(self, bound)
        if any(convert.is_cuda_tensor(v) for v in values):
            spec = self._specialize(self._arg_infos(bound, _arrays_of(bound, self.name, meta=True)))
            by_key = dict(_flatten(bound))
            out = dispatch.run_on_gpu(spec, [by_key[p] for p in spec.tensor_params])
            self._remember_fast(args, kwargs, spec)
            return out
        arrays = _arrays_of(bound, self.name)
        spec = self._specialize(self._arg_infos(bound, arrays))
        results = dispatch.run_on_cpu(spec, [arrays[p] for p in spec.tensor_params])
        if any(convert.is_torch_tensor(v) for v in values):
            results = [convert.to_torch(r) for r in results]
        return tuple(results) if spec.returns_tuple else results[0]

    def _remember_fast(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], spec: Specialization
    ) -> None:
        """Record a GPU call whose tensors are plain positional parameters for the fast path."""
        names = None if kwargs else self._positional_keys(len(args))
        if names is None or not all(t in names for t in spec.tensor_params):
            return
        key = _fast_key(args)
        if key is None or key in self._fast:
            return
        positions = tuple(names.index(t) for t in spec.tensor_params)
        self._fast[key] = (spec, positions)
        from tessera.runtime import dispatch

        run = dispatch.gpu_runner(spec)
        if run is not None:
            self._hot = [_hot_call(run, args, positions), *self._hot][:HOT_SIGNATURES]

    def _positional_keys(self, n: int) -> list[str] | None:
        """The flattened key (:func:`_flatten`) of each of ``n`` positional arguments:
        the parameter names of a plain signature called with all of them, ``args[i]``
        for a function of ``*args`` alone; None for other calls."""
        if self._plain_positional:
            return [p.name for p in self._params] if n == len(self._params) else None
        if len(self._params) == 1 and self._params[0].kind is inspect.Parameter.VAR_POSITIONAL:
            return [f"{self._params[0].name}[{i}]" for i in range(n)]
        return None

    # ------------------------------------------------------------ inspection
    def inspect_ir(self, level: str = "graph", **sizes: int) -> str:
        """The IR at ``level`` ("traced", "graph", "tile", "target", "ptx") as text.

        Uses the signature of the last call; before any call (or with ``sizes``
        for symbolic dims), the parameters' ``ts.Tensor`` annotations.
        """
        if level not in LEVELS:
            raise ValueError(
                f"inspect_ir: unknown level '{level}'; valid levels: {', '.join(LEVELS)}"
            )
        spec = self._last
        if spec is None or sizes:
            spec = self._specialize(self._annotation_infos(dict(sizes)))
        return str(spec.ir(level))


_current_mesh: Callable[[], Any] | None = None


def context_mesh() -> Any:
    """The ``dist.Mesh`` of an enclosing ``with mesh:`` / ``dist.use_mesh(...)``, or None."""
    global _current_mesh
    if _current_mesh is None:  # tessera.dist is imported on first use, not with the frontend
        from tessera.dist.mesh import current_mesh

        _current_mesh = current_mesh
    return _current_mesh()


def _traced_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call passes traced tensors: a compiled function called inside a traced one."""
    if active_trace() is None:  # cheap test first: calls outside any trace
        return False
    return any(isinstance(a, TracedTensor) for a in (*args, *kwargs.values())) or any(
        isinstance(x, TracedTensor)
        for a in (*args, *kwargs.values())
        if isinstance(a, tuple | list)
        for x in a
    )


def _requires_grad(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """True when some argument is a torch tensor that requires grad: the call then goes
    through torch autograd (:mod:`tessera.frontend.torch_autograd`)."""
    return any(getattr(a, "requires_grad", False) is True for a in (*args, *kwargs.values()))


def _flatten(bound: inspect.BoundArguments) -> list[tuple[str, Any]]:
    """(key, value) per argument; ``*args``/``**kwargs`` items get keys ``args[i]``/``kw.k``."""
    items: list[tuple[str, Any]] = []
    params = bound.signature.parameters
    for pname, value in bound.arguments.items():
        kind = params[pname].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            items += [(f"{pname}[{i}]", v) for i, v in enumerate(value)]
        elif kind is inspect.Parameter.VAR_KEYWORD:
            items += [(f"{pname}.{k}", v) for k, v in value.items()]
        else:
            items.append((pname, value))
    return items


def _unflatten(
    sig: inspect.Signature, values: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments for calling the function from flattened values."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for pname, p in sig.parameters.items():
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            args += [v for k, v in values.items() if k.startswith(f"{pname}[")]
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update(
                {k[len(pname) + 1 :]: v for k, v in values.items() if k.startswith(f"{pname}.")}
            )
        elif p.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[pname] = values[pname]
        else:
            args.append(values[pname])
    return args, kwargs


def _static_key(v: Any) -> Any:
    return static_identity(v) if v is not None else None


def _arrays_of(
    bound: inspect.BoundArguments, name: str, meta: bool = False
) -> dict[str, np.ndarray]:
    """The array arguments as numpy (or, with ``meta``, shape/dtype stand-ins for GPU tensors)."""
    from tessera.runtime import convert

    out: dict[str, np.ndarray] = {}
    for pname, v in _flatten(bound):
        if isinstance(v, np.ndarray):
            out[pname] = v
        elif convert.is_torch_tensor(v):
            if meta and convert.is_cuda_tensor(v):
                from tessera.ir.dtypes import dtype_of as _dt

                d = _dt(v.dtype, where=f"{name} argument '{pname}'")
                out[pname] = np.empty(tuple(v.shape), dtype=d.np_dtype)
            else:
                out[pname] = convert.to_numpy(v, where=f"{name} argument '{pname}'")
    return out


def _mesh_sizes(mesh: Any) -> dict[str, int] | None:
    """Axis sizes of a mesh given as a dict, a ``#tessera.mesh`` attribute or a mesh object."""
    if mesh is None:
        return None
    if isinstance(mesh, dict):
        return {str(k): int(v) for k, v in mesh.items()}
    if hasattr(mesh, "as_dict"):
        return {str(k): int(v) for k, v in mesh.as_dict().items()}
    axes = getattr(mesh, "axes", None) or getattr(mesh, "axis_names", None)
    shape = getattr(mesh, "shape", None) or getattr(mesh, "mesh_shape", None)
    if axes is not None and shape is not None:
        return {str(a): int(s) for a, s in zip(axes, tuple(shape))}
    raise TesseraTypeError(
        f"mesh: expected a dict of axis sizes or a mesh with axes and shape, got {mesh!r}"
    )


class _JitDecorator:
    """``ts.jit``: ``@ts.jit``, ``@ts.jit(mesh=...)``, and ``@jit @autodiff`` stacking."""

    def __init__(self, inner: Callable[[Any], Any] | None = None, **options: Any):
        self._inner = inner
        self._options = options

    def __call__(self, fn: Any = None, /, **options: Any) -> Any:
        if fn is None:
            return _JitDecorator(self._inner, **{**self._options, **options})
        if self._inner is not None:
            fn = self._inner(fn)
        return CompiledFunction(fn, **{**self._options, **options})

    def __matmul__(self, other: Callable[[Any], Any]) -> _JitDecorator:
        """``@jit @autodiff``: apply ``other`` first, then compile."""
        inner = self._inner
        return _JitDecorator(
            (lambda f: inner(other(f))) if inner is not None else other, **self._options
        )

    def __repr__(self) -> str:
        return "ts.jit"


jit = _JitDecorator()


def module(name: str | None = None, *, mesh: Any = None) -> Callable[[Any], CompiledFunction]:
    """``@graph.module("attention")``: compile a function as the named Graph IR function."""
    if callable(name):
        return CompiledFunction(name)  # type: ignore[return-value]

    def wrap(fn: Callable[..., Any]) -> CompiledFunction:
        return CompiledFunction(fn, name, mesh=mesh)

    return wrap
