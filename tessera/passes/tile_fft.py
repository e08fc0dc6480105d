"""Tile IR lowering of ``tgraph.fft`` and ``tgraph.fft2d``.

**Complex tensors.** Below Graph IR a ``tensor<... x complex<fT>>`` is stored as a
``memref<... x 2 x fT>``: interleaved (real, imaginary) pairs, which is the memory
layout of numpy's ``complex64`` / ``complex128`` and of torch's ``torch.complex64`` /
``torch.complex128`` (``torch.view_as_real``). Kernels read and write the pairs as
2-element vectors; the host side views such buffers as complex (the CUDA runtime
with ``torch.view_as_complex``, tests with ``numpy.ndarray.view``).

**Transforms along an axis.** The data is seen as ``[outer, n, batch]`` and
:func:`tessera.passes.fft_plan.plan_axis` picks the kernels
(:mod:`tessera.passes.tile_fft_kernel` builds each):

* ``n`` whose prime factors are all at most 13 and whose points fit a tile's shared
  memory (32 KiB: ``n <= 4096`` f32, ``n <= 2048`` f64): one kernel, a mixed-radix
  Stockham transform (radix 8, then 4 / 2, and 3, 5, 7, 11, 13), each butterfly a DFT
  in one lane's registers, one pass through shared memory per stage (in place, two
  barriers), several lines per tile when ``n`` is short (up to 256 lanes);
* such ``n`` too long for a tile: a four-step transform ``n = n1 n2`` (two kernels
  through a temporary, every access in whole segments);
* ``n`` with a larger prime factor: Bluestein's chirp-z transform through power-of-two
  transforms of ``m >= 2n - 1`` points (one kernel when ``m`` fits, else seven).

Every line of a pass is read and written in the order that keeps consecutive lanes on
consecutive addresses: points along the last axis, adjacent lines (columns) along
another axis. ``tgraph.fft2d`` is a transform along the last axis into a temporary,
then one along the axis before it, each column pass reading a tile of adjacent
columns. ``inverse`` conjugates the twiddles and scales by ``1/n`` (numpy's ``ifft``);
a real input gets a zero imaginary part. Twiddles and Bluestein's chirps are constant
``memref.global`` tables computed on the host in float64 and rounded once to the
element type. Every value is produced by one lane in a fixed order: deterministic.
Lengths that need more than two levels (a four-step split beyond ``4096**2`` points for
f32, ``2048**2`` for f64) raise ``NotImplementedError``.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

import numpy as np
from xdsl.dialects import memref
from xdsl.dialects.builtin import (
    ComplexType,
    DenseIntOrFPElementsAttr,
    Float32Type,
    Float64Type,
    MemRefType,
    StringAttr,
    TensorType,
    UnitAttr,
)
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.passes.fft_plan import SHARED_BYTES_LIMIT, AxisPlan, line_count, plan_axis
from tessera.passes.tile_builder import KernelEmitter, not_lowered
from tessera.passes.tile_datamove import reshape_view
from tessera.passes.tile_fft_kernel import PassKernel, pass_tables

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

__all__ = ["SHARED_BYTES_LIMIT", "complex_memref", "lower_fft"]


def complex_memref(t: TensorType) -> MemRefType:
    """``tensor<S x complex<fT>>`` -> ``memref<S x 2 x fT>`` (interleaved real, imaginary)."""
    el = t.element_type
    assert isinstance(el, ComplexType)
    return MemRefType(el.element_type, [*t.get_shape(), 2])


class _Tables:
    """The constant tables of one lowered function, one ``memref.global`` per distinct
    table (by key and element type)."""

    def __init__(self, lw: _FunctionLowering):
        self.lw = lw
        self.made: dict[tuple, SSAValue] = {}

    def get(self, key: tuple, vals: np.ndarray, et: Attribute) -> SSAValue:
        full = (key, str(et))
        if full in self.made:
            return self.made[full]
        lw = self.lw
        n = len(vals)
        k = lw.counter.get("cst", 0)
        lw.counter["cst"] = k + 1
        sym = f"{lw.prefix}_cst_{k}"
        mt = MemRefType(et, [n, 2])
        flat = np.stack([vals.real, vals.imag], axis=-1).ravel().tolist()
        data = DenseIntOrFPElementsAttr.from_list(TensorType(et, [n, 2]), flat)
        gl = memref.GlobalOp.get(StringAttr(sym), mt, data, constant=UnitAttr())
        lw.module.body.block.insert_op_before(gl, lw.fn)
        v = lw.host_op(memref.GetGlobalOp(sym, mt))
        self.made[full] = v
        return v


def _flat(lw: _FunctionLowering, buf: SSAValue, is_complex: bool) -> SSAValue:
    """``buf`` viewed as ``[elements, 2]`` (complex) or ``[elements]`` (real)."""
    t = buf.type
    assert isinstance(t, MemRefType)
    shape = list(t.get_shape())
    if is_complex:
        return reshape_view(lw, buf, MemRefType(t.element_type, [prod(shape[:-1]), 2]))
    return reshape_view(lw, buf, MemRefType(t.element_type, [prod(shape)]))


def _run_plan(lw: _FunctionLowering, op: g.FFTOp | g.FFT2dOp, plan: AxisPlan,
              x: SSAValue, y: SSAValue, complex_in: bool, et: Attribute,
              tables: _Tables) -> None:
    """Launch the kernels of ``plan`` from flat buffer ``x`` into flat buffer ``y``."""
    bufs = {"in": x, "out": y}
    if plan.temp_points:
        for name in ("t0", "t1"):
            if any(name in (p.src, p.dst) for p in plan.passes):
                bufs[name] = lw.host_op(memref.AllocOp([], [], MemRefType(
                    et, [plan.temp_points, 2])))
    tag = op.name.split(".")[1]
    for p in plan.passes:
        src_complex = complex_in or p.src != "in"
        tabs = [tables.get(key, vals, et) for key, vals in pass_tables(p)]
        grid = -(-p.lines // p.per_tile)

        def build(e: KernelEmitter, args: list[SSAValue], p=p, src_complex=src_complex
                  ) -> None:
            PassKernel(e, p, et, src_complex, args).build()

        lw.kernel(tag, [bufs[p.dst], bufs[p.src], *tabs], p.group(), [grid, 1, 1], build)


def _axis(lw: _FunctionLowering, op: g.FFTOp | g.FFT2dOp, x: SSAValue, y: SSAValue,
          axis: int, complex_in: bool, tables: _Tables) -> None:
    shape = g.shape_of(op.result)
    rt = op.result.type
    assert isinstance(rt, TensorType) and isinstance(rt.element_type, ComplexType)
    et = rt.element_type.element_type
    n = shape[axis]
    outer, batch = line_count(list(shape), axis)
    if outer * batch == 0 or n == 0:
        return
    inverse = op.inverse is not None
    ebytes = 8 if isinstance(et, Float64Type) else 4
    try:
        plan = plan_axis(n, outer, batch, 1 if inverse else -1,
                         1.0 / n if inverse and n > 1 else None, ebytes)
    except ValueError as err:
        raise not_lowered(op, f"length {n} along axis {axis}: {err}") from None
    _run_plan(lw, op, plan, x, y, complex_in, et, tables)


def lower_fft(lw: _FunctionLowering, op: g.FFTOp | g.FFT2dOp) -> None:
    """``tgraph.fft`` (last axis) and ``tgraph.fft2d`` (last two axes), forward or
    inverse, of f32 / f64 / complex input; see the module docstring."""
    shape = g.shape_of(op.result)
    el = g.elem_of(op.result)
    assert isinstance(el, ComplexType)
    if not isinstance(el.element_type, Float32Type | Float64Type):
        raise not_lowered(op, f"element type {el}")
    complex_in = isinstance(g.elem_of(op.input), ComplexType)
    out = lw.alloc(op.result.type)
    x = _flat(lw, lw.mem(op.input), complex_in)
    y = _flat(lw, out, True)
    tables = _Tables(lw)
    r = len(shape)
    if isinstance(op, g.FFT2dOp):
        tmp = _flat(lw, lw.alloc(op.result.type), True)
        _axis(lw, op, x, tmp, r - 1, complex_in, tables)
        _axis(lw, op, tmp, y, r - 2, True, tables)
    else:
        _axis(lw, op, x, y, r - 1, complex_in, tables)
    lw.env[op.result] = out
