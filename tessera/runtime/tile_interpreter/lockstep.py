"""Lockstep implementations of the xDSL dialects inside kernels: ``scf`` (under lane
masks), ``arith``, ``math``, ``vector`` and ``memref``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects import arith, math, memref, scf, vector
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    VectorType,
)
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    PythonValues,
    ReturnedValues,
    TerminatorValue,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.ir import Operation
from xdsl.utils.exceptions import InterpretationError

from tessera.numerics.cast import cast_array
from tessera.runtime.tile_interpreter.state import (
    SharedBuffer,
    _fail,
    _float,
    _round,
    _run_masked,
    _scatter,
    _state,
    _tile_or_lane_indices,
    _uniform,
    np_dtype,
    scalar_type,
)
from tessera.runtime.tile_interpreter.tile_ops import (
    TileFunctions,
)

# --------------------------------------------------------------------------- scf


@register_impls
class LockstepScfFunctions(InterpreterFunctions):
    """``scf`` under an active-lane mask."""

    @impl(scf.IfOp)
    def run_if(self, interpreter: Interpreter, op: scf.IfOp, args: PythonValues):
        st = _state(interpreter)
        (cond,) = args
        if _uniform(cond):
            region = op.true_region if bool(cond) else op.false_region
            return interpreter.run_ssacfg_region(region, (), "scf.if")
        c = np.asarray(cond, np.bool_)
        tm = st.mask & c
        fm = st.mask & ~c
        t_res = f_res = None
        if tm.any():
            t_res = _run_masked(interpreter, op.true_region, (), tm, "scf.if.then")
        if fm.any() and op.false_region.blocks:
            f_res = _run_masked(interpreter, op.false_region, (), fm, "scf.if.else")
        if not op.results:
            return ()
        if t_res is None:
            return f_res
        if f_res is None:
            return t_res
        return tuple(st.where(c, t, f) for t, f in zip(t_res, f_res))

    @impl(scf.ForOp)
    def run_for(self, interpreter: Interpreter, op: scf.ForOp, args: PythonValues):
        st = _state(interpreter)
        lb, ub, step, *carried = args
        if _uniform(lb) and _uniform(ub) and _uniform(step):
            lb, ub, step = int(lb), int(ub), int(step)
            if step <= 0:
                _fail(op, f"step must be positive, got {step}")
            vals = tuple(carried)
            for i in range(lb, ub, step):
                vals = interpreter.run_ssacfg_region(
                    op.body, (np.asarray(i, np.int64).astype(_iv_dtype(op)), *vals), "scf.for"
                )
            return vals
        lb, ub, step = (st.lanes_scalar(np.asarray(x, np.int64)) for x in (lb, ub, step))
        if (st.mask & (step <= 0)).any():
            _fail(op, "step must be positive")
        vals = tuple(carried)
        iv = lb.copy()
        while True:
            active = st.mask & (iv < ub)
            if not active.any():
                return vals
            new = _run_masked(interpreter, op.body, (iv.astype(_iv_dtype(op)), *vals), active,
                              "scf.for")
            vals = tuple(st.where(active, n, o) for n, o in zip(new, vals))
            iv = iv + step

    @impl(scf.WhileOp)
    def run_while(self, interpreter: Interpreter, op: scf.WhileOp, args: PythonValues):
        st = _state(interpreter)
        vals = tuple(args)
        active = st.mask
        final: tuple[Any, ...] | None = None
        while True:
            cond, *fwd = _run_masked(interpreter, op.before_region, vals, active, "scf.while")
            if _uniform(cond) and final is None and active is st.mask:
                if not bool(cond):
                    return tuple(fwd)
                vals = interpreter.run_ssacfg_region(op.after_region, tuple(fwd), "scf.while")
                continue
            c = st.lanes_scalar(np.asarray(cond, np.bool_))
            leaving = active & ~c
            if final is None:
                final = tuple(fwd)
            final = tuple(st.where(leaving, f, o) for f, o in zip(fwd, final))
            active = active & c
            if not active.any():
                return final
            new = _run_masked(interpreter, op.after_region, tuple(fwd), active, "scf.while")
            vals = tuple(st.where(active, n, o) for n, o in zip(new, vals))

    @impl_terminator(scf.YieldOp)
    def run_yield(
        self, interpreter: Interpreter, op: scf.YieldOp, args: PythonValues
    ) -> tuple[TerminatorValue, PythonValues]:
        return ReturnedValues(args), ()

    @impl_terminator(scf.ConditionOp)
    def run_condition(
        self, interpreter: Interpreter, op: scf.ConditionOp, args: PythonValues
    ) -> tuple[TerminatorValue, PythonValues]:
        return ReturnedValues(args), ()


def _iv_dtype(op: scf.ForOp) -> np.dtype:
    return np_dtype(op.body.block.args[0].type)


# --------------------------------------------------------------------------- arith / math


def _binary_float(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]):
    def run(self: Any, interpreter: Interpreter, op: Operation, args: PythonValues):
        t = op.results[0].type
        return (_round(fn(_float(args[0], t), _float(args[1], t)), t),)

    return run


def _unary_float(fn: Callable[[np.ndarray], np.ndarray]):
    def run(self: Any, interpreter: Interpreter, op: Operation, args: PythonValues):
        t = op.results[0].type
        return (_round(fn(_float(args[0], t)), t),)

    return run


def _binary_int(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], unsigned: bool = False):
    def run(self: Any, interpreter: Interpreter, op: Operation, args: PythonValues):
        t = op.results[0].type
        dt = np_dtype(scalar_type(t))
        a, b = np.asarray(args[0], dt), np.asarray(args[1], dt)
        if unsigned and dt != np.bool_:
            ud = np.dtype(f"u{dt.itemsize}")
            return (np.asarray(fn(a.view(ud) if a.ndim else a.astype(ud),
                                  b.view(ud) if b.ndim else b.astype(ud))).astype(dt),)
        return (np.asarray(fn(a, b)).astype(dt),)

    return run


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return np.where((a < 0) != (b < 0), -q, q)


def _trunc_rem(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a - _trunc_div(a, b) * b


_CMPI: dict[str, tuple[Callable[[Any, Any], Any], bool]] = {
    "eq": (np.equal, False), "ne": (np.not_equal, False),
    "slt": (np.less, False), "sle": (np.less_equal, False),
    "sgt": (np.greater, False), "sge": (np.greater_equal, False),
    "ult": (np.less, True), "ule": (np.less_equal, True),
    "ugt": (np.greater, True), "uge": (np.greater_equal, True),
}


def _cmpf(pred: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    unordered = np.isnan(a) | np.isnan(b)
    base = pred[1:] if pred[0] in "ou" else pred
    if pred == "false":
        return np.zeros(np.broadcast(a, b).shape, np.bool_)
    if pred == "true":
        return np.ones(np.broadcast(a, b).shape, np.bool_)
    if pred == "ord":
        return ~unordered
    if pred == "uno":
        return unordered
    r = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
         "gt": np.greater, "ge": np.greater_equal}[base](a, b)
    return (r & ~unordered) if pred[0] == "o" else (r | unordered)


def _maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(a, b)


def _constant_value(op: arith.ConstantOp) -> Any:
    v = op.value
    t = op.result.type
    if isinstance(v, DenseIntOrFPElementsAttr):
        vals = np.asarray(v.get_values(), np_dtype(scalar_type(t)))
        shape = tuple(v.get_shape())
        if vals.size == 1:
            return np.broadcast_to(vals.reshape(()), shape).copy()
        return vals.reshape(shape)
    if isinstance(v, IntegerAttr):
        d = np_dtype(t)
        if d == np.bool_:
            return np.bool_(v.value.data & 1)
        return np.asarray(v.value.data).astype(d)[()]
    value = getattr(v, "value", None)
    data = getattr(value, "data", None)
    if isinstance(data, float | int):
        return np_dtype(t).type(data)
    raise InterpretationError(f"arith.constant: unsupported value {v}")


@register_impls
class LockstepArithFunctions(InterpreterFunctions):
    """``arith`` on per-lane numpy arrays."""

    @impl(arith.ConstantOp)
    def run_constant(self, interpreter: Interpreter, op: arith.ConstantOp, args: PythonValues):
        return (_constant_value(op),)

    run_addf = impl(arith.AddfOp)(_binary_float(np.add))
    run_subf = impl(arith.SubfOp)(_binary_float(np.subtract))
    run_mulf = impl(arith.MulfOp)(_binary_float(np.multiply))
    run_divf = impl(arith.DivfOp)(_binary_float(np.divide))
    run_maximumf = impl(arith.MaximumfOp)(_binary_float(np.maximum))
    run_minimumf = impl(arith.MinimumfOp)(_binary_float(np.minimum))
    run_maxnumf = impl(arith.MaxnumfOp)(_binary_float(np.fmax))
    run_minnumf = impl(arith.MinnumfOp)(_binary_float(np.fmin))
    run_negf = impl(arith.NegfOp)(_unary_float(np.negative))

    run_addi = impl(arith.AddiOp)(_binary_int(np.add))
    run_subi = impl(arith.SubiOp)(_binary_int(np.subtract))
    run_muli = impl(arith.MuliOp)(_binary_int(np.multiply))
    run_divsi = impl(arith.DivSIOp)(_binary_int(_trunc_div))
    run_divui = impl(arith.DivUIOp)(_binary_int(lambda a, b: a // np.where(b == 0, 1, b), True))
    run_remsi = impl(arith.RemSIOp)(_binary_int(_trunc_rem))
    run_remui = impl(arith.RemUIOp)(_binary_int(lambda a, b: a % np.where(b == 0, 1, b), True))
    run_floordivsi = impl(arith.FloorDivSIOp)(
        _binary_int(lambda a, b: a // np.where(b == 0, 1, b))
    )
    run_ceildivsi = impl(arith.CeilDivSIOp)(
        _binary_int(lambda a, b: -(-a // np.where(b == 0, 1, b)))
    )
    run_ceildivui = impl(arith.CeilDivUIOp)(
        _binary_int(lambda a, b: -(-a // np.where(b == 0, 1, b)), True)
    )
    run_maxsi = impl(arith.MaxSIOp)(_binary_int(np.maximum))
    run_minsi = impl(arith.MinSIOp)(_binary_int(np.minimum))
    run_maxui = impl(arith.MaxUIOp)(_binary_int(np.maximum, True))
    run_minui = impl(arith.MinUIOp)(_binary_int(np.minimum, True))
    run_andi = impl(arith.AndIOp)(_binary_int(np.bitwise_and))
    run_ori = impl(arith.OrIOp)(_binary_int(np.bitwise_or))
    run_xori = impl(arith.XOrIOp)(_binary_int(np.bitwise_xor))
    run_shli = impl(arith.ShLIOp)(_binary_int(np.left_shift))
    run_shrsi = impl(arith.ShRSIOp)(_binary_int(np.right_shift))
    run_shrui = impl(arith.ShRUIOp)(_binary_int(np.right_shift, True))

    @impl(arith.CmpiOp)
    def run_cmpi(self, interpreter: Interpreter, op: arith.CmpiOp, args: PythonValues):
        pred = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
        fn, unsigned = _CMPI[pred]
        dt = np_dtype(scalar_type(op.lhs.type))
        a, b = np.asarray(args[0], dt), np.asarray(args[1], dt)
        if unsigned and dt != np.bool_:
            ud = np.dtype(f"u{dt.itemsize}")
            a, b = a.astype(ud), b.astype(ud)
        return (fn(a, b),)

    @impl(arith.CmpfOp)
    def run_cmpf(self, interpreter: Interpreter, op: arith.CmpfOp, args: PythonValues):
        pred = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
        t = op.lhs.type
        return (_cmpf(pred, _float(args[0], t), _float(args[1], t)),)

    @impl(arith.SelectOp)
    def run_select(self, interpreter: Interpreter, op: arith.SelectOp, args: PythonValues):
        c, a, b = args
        c = np.asarray(c, np.bool_)
        if isinstance(op.result.type, VectorType) and c.ndim == 1:
            c = c[:, None]
        return (np.where(c, a, b).astype(np_dtype(scalar_type(op.result.type))),)

    @impl(arith.IndexCastOp)
    def run_index_cast(self, interpreter: Interpreter, op: arith.IndexCastOp, args: PythonValues):
        return (np.asarray(args[0]).astype(np_dtype(scalar_type(op.result.type))),)

    @impl(arith.ExtFOp)
    def run_extf(self, interpreter: Interpreter, op: arith.ExtFOp, args: PythonValues):
        return (np.asarray(args[0]).astype(np_dtype(scalar_type(op.result.type))),)

    @impl(arith.TruncFOp)
    def run_truncf(self, interpreter: Interpreter, op: arith.TruncFOp, args: PythonValues):
        # Nearest-even with the target format's overflow rule, rounding once from the
        # exact input (cast_array): e4m3fn overflow -> NaN, e5m2/f16/bf16 -> Inf.
        return (cast_array(np.asarray(args[0]), np_dtype(scalar_type(op.result.type))),)

    @impl(arith.SIToFPOp)
    def run_sitofp(self, interpreter: Interpreter, op: arith.SIToFPOp, args: PythonValues):
        return (_round(np.asarray(args[0]).astype(np.float64), op.result.type),)

    @impl(arith.UIToFPOp)
    def run_uitofp(self, interpreter: Interpreter, op: arith.UIToFPOp, args: PythonValues):
        a = np.asarray(args[0])
        if a.dtype.kind == "i":
            a = a.astype(np.dtype(f"u{a.dtype.itemsize}"))
        return (_round(a.astype(np.float64), op.result.type),)

    @impl(arith.FPToSIOp)
    def run_fptosi(self, interpreter: Interpreter, op: arith.FPToSIOp, args: PythonValues):
        a = np.trunc(np.asarray(args[0]).astype(np.float64))
        return (a.astype(np_dtype(scalar_type(op.result.type))),)

    @impl(arith.FPToUIOp)
    def run_fptoui(self, interpreter: Interpreter, op: arith.FPToUIOp, args: PythonValues):
        a = np.trunc(np.asarray(args[0]).astype(np.float64))
        return (a.astype(np_dtype(scalar_type(op.result.type))),)

    @impl(arith.ExtSIOp)
    def run_extsi(self, interpreter: Interpreter, op: arith.ExtSIOp, args: PythonValues):
        a = np.asarray(args[0])
        if a.dtype == np.bool_:
            a = np.where(a, -1, 0)
        return (a.astype(np_dtype(scalar_type(op.result.type))),)

    @impl(arith.ExtUIOp)
    def run_extui(self, interpreter: Interpreter, op: arith.ExtUIOp, args: PythonValues):
        a = np.asarray(args[0])
        if a.dtype.kind == "i":
            a = a.astype(np.dtype(f"u{a.dtype.itemsize}"))
        return (a.astype(np_dtype(scalar_type(op.result.type))),)

    @impl(arith.TruncIOp)
    def run_trunci(self, interpreter: Interpreter, op: arith.TruncIOp, args: PythonValues):
        dt = np_dtype(scalar_type(op.result.type))
        a = np.asarray(args[0])
        if dt == np.bool_:
            return ((a & 1).astype(np.bool_),)
        return (a.astype(dt),)

    @impl(arith.BitcastOp)
    def run_bitcast(self, interpreter: Interpreter, op: arith.BitcastOp, args: PythonValues):
        a = np.ascontiguousarray(args[0])
        return (a.view(np_dtype(scalar_type(op.result.type))),)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


def _erf(x: np.ndarray) -> np.ndarray:
    import math as pymath

    return np.vectorize(pymath.erf, otypes=[x.dtype])(x)


@register_impls
class LockstepMathFunctions(InterpreterFunctions):
    """``math`` on per-lane numpy arrays (16-bit floats computed in f32)."""

    run_exp = impl(math.ExpOp)(_unary_float(np.exp))
    run_exp2 = impl(math.Exp2Op)(_unary_float(np.exp2))
    run_expm1 = impl(math.ExpM1Op)(_unary_float(np.expm1))
    run_log = impl(math.LogOp)(_unary_float(np.log))
    run_log2 = impl(math.Log2Op)(_unary_float(np.log2))
    run_log10 = impl(math.Log10Op)(_unary_float(np.log10))
    run_log1p = impl(math.Log1pOp)(_unary_float(np.log1p))
    run_sqrt = impl(math.SqrtOp)(_unary_float(np.sqrt))
    run_rsqrt = impl(math.RsqrtOp)(_unary_float(_rsqrt))
    run_tanh = impl(math.TanhOp)(_unary_float(np.tanh))
    run_sin = impl(math.SinOp)(_unary_float(np.sin))
    run_cos = impl(math.CosOp)(_unary_float(np.cos))
    run_tan = impl(math.TanOp)(_unary_float(np.tan))
    run_absf = impl(math.AbsFOp)(_unary_float(np.abs))
    run_floor = impl(math.FloorOp)(_unary_float(np.floor))
    run_ceil = impl(math.CeilOp)(_unary_float(np.ceil))
    run_trunc = impl(math.TruncOp)(_unary_float(np.trunc))
    run_erf = impl(math.ErfOp)(_unary_float(_erf))
    run_powf = impl(math.PowFOp)(_binary_float(np.power))
    run_copysign = impl(math.CopySignOp)(_binary_float(np.copysign))
    run_atan2 = impl(math.Atan2Op)(_binary_float(np.arctan2))

    @impl(math.AbsIOp)
    def run_absi(self, interpreter: Interpreter, op: math.AbsIOp, args: PythonValues):
        return (np.abs(np.asarray(args[0])),)

    @impl(math.FmaOp)
    def run_fma(self, interpreter: Interpreter, op: math.FmaOp, args: PythonValues):
        t = op.results[0].type
        a, b, c = (np.asarray(x).astype(np.float64) for x in args)
        return (_round(a * b + c, t),)


# --------------------------------------------------------------------------- vector / memref


@register_impls
class LockstepVectorFunctions(InterpreterFunctions):
    """The ``vector`` ops used to build and take apart fragments."""

    @impl(vector.BroadcastOp)
    def run_broadcast(self, interpreter: Interpreter, op: vector.BroadcastOp, args: PythonValues):
        t = op.vector.type
        assert isinstance(t, VectorType)
        w = t.get_shape()
        a = np.asarray(args[0], np_dtype(t.element_type))
        if isinstance(op.source.type, VectorType):
            return (np.broadcast_to(a, a.shape[:-1] + tuple(w)).copy(),)
        return (np.broadcast_to(a[..., None] if a.ndim else a, a.shape + tuple(w)).copy(),)

    @impl(vector.ExtractOp)
    def run_extract(self, interpreter: Interpreter, op: vector.ExtractOp, args: PythonValues):
        if op.dynamic_position:
            _fail(op, "dynamic positions are not supported")
        pos = op.static_position.get_values()
        v = np.asarray(args[0])
        vt = op.vector.type
        assert isinstance(vt, VectorType)
        rest = (slice(None),) * (vt.get_num_dims() - len(pos))
        return (v[(Ellipsis, *pos, *rest)],)

    @impl(vector.InsertOp)
    def run_insert(self, interpreter: Interpreter, op: vector.InsertOp, args: PythonValues):
        if op.dynamic_position:
            _fail(op, "dynamic positions are not supported")
        st = _state(interpreter)
        pos = op.static_position.get_values()
        src, dest = np.asarray(args[0]), np.asarray(args[1])
        vt = op.result.type
        assert isinstance(vt, VectorType)
        vshape = tuple(vt.get_shape())
        src_rank = len(vshape) - len(pos)
        per_lane = dest.ndim > len(vshape) or src.ndim > src_rank
        out = np.array(st.lanes(dest) if per_lane else dest, copy=True)
        out[(Ellipsis, *pos) + (slice(None),) * src_rank] = src
        return (out,)


@register_impls
class LockstepMemrefFunctions(InterpreterFunctions):
    """``memref.load`` / ``memref.store`` / ``memref.dim`` inside kernels (unmasked)."""

    @impl(memref.LoadOp)
    def run_load(self, interpreter: Interpreter, op: memref.LoadOp, args: PythonValues):
        st = _state(interpreter)
        ref, *idx = args
        arr, lidx, _ = _tile_or_lane_indices(st, op, ref, idx, st.mask)
        return (arr[lidx],)

    @impl(memref.StoreOp)
    def run_store(self, interpreter: Interpreter, op: memref.StoreOp, args: PythonValues):
        st = _state(interpreter)
        value, ref, *idx = args
        arr, lidx, _ = _tile_or_lane_indices(st, op, ref, idx, st.mask)
        _scatter(st, arr, lidx, value, st.mask)
        return ()

    @impl(memref.DimOp)
    def run_dim(self, interpreter: Interpreter, op: memref.DimOp, args: PythonValues):
        ref, k = args
        shape = ref.data.shape[1:] if isinstance(ref, SharedBuffer) else np.shape(ref)
        if not _uniform(k):
            _fail(op, "dimension index must be the same on every lane")
        return (np.int64(shape[int(k)]),)


KERNEL_FUNCTIONS: tuple[type[InterpreterFunctions], ...] = (
    TileFunctions,
    LockstepScfFunctions,
    LockstepArithFunctions,
    LockstepMathFunctions,
    LockstepVectorFunctions,
    LockstepMemrefFunctions,
)


