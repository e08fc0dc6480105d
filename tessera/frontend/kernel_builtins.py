"""The kernel builtins (``ts.tile.*``, ``tshared``, ``cp_async``, ``tbarrier``) as IR.

Each handler gets the code generator, the call's evaluated positional and
keyword arguments, and the :class:`Intrinsic` (with any ``[dtype]`` bound)
and returns the call's value. Errors are raised as ``KernelTypeError``; the
code generator adds the source line.

Async copies: a kernel that never calls ``cp_commit_group`` gets implicit
completion — every ``cp_wait_group(n)`` is preceded by a ``commit_group`` and
every ``barrier()`` by ``commit_group; wait_group 0`` — so the guide's kernels
that copy and then only call ``tbarrier()`` read complete data. Kernels that
call ``cp_commit_group`` manage groups themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import VectorType

from tessera.frontend import kernel_memory as mem
from tessera.frontend.kernel_intrinsics import Intrinsic
from tessera.frontend.kernel_memory import MmaProduct, Ref
from tessera.frontend.kernel_values import (
    KernelTypeError,
    Scalar,
    VectorValue,
    is_float,
    is_py_number,
    type_name,
)
from tessera.ir import tile as ttile
from tessera.ir.dtypes import DType, dtype_of
from tessera.ir.policy import NumericPolicy

if TYPE_CHECKING:
    from tessera.frontend.kernel_ast import KernelCodegen

Handler = Callable[["KernelCodegen", Intrinsic, list[Any], dict[str, Any]], Any]
HANDLERS: dict[str, Handler] = {}


def handler(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[n] = fn
        return fn

    return register


def _args(
    name: str, args: list[Any], kwargs: dict[str, Any], params: list[str], required: int
) -> list[Any]:
    """Bind positional/keyword arguments to ``params`` (missing optional ones are None)."""
    if len(args) > len(params):
        raise KernelTypeError(f"{name}() takes at most {len(params)} arguments, got {len(args)}")
    out: list[Any] = list(args) + [None] * (len(params) - len(args))
    for k, v in kwargs.items():
        if k not in params:
            raise KernelTypeError(
                f"{name}() got an unexpected keyword '{k}'; it takes {', '.join(params)}"
            )
        i = params.index(k)
        if i < len(args):
            raise KernelTypeError(f"{name}() got '{k}' twice")
        out[i] = v
    for i in range(required):
        if out[i] is None:
            raise KernelTypeError(f"{name}() needs the argument '{params[i]}'")
    return out


def _dtype(v: Any, where: str) -> DType:
    if isinstance(v, NumericPolicy):
        return v.storage
    try:
        return dtype_of(v, where=where)
    except TypeError as e:
        raise KernelTypeError(str(e)) from None


def _ref(v: Any, what: str) -> Ref:
    if isinstance(v, Intrinsic) and v.name == "shared_alloc":
        raise KernelTypeError(
            f"{what}: a bare tshared.alloc has no shape or dtype; allocate with "
            "tshared.alloc[f16](128) or tile.alloc_shared((128,), f16)"
        )
    if not isinstance(v, Ref):
        raise KernelTypeError(f"{what} must be a tensor or shared buffer, got {type_name(v)}")
    return v


def _const_int(v: Any, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise KernelTypeError(f"{what} must be a compile-time int, got {type_name(v)}")
    return v


def _mask(cg: KernelCodegen, m: Any) -> Scalar | None:
    if m is None:
        return None
    if m is True:
        return None
    return cg.em.to_bool(m)


# ------------------------------------------------------------------------ coordinates


@handler("linear_id", "local_id", "lane_id", "warp_id")
def _lane(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    _args(intr.name, args, kw, [], 0)
    return cg.em.lane(intr.name)


@handler("group_id", "tile_id")
def _group_id(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    _args(intr.name, args, kw, [], 0)
    return cg.em.lane("tile_id")


@handler("num_groups")
def _num_groups(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    _args(intr.name, args, kw, [], 0)
    return cg.em.lane("num_tiles")


@handler("group_size")
def _group_size(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    _args(intr.name, args, kw, [], 0)
    return cg.em.group_size


@handler("range")
def _range(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    raise KernelTypeError("tile.range(...) can only be the iterable of a for loop")


# ------------------------------------------------------------------------------ memory


def _alloc(shape: Any, dtype: Any, swizzle: Any, alignment: Any, where: str) -> tuple:
    dims = shape if isinstance(shape, tuple | list) else (shape,)
    dims = tuple(_const_int(d, f"{where}: a shared-memory dim") for d in dims)
    if not dims or any(d < 1 for d in dims):
        raise KernelTypeError(f"{where}: shape must be positive ints, got {list(dims)}")
    dt = _dtype(dtype, where)
    if swizzle is not None and swizzle not in ttile.SWIZZLES:
        raise KernelTypeError(f"{where}: unknown swizzle {swizzle!r}; valid: 'xor'")
    if alignment is not None:
        alignment = _const_int(alignment, f"{where}: alignment")
    return dims, dt, swizzle, alignment


def _emit_alloc(cg: KernelCodegen, dims: tuple, dt: DType, swizzle: Any, alignment: Any) -> Ref:
    op = cg.em.emit(ttile.AllocSharedOp(dims, dt.ir_type, swizzle, alignment))
    return Ref.whole(op.results[0], dims, cg.current_target or "shared buffer", True)


@handler("alloc_shared")
def _alloc_shared(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    shape, dtype, swizzle, alignment = _args(
        "alloc_shared", args, kw, ["shape", "dtype", "swizzle", "alignment"], 2
    )
    return _emit_alloc(cg, *_alloc(shape, dtype, swizzle, alignment, "alloc_shared"))


@handler("shared_alloc")
def _tshared_alloc(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    swizzle, alignment = kw.pop("swizzle", None), kw.pop("alignment", None)
    dtype = kw.pop("dtype", None)
    if kw:
        raise KernelTypeError(f"tshared.alloc() got unexpected keywords {sorted(kw)}")
    if intr.bound:
        dtype = intr.bound[0]
        shape: Any = args[0] if len(args) == 1 and isinstance(args[0], tuple) else tuple(args)
    elif len(args) == 2 and isinstance(args[0], tuple | int):
        shape, dtype = args
    else:
        shape = tuple(args)
    if dtype is None or not shape:
        raise KernelTypeError(
            "tshared.alloc needs a dtype and a shape: tshared.alloc[f16](BM, BK) or "
            "tshared.alloc((BM, BK), f16)"
        )
    return _emit_alloc(cg, *_alloc(shape, dtype, swizzle, alignment, "tshared.alloc"))


@handler("alloc_register")
def _alloc_register(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    (dtype,) = _args("alloc_register", args, kw, ["dtype"], 1)
    return cg.em.const(0, _dtype(dtype, "alloc_register").ir_type)


def _element(cg: KernelCodegen, ref: Ref, index: Any) -> Ref:
    items = list(index) if isinstance(index, tuple | list) else [index]
    return mem.subscript(cg.em, ref, items)


@handler("load")
def _load(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    ref, index, mask, other = _args("load", args, kw, ["ref", "index", "mask", "other"], 1)
    r = _ref(ref, "load: the first argument")
    if index is not None:
        r = _element(cg, r, index)
    m = _mask(cg, mask)
    if other is not None and m is None:
        raise KernelTypeError("load(): 'other' needs a mask")
    return mem.load(cg.em, r, m, other)


@handler("store")
def _store(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    ref, index, value, mask = _args("store", args, kw, ["ref", "index", "value", "mask"], 1)
    if value is None:
        raise KernelTypeError("store() needs value=")
    r = _ref(ref, "store: the first argument")
    if index is not None:
        r = _element(cg, r, index)
    mem.store(cg.em, r, value, _mask(cg, mask))
    return None


@handler("load_vector")
def _load_vector(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    ref, width, mask = _args("load_vector", args, kw, ["ref", "width", "mask"], 2)
    w = _const_int(width, "load_vector: width")
    return VectorValue(mem.load_vector(cg.em, _ref(ref, "load_vector"), w, _mask(cg, mask)))


@handler("store_vector")
def _store_vector(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    ref, value, mask = _args("store_vector", args, kw, ["ref", "value", "mask"], 2)
    if not isinstance(value, VectorValue):
        raise KernelTypeError(f"store_vector: the value must be a vector, got {type_name(value)}")
    r = _ref(ref, "store_vector")
    if value.type.element_type != r.element_type:
        raise KernelTypeError(
            f"store_vector: a vector of {value.type.element_type} into '{r.name}' of "
            f"{r.element_type}"
        )
    mem.store_vector(cg.em, r, value.ssa, _mask(cg, mask))
    return None


@handler("cp_async")
def _cp_async(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    dst, src = _args("cp_async", args, kw, ["dst", "src"], 2)
    mem.copy_async(cg.em, _ref(dst, "cp_async: the destination"), _ref(src, "cp_async: the source"))
    return None


@handler("cp_commit_group")
def _commit(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    _args("cp_commit_group", args, kw, [], 0)
    cg.em.emit(ttile.CommitGroupOp())
    return None


@handler("cp_wait_group")
def _wait(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    (n,) = _args("cp_wait_group", args, kw, ["n"], 0)
    n = 0 if n is None else _const_int(n, "cp_wait_group: the pending count")
    if not cg.explicit_commit:
        cg.em.emit(ttile.CommitGroupOp())
    cg.em.emit(ttile.WaitGroupOp(n))
    return None


@handler("barrier")
def _barrier(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    _args("barrier", args, kw, [], 0)
    if cg.uses_async_copy and not cg.explicit_commit:
        # in a loop with prefetch=n, the copies of the latest n-1 iterations stay in
        # flight (docs: tessera/frontend/kernel_worksharing.py)
        cg.em.emit(ttile.CommitGroupOp())
        cg.em.emit(ttile.WaitGroupOp(max(cg.prefetch_depth - 1, 0)))
    cg.em.emit(ttile.BarrierOp())
    return None


# ---------------------------------------------------------------------- cross-lane ops


@handler("shuffle_xor")
def _shuffle(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    v, offset = _args("shuffle_xor", args, kw, ["value", "offset"], 2)
    s = cg.em.materialize(v)
    return Scalar(cg.em.emit(ttile.ShuffleXorOp(s.ssa, _const_int(offset, "offset"))).results[0])


@handler("reduce")
def _reduce(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    v, kind, scope = _args("reduce", args, kw, ["value", "kind", "scope"], 1)
    kind = kind or "sum"
    scope = scope or "group"
    if kind not in ttile.REDUCE_KINDS or scope not in ttile.REDUCE_SCOPES:
        raise KernelTypeError(
            f"reduce(): kind must be one of {ttile.REDUCE_KINDS} and scope one of "
            f"{ttile.REDUCE_SCOPES}, got {kind!r}, {scope!r}"
        )
    s = cg.em.materialize(v)
    return Scalar(cg.em.emit(ttile.ReduceOp(s.ssa, kind, scope)).results[0])


@handler("mma")
def _mma(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    a, b, accum = _args("mma", args, kw, ["a", "b", "accum"], 2)
    acc = _dtype(accum, "mma accum").ir_type if accum is not None else None
    if acc is None:
        from xdsl.dialects.builtin import f32

        acc = f32
    return mem.mma_product(_ref(a, "mma: a"), _ref(b, "mma: b"), acc)


# -------------------------------------------------------------------------------- math

_MATH = ("exp", "log", "sqrt", "rsqrt", "tanh", "sin", "cos", "erf", "floor", "ceil")


def _math(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    (x,) = _args(intr.name, args, kw, ["x"], 1)
    return cg.em.unary_math(intr.name, x)


for _name in _MATH:
    HANDLERS[_name] = _math


@handler("where")
def _where(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    c, a, b = _args("where", args, kw, ["cond", "a", "b"], 3)
    if is_py_number(c):
        return a if c else b
    return cg.em.select(c, a, b)


@handler("cast")
def _cast(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    x, dtype = _args("cast", args, kw, ["x", "dtype"], 2)
    return cast_to(cg, x, _dtype(dtype, "cast"))


def cast_to(cg: KernelCodegen, x: Any, dt: DType) -> Scalar:
    """``x`` converted to ``dt`` (``ts.f32(x)``, ``cast(x, f16)``)."""
    if isinstance(x, VectorValue | Ref | MmaProduct):
        raise KernelTypeError(f"cannot cast {type_name(x)} to {dt}")
    return cg.em.materialize(x, dt.ir_type)


def call_intrinsic(cg: KernelCodegen, intr: Intrinsic, args: list[Any], kw: dict[str, Any]) -> Any:
    """Dispatch a call of a kernel builtin."""
    fn = HANDLERS.get(intr.name)
    if fn is None:
        raise KernelTypeError(f"'{intr.name}' is not a kernel builtin")
    return fn(cg, intr, args, dict(kw))


def is_vector_type(t: Any) -> bool:
    return isinstance(t, VectorType)


__all__ = ["HANDLERS", "call_intrinsic", "cast_to", "is_float", "is_vector_type"]
