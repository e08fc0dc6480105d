"""Tracing Python functions into Graph IR.

A :class:`Trace` owns the block of the ``func.func`` being built. Calling an
operator function (:mod:`tessera.frontend.ops`) on :class:`TracedTensor` values
appends one ``tgraph`` op to the innermost active trace, verifies it on the
spot and remembers the user's ``file:line`` for it, so a bad shape is reported
where the user wrote it. Verifier messages (``tgraph.matmul: inner dimensions
differ: ...``) are reused verbatim, with the op's short name and the location
added (``matmul inner dimensions differ: ... (model.py:12)``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ComplexType, IntegerAttr, ModuleOp, TensorType, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from tessera.frontend.errors import (
    ShapeError,
    TesseraError,
    TesseraTypeError,
    TraceError,
    located,
    user_location,
)
from tessera.ir.attrs import MeshAttr, policy_of, tensor_type
from tessera.ir.dtypes import DType
from tessera.ir.policy import NumericPolicy


def short_name(op_name: str) -> str:
    """``tgraph.matmul`` -> ``matmul``."""
    return op_name.split(".", 1)[-1]


def error_from_verifier(op: Operation, e: Exception, loc: str) -> TesseraError:
    """A located TesseraError from a verifier failure of ``op``."""
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    msg = msg.removeprefix("Operation does not verify: ")
    prefix = f"{op.name}: "
    if msg.startswith(prefix):
        msg = f"{short_name(op.name)} {msg[len(prefix):]}"
    elif not msg.startswith(short_name(op.name)):
        msg = f"{short_name(op.name)}: {msg}"
    cls = TesseraTypeError if ("element type" in msg or "floating-point" in msg) else ShapeError
    return cls(located(msg, loc))


class Trace:
    """One function being traced: its block, argument values and op locations."""

    def __init__(self, name: str, mesh: dict[str, int] | None = None):
        self.name = name
        self.block = Block()
        self.mesh = dict(mesh) if mesh is not None else None
        self.locations: dict[int, str] = {}
        self._seed_counter = 0
        self.attributes: dict[str, Attribute] = {}
        """Attributes of the traced ``func.func`` (set by whoever builds the trace)."""
        self.captures: dict[SSAValue, tuple[SSAValue, TracedTensor]] = {}
        """Tensors of enclosing traces used here (a closure inside a nested ``ts.grad`` /
        ``ts.jvp`` function): their value there -> (the argument added for it here, the
        tensor). Captured arguments follow the declared ones."""

    def add_argument(self, t: Attribute) -> TracedTensor:
        return TracedTensor(self.block.insert_arg(t, len(self.block.args)), self)

    def capture(self, outer: TracedTensor) -> SSAValue:
        """The argument of this trace standing for ``outer``, a tensor of an enclosing trace."""
        found = self.captures.get(outer._value)
        if found is None:
            arg = self.block.insert_arg(outer._value.type, len(self.block.args))
            found = self.captures[outer._value] = (arg, outer)
        return found[0]

    def captured(self) -> list[TracedTensor]:
        """The captured tensors of enclosing traces, in argument order."""
        return [t for _, t in self.captures.values()]

    def axis_size(self, axis: str, opname: str) -> int:
        """The size of mesh axis ``axis``; a located error when the function has no mesh.

        A collective never silently runs as if its axis had one rank: the mesh comes
        from ``@ts.jit(mesh=...)``, an enclosing ``with mesh:`` / ``dist.use_mesh(...)``,
        or the ``DistTensor`` arguments of the call.
        """
        if self.mesh is None:
            raise ShapeError(
                located(
                    f"{opname}: mesh axis '{axis}' has no mesh; compile with "
                    "@ts.jit(mesh=...), call inside 'with mesh:' (or dist.use_mesh(mesh)), "
                    "or pass dist.tensor arguments"
                )
            )
        if axis not in self.mesh:
            raise ShapeError(
                located(f"{opname}: mesh has no axis '{axis}' (axes: {', '.join(self.mesh)})")
            )
        return self.mesh[axis]

    def next_seed(self) -> int:
        """A fresh stream id for random ops that were given no explicit offset."""
        self._seed_counter += 1
        return self._seed_counter - 1

    def add(self, op: Operation) -> Operation:
        """Append ``op``, verify it, and record the user's location; inside
        ``with ts.stage(k):`` the op gets ``tessera.stage = k``."""
        loc = user_location()
        self.block.add_op(op)
        stage = _STAGE.get()
        if stage is not None:
            op.attributes["tessera.stage"] = IntegerAttr(stage, i64)
        try:
            op.verify()
        except (DiagnosticException, ValueError) as e:
            op.detach()
            op.erase(safe_erase=False)
            raise error_from_verifier(op, e, loc) from None
        self.locations[id(op)] = loc
        return op

    def finish(self, results: Sequence[TracedTensor]) -> ModuleOp:
        """Close the function with ``func.return`` and wrap it in a module."""
        self.block.add_op(func.ReturnOp(*[r.value for r in results]))
        fn = func.FuncOp(
            self.name,
            ([a.type for a in self.block.args], [r.value.type for r in results]),
            Region(self.block),
        )
        if self.mesh:
            fn.attributes["tessera.mesh"] = MeshAttr.get(self.mesh)
        fn.attributes.update(self.attributes)
        module = ModuleOp([fn])
        try:
            module.verify()
        except (DiagnosticException, ValueError) as e:
            for op in reversed(list(module.walk())):
                try:
                    op.verify(verify_nested_ops=False)
                except (DiagnosticException, ValueError) as inner:
                    raise error_from_verifier(op, inner, self.locations.get(id(op), "")) from None
            raise TraceError(f"{self.name}: traced IR does not verify: {e}") from None
        return module


_ACTIVE: ContextVar[tuple[Trace, ...]] = ContextVar("tessera_active_traces", default=())
"""The traces being built in this thread (or asyncio task), innermost last. A context
variable, so concurrent ``@ts.jit`` calls in several threads each see only their own."""


_STAGE: ContextVar[int | None] = ContextVar("tessera_pipeline_stage", default=None)
"""The pipeline stage of ``with ts.stage(k):`` in this thread, or None."""


class stage:  # noqa: N801 - the guide's lower-case spelling, ts.stage(k)
    """``with ts.stage(k):`` -- the ops traced inside belong to pipeline stage ``k``.

    They carry ``tessera.stage = k``; ``spmd-partition`` runs them on the ranks whose
    coordinate on the mesh's ``pp`` axis is ``k`` and sends each value used by a later
    stage to it (``tgraph.send`` / ``tgraph.recv``). Stages nest innermost-wins and
    count from 0; a value flows only to the same or a later stage. Ops traced outside
    any ``ts.stage`` run on every rank. Only inside a traced function (``@ts.jit``).
    """

    def __init__(self, k: int):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise TraceError(located(f"ts.stage: the stage must be an int >= 0, got {k!r}"))
        if active_trace() is None:
            raise TraceError(located("ts.stage: used outside a traced function; open it "
                                     "inside the body of a @ts.jit function"))
        self.k = k
        self._tokens: list[Any] = []

    def __enter__(self) -> int:
        self._tokens.append(_STAGE.set(self.k))
        return self.k

    def __exit__(self, *exc: object) -> None:
        _STAGE.reset(self._tokens.pop())


@contextmanager
def tracing(trace: Trace) -> Iterator[Trace]:
    """Make ``trace`` the one that operator calls append to (in this thread)."""
    token = _ACTIVE.set((*_ACTIVE.get(), trace))
    try:
        yield trace
    finally:
        _ACTIVE.reset(token)


def active_trace() -> Trace | None:
    """The innermost trace being built in this thread, or None outside traced functions."""
    stack = _ACTIVE.get()
    return stack[-1] if stack else None


def current_trace(opname: str) -> Trace:
    """The innermost active trace; a located error outside traced functions."""
    trace = active_trace()
    if trace is None:
        raise TraceError(
            located(
                f"{opname}: called outside a traced function; decorate the function with "
                "@ts.jit or @graph.module"
            )
        )
    return trace


class TracedTensor:
    """A tensor value inside a traced function: an SSA value of Graph IR.

    Python operators build the same IR as the named functions (``a @ b`` is
    ``ts.matmul(a, b)``, ``a + 1.0`` adds a constant splat of ``a``'s dtype).
    """

    __array_priority__ = 1000  # numpy defers binary operators to us

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """``np.exp(x)``, ``array * x``: the matching ts operator, else a located error."""
        from tessera.frontend import ops

        return ops.array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """``np.sum(x)``, ``np.transpose(x)`` ...: the matching ts operator, else a
        located error."""
        from tessera.frontend import ops

        return ops.array_function(func, args, kwargs)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TraceError(
            located(
                "a traced tensor has no values while the function is traced; numpy cannot "
                "convert it (use ts.* operators)"
            )
        )

    def __init__(self, value: SSAValue, trace: Trace):
        self._value = value
        self._trace = trace

    def _lifted_into(self) -> Trace | None:
        """The active trace when it is nested inside this tensor's trace (a closure over
        this tensor in a nested traced function), else None."""
        stack = _ACTIVE.get()
        if not stack or stack[-1] is self._trace:
            return None
        return stack[-1] if any(t is self._trace for t in stack[:-1]) else None

    @property
    def trace(self) -> Trace:
        """The trace ops on this tensor append to: its own, or the active trace nested in
        it (where the tensor is captured as an argument)."""
        inner = self._lifted_into()
        return self._trace if inner is None else inner

    @property
    def value(self) -> SSAValue:
        """The SSA value in :attr:`trace` (a captured argument inside a nested trace)."""
        inner = self._lifted_into()
        return self._value if inner is None else inner.capture(self)

    # ------------------------------------------------------------ type info
    @property
    def type(self) -> TensorType:
        t = self.value.type
        assert isinstance(t, TensorType)
        return t

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.type.get_shape())

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_complex(self) -> bool:
        return isinstance(self.type.element_type, ComplexType)

    @property
    def policy(self) -> NumericPolicy:
        if self.is_complex:
            raise TesseraTypeError(located(f"complex tensor {self.type} has no numeric policy"))
        return policy_of(self.type)

    @property
    def dtype(self) -> DType:
        return self.policy.storage

    def __repr__(self) -> str:
        return f"TracedTensor({self.type})"

    def __bool__(self) -> bool:
        raise TraceError(
            located(
                "a traced tensor has no Python truth value: data-dependent Python control "
                "flow cannot be traced; use ts.where"
            )
        )

    def __iter__(self) -> Any:
        raise TraceError(located("a traced tensor cannot be iterated; index or slice it"))

    def __len__(self) -> int:
        if not self.shape:
            raise TesseraTypeError(located("len() of a rank-0 tensor"))
        return self.shape[0]

    __hash__ = object.__hash__

    # ------------------------------------------------------------ operators
    def __add__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.add(self, o)

    def __radd__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.add(o, self)

    def __sub__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.sub(self, o)

    def __rsub__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.sub(o, self)

    def __mul__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.mul(self, o)

    def __rmul__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.mul(o, self)

    def __truediv__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.div(self, o)

    def __rtruediv__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.div(o, self)

    def __pow__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.pow(self, o)

    def __rpow__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.pow(o, self)

    def __matmul__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.matmul(self, o)

    def __rmatmul__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.matmul(o, self)

    def __neg__(self) -> TracedTensor:
        from tessera.frontend import ops

        return ops.neg(self)

    def __pos__(self) -> TracedTensor:
        return self

    def __abs__(self) -> TracedTensor:
        from tessera.frontend import ops

        return ops.abs(self)

    def __lt__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.lt(self, o)

    def __le__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.le(self, o)

    def __gt__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.gt(self, o)

    def __ge__(self, o: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.ge(self, o)

    def __eq__(self, o: Any) -> TracedTensor:  # type: ignore[override]
        from tessera.frontend import ops

        return ops.eq(self, o)

    def __ne__(self, o: Any) -> TracedTensor:  # type: ignore[override]
        from tessera.frontend import ops

        return ops.ne(self, o)

    def __getitem__(self, index: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.getitem(self, index)

    @property
    def T(self) -> TracedTensor:
        """Matrix transpose: swaps the last two dims (like ``torch.Tensor.mT``)."""
        from tessera.frontend import ops

        return ops.transpose(self)

    @property
    def mT(self) -> TracedTensor:
        return self.T

    # ------------------------------------------------------------ methods
    def astype(self, dtype: Any) -> TracedTensor:
        from tessera.frontend import ops

        return ops.cast(self, dtype)

    def reshape(self, *shape: Any) -> TracedTensor:
        from tessera.frontend import ops

        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return ops.reshape(self, shape)

    def transpose(self, *dims: int) -> TracedTensor:
        from tessera.frontend import ops

        return ops.transpose(self, *dims)

    def sum(self, axis: Any = None, keepdims: bool = False) -> TracedTensor:
        from tessera.frontend import ops

        return ops.sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> TracedTensor:
        from tessera.frontend import ops

        return ops.mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> TracedTensor:
        from tessera.frontend import ops

        return ops.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> TracedTensor:
        from tessera.frontend import ops

        return ops.min(self, axis=axis, keepdims=keepdims)


def result_type(shape: Sequence[int], like: TensorType | NumericPolicy | DType) -> TensorType:
    """A tensor type of ``shape`` with the element type and encoding of ``like``."""
    if isinstance(like, TensorType):
        return TensorType(like.element_type, list(shape), like.encoding)
    return tensor_type(shape, like)


def func_name_attr(module: ModuleOp) -> str:
    """The name of the (first) func.func in ``module``."""
    for op in module.ops:
        if isinstance(op, func.FuncOp):
            return op.sym_name.data
    raise TraceError("module has no func.func")


__all__ = [
    "Trace", "TracedTensor", "tracing", "active_trace", "current_trace", "result_type", "short_name",
    "error_from_verifier", "func_name_attr",
]
