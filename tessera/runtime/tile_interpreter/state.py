"""Tile IR interpreter state: numpy dtypes of IR types, the launch state (lanes, masks,
shared memory) and the memory accesses every op shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    MemRefType,
    VectorType,
)
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    PythonValues,
)
from xdsl.ir import Attribute, Operation, Region
from xdsl.utils.exceptions import InterpretationError

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


class LaunchData(InterpreterFunctions):
    """The key of a launch's :class:`LaunchState` on the interpreter (``Interpreter``
    keeps per-run data by a functions class); it implements no op."""


def _state(interpreter: Interpreter) -> LaunchState:
    st = interpreter.get_data(LaunchData, "launch", lambda: None)
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


