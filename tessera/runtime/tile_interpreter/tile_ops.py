"""Lockstep implementations of the ``ttile`` ops (ids, loads and stores, shared memory,
barriers, reductions, shuffles, ``mma``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects.builtin import (
    AnyFloat,
    MemRefType,
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

from tessera.ir import tile as tt
from tessera.ir.tile import WARP_SIZE
from tessera.runtime.tile_interpreter.state import (
    LaunchState,
    SharedBuffer,
    _check_aligned,
    _check_span,
    _fail,
    _float,
    _round,
    _scatter,
    _state,
    _tile_or_lane_indices,
    np_dtype,
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
        na, nb = {tt.MMA_K_TF32: (4, 2)}.get(k, (k // 2, k // 4))
        a = st.lanes(np.asarray(args[0]))
        b = st.lanes(np.asarray(args[1]))
        if k == tt.MMA_K_TF32:  # the tensor cores read tf32: the low 13 mantissa bits go
            a, b = _tf32(a), _tf32(b)
        a, b = a.astype(np.float64), b.astype(np.float64)
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


def _tf32(x: np.ndarray) -> np.ndarray:
    """f32 values with the low 13 bits of the mantissa cleared (as tf32 reads them)."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return bits.view(np.float32)


_MMA_MAPS: dict[int, tuple[np.ndarray, ...]] = {}


def _mma_maps(k: int) -> tuple[np.ndarray, ...]:
    """Fragment coordinates of the m16n8k``k`` mma: (A rows, A cols, B rows, B cols, C rows, C cols)."""
    if k not in _MMA_MAPS:
        lanes = range(WARP_SIZE)
        na, nb = {tt.MMA_K_TF32: (4, 2)}.get(k, (k // 2, k // 4))
        a = np.array([[tt.mma_a_coords(ln, i, k) for i in range(na)] for ln in lanes])
        b = np.array([[tt.mma_b_coords(ln, i, k) for i in range(nb)] for ln in lanes])
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


