"""Numpy reference interpreter for Tile IR, on xDSL's interpreter framework.

A kernel runs over its whole grid in lockstep: every SSA value inside a kernel
is a numpy array with one entry per lane of the grid (shape ``(L,)`` for scalars,
``(L, W)`` for ``vector<W>`` values), or a numpy scalar / ``(W,)`` array when the
value is the same on every lane. Each op therefore executes once per launch.
Control flow whose condition differs between lanes runs under an active-lane
mask: only active lanes store, and region results are merged with ``np.where``.
``ttile.barrier`` is a no-op in lockstep (exact for race-free programs) but
checks that whole tiles reach it; shared memory is one numpy buffer per tile.

Entry points:

* :func:`run_kernel` runs one ``ttile.kernel`` on numpy arrays (in place).
* :func:`run_host` runs a host ``func.func`` (``memref.alloc``,
  ``memref.get_global``, ``ttile.launch``, host collectives such as
  ``ttile.all_reduce``, ``func.return``) on numpy inputs, as produced by
  ``lower-graph-to-tile``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.dialects import arith, func, math, memref, scf, vector
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
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
from xdsl.interpreters.func import FuncFunctions
from xdsl.ir import Attribute, Operation, Region
from xdsl.traits import SymbolTable
from xdsl.utils.exceptions import InterpretationError

from tessera.errors import RUNTIME_ERRORS, data_error
from tessera.ir import host_collectives as hc
from tessera.ir import tile as tt
from tessera.ir.tile import WARP_SIZE
from tessera.numerics.cast import cast_array

# --------------------------------------------------------------------------- types


def np_dtype(t: Attribute) -> np.dtype:
    """The numpy dtype holding values of IR scalar type ``t``."""
    if isinstance(t, IndexType):
        return np.dtype(np.int64)
    if isinstance(t, IntegerType):
        w = t.width.data
        if w == 1:
            return np.dtype(np.bool_)
        for bits, d in ((8, np.int8), (16, np.int16), (32, np.int32), (64, np.int64)):
            if w <= bits:
                return np.dtype(d)
    if isinstance(t, Float32Type):
        return np.dtype(np.float32)
    if isinstance(t, Float64Type):
        return np.dtype(np.float64)
    if isinstance(t, Float16Type):
        return np.dtype(np.float16)
    if isinstance(t, BFloat16Type):
        return np.dtype(ml_dtypes.bfloat16)
    from tessera.ir.dtypes import from_ir_type

    try:
        return from_ir_type(t).np_dtype
    except TypeError:
        raise InterpretationError(f"no numpy dtype for IR type {t}") from None


def scalar_type(t: Attribute) -> Attribute:
    return t.element_type if isinstance(t, VectorType | MemRefType) else t


def compute_dtype(t: Attribute) -> np.dtype:
    """The dtype arithmetic on ``t`` is done in: f32 for 16-bit and smaller floats."""
    d = np_dtype(scalar_type(t))
    if isinstance(scalar_type(t), AnyFloat) and d.itemsize < 4:
        return np.dtype(np.float32)
    return d


def _float(x: Any, t: Attribute) -> np.ndarray:
    return np.asarray(x).astype(compute_dtype(t), copy=False)


def _round(x: Any, t: Attribute) -> np.ndarray:
    return np.asarray(x).astype(np_dtype(scalar_type(t)))


# --------------------------------------------------------------------------- launch state


@dataclass
class SharedBuffer:
    """A shared-memory allocation: ``data[tile, ...]`` is tile ``tile``'s buffer."""

    data: np.ndarray
    swizzle: str | None = None


@dataclass
class LaunchState:
    """Lane coordinates of one launch and the stack of active-lane masks."""

    grid: tuple[int, int, int]
    group_size: int
    num_lanes: int = 0
    lane: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tile: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    masks: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.num_tiles = self.grid[0] * self.grid[1] * self.grid[2]
        self.num_lanes = self.num_tiles * self.group_size
        self.lane = np.arange(self.num_lanes, dtype=np.int64)
        self.tile = self.lane // self.group_size
        self.local = self.lane % self.group_size
        gx, gy, _ = self.grid
        self.tile_xyz = (self.tile % gx, (self.tile // gx) % gy, self.tile // (gx * gy))
        self.masks = [np.ones(self.num_lanes, np.bool_)]

    @property
    def mask(self) -> np.ndarray:
        return self.masks[-1]

    def lanes(self, x: Any) -> np.ndarray:
        """``x`` as one entry per lane (leading axis L)."""
        a = np.asarray(x)
        if a.ndim >= 1 and a.shape[0] == self.num_lanes:
            return a
        return np.broadcast_to(a, (self.num_lanes, *a.shape))

    def lanes_scalar(self, x: Any) -> np.ndarray:
        a = np.asarray(x)
        if a.ndim == 0:
            return np.broadcast_to(a, (self.num_lanes,))
        return a

    def where(self, m: np.ndarray, new: Any, old: Any) -> np.ndarray:
        n, o = np.asarray(new), np.asarray(old)
        nd = max(n.ndim, o.ndim)
        mm = m.reshape(m.shape + (1,) * max(0, nd - 1)) if nd >= 1 else m
        if n.ndim >= 1 and n.shape[0] != self.num_lanes:
            n = self.lanes(n)
        if o.ndim >= 1 and o.shape[0] != self.num_lanes:
            o = self.lanes(o)
        return np.where(mm, n, o)

    def where_lane(self, op: Operation, m: np.ndarray, lane: int) -> str:
        x, y, z = (int(c[lane]) for c in self.tile_xyz)
        return f"tile ({x}, {y}, {z}) lane {int(self.local[lane])}"


def _state(interpreter: Interpreter) -> LaunchState:
    st = interpreter.get_data(TileFunctions, "launch", lambda: None)
    if st is None:
        raise InterpretationError("Tile IR ops can only run inside a kernel launch")
    return st


def _fail(op: Operation, msg: str) -> None:
    raise InterpretationError(f"{op.name}: {msg}")


def _uniform(x: Any) -> bool:
    return np.ndim(x) == 0


def _run_masked(
    interpreter: Interpreter, region: Region, args: PythonValues, mask: np.ndarray, name: str
) -> PythonValues:
    st = _state(interpreter)
    st.masks.append(mask)
    try:
        return interpreter.run_ssacfg_region(region, args, name)
    finally:
        st.masks.pop()


# --------------------------------------------------------------------------- memory access


def _tile_or_lane_indices(
    st: LaunchState, op: Operation, ref: Any, idx: Sequence[Any], active: np.ndarray
) -> tuple[np.ndarray, tuple[np.ndarray, ...], tuple[int, ...]]:
    """Per-lane index tuple into the backing array, checked for active lanes."""
    if isinstance(ref, SharedBuffer):
        arr = ref.data
        shape = arr.shape[1:]
    elif isinstance(ref, np.ndarray):
        arr = ref
        shape = arr.shape
    else:
        raise InterpretationError(f"{op.name}: operand is not a buffer ({type(ref).__name__})")
    if len(idx) != len(shape):
        _fail(op, f"{len(idx)} indices for a buffer of rank {len(shape)}")
    lane_idx = []
    for k, (i, d) in enumerate(zip(idx, shape)):
        i = st.lanes_scalar(np.asarray(i, dtype=np.int64))
        bad = active & ((i < 0) | (i >= d))
        if bad.any():
            lane = int(np.argmax(bad))
            _fail(
                op,
                f"index {int(i[lane])} out of bounds for dimension {k} of size {d} "
                f"({st.where_lane(op, bad, lane)})",
            )
        lane_idx.append(np.where(active, i, 0))
    if isinstance(ref, SharedBuffer):
        return arr, (st.tile, *lane_idx), shape
    return arr, tuple(lane_idx), shape


def _scatter(
    st: LaunchState, arr: np.ndarray, lidx: tuple[np.ndarray, ...], value: Any, active: np.ndarray
) -> None:
    v = st.lanes_scalar(np.asarray(value, arr.dtype))
    if not lidx:
        if active.any():
            arr[()] = v[active][-1]
        return
    arr[tuple(i[active] for i in lidx)] = v[active]


def _flat_offset(idx: Sequence[np.ndarray], shape: Sequence[int]) -> np.ndarray:
    off = np.zeros_like(idx[0])
    for i, d in zip(idx, shape):
        off = off * d + i
    return off


def _check_aligned(
    st: LaunchState,
    op: Operation,
    idx: Sequence[np.ndarray],
    shape: Sequence[int],
    elems: int,
    active: np.ndarray,
) -> None:
    off = _flat_offset(idx, shape)
    bad = active & (off % elems != 0)
    if bad.any():
        lane = int(np.argmax(bad))
        _fail(
            op,
            f"access of {elems} elements at element offset {int(off[lane])} is not aligned "
            f"to its size ({st.where_lane(op, bad, lane)})",
        )


def _check_span(
    st: LaunchState, op: Operation, last: np.ndarray, n: np.ndarray | int, dim: int,
    active: np.ndarray,
) -> None:
    bad = active & (last + n > dim)
    if bad.any():
        lane = int(np.argmax(bad))
        _fail(
            op,
            f"access of elements {int(last[lane])}..{int(last[lane] + np.asarray(n).max()) - 1} "
            f"runs past the last dimension of size {dim} ({st.where_lane(op, bad, lane)})",
        )


# --------------------------------------------------------------------------- ttile ops


@register_impls
class TileFunctions(InterpreterFunctions):
    """Lockstep implementations of the ``ttile`` ops inside a kernel."""

    @impl_terminator(tt.ReturnOp)
    def run_return(
        self, interpreter: Interpreter, op: tt.ReturnOp, args: PythonValues
    ) -> tuple[TerminatorValue, PythonValues]:
        return ReturnedValues(()), ()

    @impl(tt.TileIdOp)
    def run_tile_id(self, interpreter: Interpreter, op: tt.TileIdOp, args: PythonValues):
        return (_state(interpreter).tile_xyz[op.dim_index()],)

    @impl(tt.NumTilesOp)
    def run_num_tiles(self, interpreter: Interpreter, op: tt.NumTilesOp, args: PythonValues):
        return (np.int64(_state(interpreter).grid[op.dim_index()]),)

    @impl(tt.LocalIdOp)
    def run_local_id(self, interpreter: Interpreter, op: tt.LocalIdOp, args: PythonValues):
        return (_state(interpreter).local,)

    @impl(tt.GroupSizeOp)
    def run_group_size(self, interpreter: Interpreter, op: tt.GroupSizeOp, args: PythonValues):
        return (np.int64(_state(interpreter).group_size),)

    @impl(tt.LinearIdOp)
    def run_linear_id(self, interpreter: Interpreter, op: tt.LinearIdOp, args: PythonValues):
        st = _state(interpreter)
        return (st.tile_xyz[0] * st.group_size + st.local,)

    @impl(tt.LaneIdOp)
    def run_lane_id(self, interpreter: Interpreter, op: tt.LaneIdOp, args: PythonValues):
        return (_state(interpreter).local % WARP_SIZE,)

    @impl(tt.WarpIdOp)
    def run_warp_id(self, interpreter: Interpreter, op: tt.WarpIdOp, args: PythonValues):
        return (_state(interpreter).local // WARP_SIZE,)

    @impl(tt.AllocSharedOp)
    def run_alloc_shared(
        self, interpreter: Interpreter, op: tt.AllocSharedOp, args: PythonValues
    ):
        st = _state(interpreter)
        t = op.result.type
        assert isinstance(t, MemRefType)
        dt = np_dtype(t.element_type)
        data = np.zeros((st.num_tiles, *t.get_shape()), dt)
        if dt.kind == "f":
            data[...] = np.nan  # undefined until stored
        return (SharedBuffer(data, op.swizzle.data if op.swizzle else None),)

    @impl(tt.LoadOp)
    def run_load(self, interpreter: Interpreter, op: tt.LoadOp, args: PythonValues):
        st = _state(interpreter)
        ref, *rest = args
        n = len(op.indices)
        idx = rest[:n]
        active = st.mask
        if op.mask is not None:
            active = active & st.lanes_scalar(rest[n])
        arr, lidx, _ = _tile_or_lane_indices(st, op, ref, idx, active)
        val = arr[lidx]
        other = rest[n + 1] if op.other is not None else np.zeros((), val.dtype)
        if op.mask is None and active is st.mask:
            return (val,)
        return (np.where(active, val, np.asarray(other, val.dtype)),)

    @impl(tt.StoreOp)
    def run_store(self, interpreter: Interpreter, op: tt.StoreOp, args: PythonValues):
        st = _state(interpreter)
        value, ref, *rest = args
        n = len(op.indices)
        active = st.mask
        if op.mask is not None:
            active = active & st.lanes_scalar(rest[n])
        arr, lidx, _ = _tile_or_lane_indices(st, op, ref, rest[:n], active)
        _scatter(st, arr, lidx, value, active)
        return ()

    @impl(tt.LoadVectorOp)
    def run_load_vector(
        self, interpreter: Interpreter, op: tt.LoadVectorOp, args: PythonValues
    ):
        st = _state(interpreter)
        ref, *rest = args
        n = len(op.indices)
        w = op.width
        active = st.mask
        if op.mask is not None:
            active = active & st.lanes_scalar(rest[n])
        arr, lidx, shape = _tile_or_lane_indices(st, op, ref, rest[:n], active)
        body = lidx[-len(shape):]
        _check_span(st, op, body[-1], w, shape[-1], active)
        _check_aligned(st, op, body, shape, w, active)
        cols = np.where(active[:, None], body[-1][:, None] + np.arange(w), 0)
        val = arr[tuple(i[:, None] for i in lidx[:-1]) + (cols,)]
        return (np.where(active[:, None], val, np.zeros((), val.dtype)),)

    @impl(tt.StoreVectorOp)
    def run_store_vector(
        self, interpreter: Interpreter, op: tt.StoreVectorOp, args: PythonValues
    ):
        st = _state(interpreter)
        value, ref, *rest = args
        n = len(op.indices)
        vt = op.value.type
        assert isinstance(vt, VectorType)
        w = vt.get_shape()[0]
        active = st.mask
        if op.mask is not None:
            active = active & st.lanes_scalar(rest[n])
        arr, lidx, shape = _tile_or_lane_indices(st, op, ref, rest[:n], active)
        body = lidx[-len(shape):]
        _check_span(st, op, body[-1], w, shape[-1], active)
        _check_aligned(st, op, body, shape, w, active)
        v = st.lanes(np.asarray(value, arr.dtype))
        for j in range(w):
            sel = tuple(i[active] for i in lidx[:-1]) + (lidx[-1][active] + j,)
            arr[sel] = v[active, j]
        return ()

    @impl(tt.CopyAsyncOp)
    def run_copy_async(self, interpreter: Interpreter, op: tt.CopyAsyncOp, args: PythonValues):
        st = _state(interpreter)
        nd, ns = len(op.dst_indices), len(op.src_indices)
        dst = args[0]
        didx = args[1 : 1 + nd]
        src = args[1 + nd]
        sidx = args[2 + nd : 2 + nd + ns]
        n = op.elems.value.data
        active = st.mask
        if op.valid is not None:
            valid = st.lanes_scalar(np.asarray(args[2 + nd + ns], np.int64))
            bad = active & ((valid < 0) | (valid > n))
            if bad.any():
                lane = int(np.argmax(bad))
                _fail(op, f"valid = {int(valid[lane])} outside [0, {n}] "
                      f"({st.where_lane(op, bad, lane)})")
        else:
            valid = np.full(st.num_lanes, n, np.int64)
        darr, dl, dshape = _tile_or_lane_indices(st, op, dst, didx, active)
        _check_span(st, op, dl[-1], n, dshape[-1], active)
        _check_aligned(st, op, dl[1:], dshape, n, active)
        reads = active & (valid > 0)
        sarr, sl, sshape = _tile_or_lane_indices(st, op, src, sidx, reads)
        _check_span(st, op, sl[-1], valid, sshape[-1], reads)
        _check_aligned(st, op, sl, sshape, n, reads)
        for j in range(n):
            rj = active & (valid > j)
            vals = np.zeros(st.num_lanes, darr.dtype)
            if rj.any():
                vals[rj] = sarr[tuple(i[rj] for i in sl[:-1]) + (sl[-1][rj] + j,)]
            darr[tuple(i[active] for i in dl[:-1]) + (dl[-1][active] + j,)] = vals[active]
        return ()

    @impl(tt.CommitGroupOp)
    def run_commit(self, interpreter: Interpreter, op: tt.CommitGroupOp, args: PythonValues):
        return ()

    @impl(tt.WaitGroupOp)
    def run_wait(self, interpreter: Interpreter, op: tt.WaitGroupOp, args: PythonValues):
        return ()

    @impl(tt.BarrierOp)
    def run_barrier(self, interpreter: Interpreter, op: tt.BarrierOp, args: PythonValues):
        _check_convergent(_state(interpreter), op, "group")
        return ()

    @impl(tt.ShuffleXorOp)
    def run_shuffle_xor(
        self, interpreter: Interpreter, op: tt.ShuffleXorOp, args: PythonValues
    ):
        st = _state(interpreter)
        _check_convergent(st, op, "warp")
        v = st.lanes_scalar(args[0])
        perm = st.lane ^ op.offset.value.data
        return (v[perm],)

    @impl(tt.ReduceOp)
    def run_reduce(self, interpreter: Interpreter, op: tt.ReduceOp, args: PythonValues):
        st = _state(interpreter)
        scope = op.scope.data
        _check_convergent(st, op, scope)
        t = op.value.type
        v = _float(st.lanes_scalar(args[0]), t) if isinstance(t, AnyFloat) else (
            st.lanes_scalar(args[0])
        )
        kind = op.kind.data
        comb: Callable[[np.ndarray, np.ndarray], np.ndarray] = {
            "sum": np.add, "max": np.maximum, "min": np.minimum
        }[kind]
        g = st.group_size
        per_tile = v.reshape(st.num_tiles, g)
        nw = -(-g // WARP_SIZE)
        pad = nw * WARP_SIZE - g
        if pad:
            ident = _identity(kind, v.dtype)
            per_tile = np.concatenate(
                [per_tile, np.full((st.num_tiles, pad), ident, v.dtype)], axis=1
            )
        warps = per_tile.reshape(st.num_tiles, nw, WARP_SIZE)
        lane = np.arange(WARP_SIZE)
        off = WARP_SIZE // 2
        while off:
            warps = comb(warps, warps[..., lane ^ off])
            off //= 2
        if scope == "warp":
            out = warps.reshape(st.num_tiles, nw * WARP_SIZE)[:, :g]
        else:
            acc = warps[:, 0, 0]
            for k in range(1, nw):
                acc = comb(acc, warps[:, k, 0])
            out = np.broadcast_to(acc[:, None], (st.num_tiles, g))
        return (_round(out.reshape(st.num_lanes), t),)

    @impl(tt.MmaOp)
    def run_mma(self, interpreter: Interpreter, op: tt.MmaOp, args: PythonValues):
        st = _state(interpreter)
        _check_convergent(st, op, "warp")
        k = op.k
        na, nb = k // 2, k // 4
        a = st.lanes(np.asarray(args[0])).astype(np.float64)
        b = st.lanes(np.asarray(args[1])).astype(np.float64)
        c = st.lanes(np.asarray(args[2])).astype(np.float64)
        nw = st.num_lanes // WARP_SIZE
        a = a.reshape(nw, WARP_SIZE, na)
        b = b.reshape(nw, WARP_SIZE, nb)
        c = c.reshape(nw, WARP_SIZE, 4)
        ar, ac, br, bc, cr, cc = _mma_maps(k)
        A = np.zeros((nw, 16, k))
        B = np.zeros((nw, k, 8))
        C = np.zeros((nw, 16, 8))
        A[:, ar, ac] = a
        B[:, br, bc] = b
        C[:, cr, cc] = c
        D = (A @ B + C).astype(np.float32)
        return (D[:, cr, cc].reshape(st.num_lanes, 4),)


_MMA_MAPS: dict[int, tuple[np.ndarray, ...]] = {}


def _mma_maps(k: int) -> tuple[np.ndarray, ...]:
    """Fragment coordinates of the m16n8k``k`` mma: (A rows, A cols, B rows, B cols, C rows, C cols)."""
    if k not in _MMA_MAPS:
        lanes = range(WARP_SIZE)
        a = np.array([[tt.mma_a_coords(ln, i, k) for i in range(k // 2)] for ln in lanes])
        b = np.array([[tt.mma_b_coords(ln, i, k) for i in range(k // 4)] for ln in lanes])
        c = np.array([[tt.mma_c_coords(ln, i) for i in range(4)] for ln in lanes])
        _MMA_MAPS[k] = (a[..., 0], a[..., 1], b[..., 0], b[..., 1], c[..., 0], c[..., 1])
    return _MMA_MAPS[k]


def _identity(kind: str, dt: np.dtype) -> Any:
    if kind == "sum":
        return dt.type(0)
    if dt.kind == "f":
        return dt.type(-np.inf if kind == "max" else np.inf)
    info = np.iinfo(dt)
    return info.min if kind == "max" else info.max


def _check_convergent(st: LaunchState, op: Operation, scope: str) -> None:
    if scope == "warp":
        if st.group_size % WARP_SIZE:
            _fail(op, f"warp-level op needs group_size a multiple of 32, got {st.group_size}")
        m = st.mask.reshape(-1, WARP_SIZE)
        what = "warp"
    else:
        m = st.mask.reshape(st.num_tiles, st.group_size)
        what = "tile"
    partial = m.any(axis=1) & ~m.all(axis=1)
    if partial.any():
        k = int(np.argmax(partial))
        lane = k * m.shape[1] + int(np.argmin(m[k]))
        _fail(
            op,
            f"reached by only part of a {what} (divergent control flow; "
            f"{st.where_lane(op, st.mask, lane)} is inactive)",
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


# --------------------------------------------------------------------------- entry points


def _find_kernel(module: ModuleOp, name: str) -> tt.KernelOp:
    op = SymbolTable.lookup_symbol(module, name)
    if not isinstance(op, tt.KernelOp):
        kernels = [k.sym_name.data for k in module.walk() if isinstance(k, tt.KernelOp)]
        raise KeyError(f"no ttile.kernel @{name} in the module (kernels: {', '.join(kernels)})")
    return op


def _check_arg(kernel: tt.KernelOp, k: int, t: Attribute, a: Any) -> Any:
    where = f"ttile.kernel @{kernel.sym_name.data}: argument {k}"
    if isinstance(t, MemRefType):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{where} expects a numpy array for {t}, got {type(a).__name__}")
        want = np_dtype(t.element_type)
        if a.dtype != want:
            raise TypeError(f"{where}: array has dtype {a.dtype}, expected {want} for {t}")
        shape = t.get_shape()
        if len(shape) != a.ndim or any(d >= 0 and d != s for d, s in zip(shape, a.shape)):
            raise TypeError(f"{where}: array has shape {list(a.shape)}, expected {t}")
        if not a.flags.c_contiguous:
            raise TypeError(f"{where}: array must be C-contiguous")
        return a
    return np_dtype(t).type(a)


def run_kernel(
    module: ModuleOp,
    kernel_name: str,
    args: Sequence[Any],
    grid: Sequence[int] | None = None,
) -> None:
    """Run ``ttile.kernel @kernel_name`` over ``grid`` (default: the kernel's ``grid``).

    Memref arguments are numpy arrays of the memref's dtype, modified in place;
    scalar arguments are Python or numpy numbers.
    """
    kernel = _find_kernel(module, kernel_name)
    _launch(module, kernel, list(args), grid)


def _launch(
    module: ModuleOp, kernel: tt.KernelOp, args: list[Any], grid: Sequence[int] | None
) -> None:
    if grid is None:
        grid = kernel.grid_value()
        if grid is None:
            raise ValueError(
                f"ttile.kernel @{kernel.sym_name.data} has no default grid; pass grid="
            )
    g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
    if len(g) != 3 or min(g) < 1:
        raise ValueError(f"grid must be 1 to 3 sizes >= 1, got {list(grid)}")
    ins = kernel.function_type.inputs.data
    if len(args) != len(ins):
        raise TypeError(
            f"ttile.kernel @{kernel.sym_name.data} takes {len(ins)} arguments, got {len(args)}"
        )
    vals = tuple(_check_arg(kernel, k, t, a) for k, (t, a) in enumerate(zip(ins, args)))
    interp = Interpreter(module)
    for f in KERNEL_FUNCTIONS:
        interp.register_implementations(f())
    interp.set_data(
        TileFunctions, "launch", LaunchState((g[0], g[1], g[2]), kernel.group_size_value())
    )
    name = f"ttile.kernel @{kernel.sym_name.data}"
    with np.errstate(all="ignore"):
        try:
            interp.run_ssacfg_region(kernel.body, vals, name)
        except (InterpretationError, *RUNTIME_ERRORS) as e:
            raise data_error(e, name) from None


# --------------------------------------------------------------------------- host


def _alloc(t: MemRefType, dyn: Sequence[int] = ()) -> np.ndarray:
    dims = iter(dyn)
    shape = [d if d >= 0 else int(next(dims)) for d in t.get_shape()]
    dt = np_dtype(t.element_type)
    a = np.zeros(shape, dt)
    if dt.kind == "f":
        a[...] = np.nan  # fresh buffers are undefined; NaN exposes unwritten outputs
    return a


@register_impls
class HostFunctions(InterpreterFunctions):
    """Host-side ops of lowered programs: buffers, constants, launches."""

    @impl(memref.AllocOp)
    def run_alloc(self, interpreter: Interpreter, op: memref.AllocOp, args: PythonValues):
        t = op.memref.type
        assert isinstance(t, MemRefType)
        return (_alloc(t, [int(a) for a in args]),)

    @impl(memref.DeallocOp)
    def run_dealloc(self, interpreter: Interpreter, op: memref.DeallocOp, args: PythonValues):
        return ()

    @impl(memref.GetGlobalOp)
    def run_get_global(
        self, interpreter: Interpreter, op: memref.GetGlobalOp, args: PythonValues
    ):
        g = SymbolTable.lookup_symbol(op, op.name_)
        if not isinstance(g, memref.GlobalOp):
            _fail(op, f"{op.name_} is not a memref.global")
        assert isinstance(g, memref.GlobalOp)
        t = g.type
        init = g.initial_value
        if not isinstance(init, DenseIntOrFPElementsAttr):
            _fail(op, f"memref.global {op.name_} has no initial value")
        assert isinstance(init, DenseIntOrFPElementsAttr)
        vals = np.asarray(init.get_values(), np_dtype(t.element_type))
        return (np.broadcast_to(vals.reshape(tuple(init.get_shape())), t.get_shape()).copy(),)

    @impl(arith.ConstantOp)
    def run_constant(self, interpreter: Interpreter, op: arith.ConstantOp, args: PythonValues):
        return (_constant_value(op),)

    @impl(tt.LaunchOp)
    def run_launch(self, interpreter: Interpreter, op: tt.LaunchOp, args: PythonValues):
        kernel = SymbolTable.lookup_symbol(op, op.callee)
        if not isinstance(kernel, tt.KernelOp):
            _fail(op, f"{op.callee} is not a ttile.kernel")
        assert isinstance(kernel, tt.KernelOp)
        _launch(interpreter.module, kernel, list(args), op.grid_value())
        return ()


@register_impls
class HostCollectiveFunctions(InterpreterFunctions):
    """Host collectives of lowered per-rank programs (``ttile.all_reduce`` ...), run by
    :func:`tessera.runtime.host_collectives.run_host_collective` on ``mesh`` (None: the
    mesh entered with ``with mesh:``, else the host function's ``tessera.mesh``)."""

    def __init__(self, mesh: Any = None):
        self.mesh = mesh

    def _run(self, op: Operation, args: PythonValues) -> PythonValues:
        from tessera.runtime.host_collectives import run_host_collective

        assert isinstance(op, hc.HostCollectiveOp)
        return run_host_collective(op, args, self.mesh)

    @impl(tt.AllReduceOp)
    def run_all_reduce(self, interpreter: Interpreter, op: tt.AllReduceOp, args: PythonValues):
        return self._run(op, args)

    @impl(tt.AllGatherOp)
    def run_all_gather(self, interpreter: Interpreter, op: tt.AllGatherOp, args: PythonValues):
        return self._run(op, args)

    @impl(tt.ReduceScatterOp)
    def run_reduce_scatter(
        self, interpreter: Interpreter, op: tt.ReduceScatterOp, args: PythonValues
    ):
        return self._run(op, args)

    @impl(tt.AllToAllOp)
    def run_all_to_all(self, interpreter: Interpreter, op: tt.AllToAllOp, args: PythonValues):
        return self._run(op, args)

    @impl(tt.SendOp)
    def run_send(self, interpreter: Interpreter, op: tt.SendOp, args: PythonValues):
        return self._run(op, args)

    @impl(tt.RecvOp)
    def run_recv(self, interpreter: Interpreter, op: tt.RecvOp, args: PythonValues):
        return self._run(op, args)

    @impl(tt.MeshCoordOp)
    def run_mesh_coord(self, interpreter: Interpreter, op: tt.MeshCoordOp, args: PythonValues):
        return self._run(op, args)


def run_host(
    module: ModuleOp, name: str, args: Sequence[Any], mesh: Any = None
) -> list[np.ndarray]:
    """Run host ``func.func @name`` on numpy inputs; returns its results as numpy arrays.

    Inputs are converted to the argument memrefs' dtypes (copied, never modified).
    Host collectives run on ``mesh`` (a :class:`tessera.dist.Mesh`; by default the one
    entered with ``with mesh:``, else the function's ``tessera.mesh``) over
    torch.distributed, so every rank of the mesh runs the function.
    """
    fn = SymbolTable.lookup_symbol(module, name)
    if not isinstance(fn, func.FuncOp):
        raise KeyError(f"no func.func @{name} in the module")
    ins = fn.function_type.inputs.data
    if len(args) != len(ins):
        raise TypeError(f"func.func @{name} takes {len(ins)} arguments, got {len(args)}")
    vals: list[Any] = []
    for k, (t, a) in enumerate(zip(ins, args)):
        if isinstance(t, MemRefType):
            arr = np.array(a, dtype=np_dtype(t.element_type), copy=True, order="C")
            shape = t.get_shape()
            if arr.ndim != len(shape) or any(
                d >= 0 and d != s for d, s in zip(shape, arr.shape)
            ):
                raise TypeError(
                    f"func.func @{name}: argument {k} has shape {list(arr.shape)}, expected {t}"
                )
            vals.append(arr)
        else:
            vals.append(np_dtype(t).type(a))
    interp = Interpreter(module)
    interp.register_implementations(FuncFunctions())
    interp.register_implementations(HostFunctions())
    interp.register_implementations(HostCollectiveFunctions(mesh))
    with np.errstate(all="ignore"):
        try:
            out = interp.call_op(fn, tuple(vals))
        except (InterpretationError, *RUNTIME_ERRORS) as e:
            raise data_error(e, f"func.func @{name}") from None
    return [np.asarray(o) for o in out]
