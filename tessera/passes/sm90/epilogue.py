"""The fused epilogue of the sm90 GEMM: bias add and activation on the accumulators.

A ``tgraph.matmul_epilogue`` computes ``cast(act(matmul(lhs, rhs) + bias))`` with every
step rounded to the product type, as the unfused ops would (see
:func:`tessera.passes.lower_graph_to_tile.matmul_epilogue`). :class:`Sm90Epilogue` is the
part of that the Hopper kernel applies in registers, between the last wgmma and the
store, for each pair of accumulators ``(row, col)``, ``(row, col + 1)`` a thread holds:

* ``v = round(acc)`` to the product type (a no-op for f32 products);
* ``v = round(v + bias[...])`` where the bias is a row vector (``[N]``, broadcast over
  the rows) or a full ``[M, N]`` tensor (a residual), read from global memory with
  predicated loads at ragged edges (a bf16/f16 bias of an f32 product is widened as it
  is read: ``Sm90Epilogue.bias_type``);
* ``v = round(act(v))`` for ``relu`` (``x < 0 ? 0 : x``), ``silu`` and ``gelu``
  (tanh form), with the same instruction sequences as ``lower-tile-to-target``'s
  lowering of those ops in f32;
* ``v = round(v + residual[row, col])`` with a full ``[M, N]`` residual (the skip
  connection added after a linear layer that has a bias of its own);
* the store converts ``v`` to the result type.

Other bias broadcasts (a column ``[M, 1]``, partial batch broadcasts) are not taken:
:meth:`Sm90Epilogue.of` says why, and the matmul keeps the split lowering (product on
wgmma, then one elementwise kernel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type
from xdsl.ir import SSAValue

from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.passes.sm90.asm import TargetAsm
from tessera.passes.sm90.builders import global_pointer

LOG2E = 1.4426950408889634
ACTIVATIONS = ("relu", "gelu", "silu")
_ELEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4}
"""Bytes of an element of each product type the epilogue takes."""
_TYPE_NAMES = {BFloat16Type: "bf16", Float16Type: "f16", Float32Type: "f32"}


@dataclass(frozen=True)
class Sm90Epilogue:
    """What the kernel applies to each accumulator before its store."""

    prod_type: str
    """``bf16``, ``f16`` or ``f32``: the product's type; every step rounds to it."""
    bias: str | None = None
    """``"row"`` (``[N]`` broadcast over the rows), ``"full"`` (``[M, N]``) or None."""
    act: str | None = None
    """``"relu"``, ``"gelu"``, ``"silu"`` or None."""
    residual: bool = False
    """Whether a full ``[M, N]`` residual is added after the activation."""
    bias_type: str | None = None
    """The bias's element type when it is narrower than an f32 product (a bf16/f16 bias
    widened exactly as it is read, cuBLASLt's bias of the output type); None: the
    product's type."""

    def __post_init__(self) -> None:
        if self.prod_type not in _ELEM_BYTES:
            raise ValueError(f"sm90 epilogue: product type {self.prod_type!r}")
        if self.bias_type is not None and (
            self.bias_type not in _ELEM_BYTES or self.prod_type != "f32"
        ):
            raise ValueError(f"sm90 epilogue: a {self.bias_type} bias of a "
                             f"{self.prod_type} product")
        if self.bias not in (None, "row", "full"):
            raise ValueError(f"sm90 epilogue: bias kind {self.bias!r}")
        if self.act is not None and self.act not in ACTIVATIONS:
            raise ValueError(f"sm90 epilogue: activation {self.act!r}")

    @property
    def pointers(self) -> int:
        """Global pointers the kernel takes for this epilogue (bias, then residual)."""
        return int(self.bias is not None) + int(self.residual)

    @property
    def bias_elem(self) -> str:
        """The bias's element type."""
        return self.bias_type or self.prod_type

    @property
    def bias_bytes(self) -> int:
        """Bytes of one bias element."""
        return _ELEM_BYTES[self.bias_elem]

    @property
    def elem_bytes(self) -> int:
        """Bytes of one element of the product's type (a residual's)."""
        return _ELEM_BYTES[self.prod_type]

    @staticmethod
    def of(op: g.MatmulEpilogueOp, prod_type: str) -> Sm90Epilogue | str:
        """The epilogue of ``op``, or why the kernel cannot apply it in registers."""
        bias = None
        if op.bias is not None:
            bsh, osh = g.shape_of(op.bias), g.shape_of(op.result)
            n = osh[-1]
            if tuple(bsh) == tuple(osh):
                bias = "full"
            elif bsh and bsh[-1] == n and math.prod(bsh) == n:
                bias = "row"
            else:
                return f"bias of shape {list(bsh)} is neither [N] nor the result's shape"
        act = op.activation.data if op.activation is not None else None
        bias_type = None
        if op.bias is not None and g.elem_of(op.bias) != g.elem_of(op.product_type):
            bias_type = _TYPE_NAMES.get(type(g.elem_of(op.bias)))
            if bias_type is None:
                return f"bias of element type {g.elem_of(op.bias)}"
        return Sm90Epilogue(prod_type, bias, act, op.residual is not None, bias_type)


class EpilogueEmitter:
    """Emits :class:`Sm90Epilogue` for one consumer warpgroup's fragment of a tile.

    ``row0`` / ``col0`` are the thread's first row and column in the output (the wgmma D
    fragment: rows ``row0 + 8h``, columns ``col0 + 8j`` and ``+ 1``); call :meth:`tile` once
    per tile, then :meth:`pair` for each accumulator pair in ``j``-major order.
    """

    def __init__(
        self, e: TargetAsm, ep: Sm90Epilogue, m: int, n: int, params: list[SSAValue],
        ragged_m: bool, ragged_n: bool,
    ) -> None:
        """``params``: the kernel's epilogue pointer parameters (``ep.pointers`` of them:
        the bias, then the residual)."""
        self.e, self.ep, self.m, self.n = e, ep, m, n
        self.ragged_m, self.ragged_n = ragged_m, ragged_n
        assert len(params) == ep.pointers, (len(params), ep.pointers)
        it = iter(params)
        self.base = global_pointer(e, next(it)) if ep.bias is not None else None
        self.res_base = global_pointer(e, next(it)) if ep.residual else None
        self._row_bias: dict[int, tuple[SSAValue, SSAValue]] = {}

    def tile(self, row0: SSAValue, col0: SSAValue) -> None:
        """Per-tile setup: the thread's bias and residual pointers."""
        e, ep = self.e, self.ep
        self._row_bias = {}
        self.row0, self.col0 = row0, col0
        lin = None
        if ep.bias == "full" or ep.residual:
            lin = e.reg("b64")  # the element index of (row0, col0) in [M, N]
            e.add(tt.MulOp("wide.u32", lin, row0, e.imm(self.n)))
            c64 = e.reg("b64")
            e.add(tt.CvtOp("u64.u32", c64, [col0]))
            e.add(tt.AddOp("u64", lin, lin, c64))

        def full(nbytes: int) -> SSAValue:
            assert lin is not None
            off = e.reg("b64")
            e.add(tt.MulOp("lo.u64", off, lin, e.imm(nbytes)))
            return off

        if self.base is not None:
            if ep.bias == "row":
                off = e.reg("b64")
                e.add(tt.MulOp("wide.u32", off, col0, e.imm(ep.bias_bytes)))
            else:
                off = full(ep.bias_bytes)
            self.ptr = e.reg("b64")
            e.add(tt.AddOp("u64", self.ptr, self.base, off))
        if self.res_base is not None:
            self.res_ptr = e.reg("b64")
            e.add(tt.AddOp("u64", self.res_ptr, self.res_base, full(ep.elem_bytes)))

    def _guard(
        self, j: int, h: int, second: bool = False, full: bool | None = None,
    ) -> SSAValue | None:
        """Whether the bias (``full``: an ``[M, N]`` addend's) element at
        ``(row0 + 8h, col0 + 8j (+ 1 if second))`` exists."""
        e = self.e
        if full is None:
            full = self.ep.bias == "full"
        row = e.setp("lt", e.add32(self.row0, 8 * h), self.m) if (
            self.ragged_m and full) else None
        col = e.setp("lt", e.add32(self.col0, 8 * j + int(second)), self.n) if (
            self.ragged_n) else None
        if row is None or col is None:
            return row if col is None else col
        p = e.reg("pred")
        e.add(tt.AndOp("pred", p, row, col))
        return p

    def _load_pair(
        self, ptr: SSAValue, ty: str, offset: int, guard: SSAValue | None,
        guard_hi: SSAValue | None = None,
    ) -> tuple[SSAValue, SSAValue]:
        """Two consecutive ``ty`` elements at byte ``offset`` from ``ptr`` (the thread's
        bias or residual pointer), as f32 (with N odd, two element loads: ``hi`` under
        ``guard_hi``, 0 where masked)."""
        e = self.e
        lo, hi = e.reg("f32"), e.reg("f32")
        if self.n % 2:  # rows of odd length: a pair is only element-aligned
            for i, (v, gd) in enumerate(((lo, guard), (hi, guard_hi))):
                e.add(tt.MovOp("f32", v, e.fimm(0.0)))
                off = offset + i * _ELEM_BYTES[ty]
                if ty == "f32":
                    e.add(tt.LdOp("global.f32", [v], ptr, off, gd))
                    continue
                h = e.reg("b16")
                e.mov("b16", h, 0)
                e.add(tt.LdOp("global.b16", [h], ptr, off, gd))
                e.add(tt.CvtOp(f"f32.{ty}", v, [h]))
            return lo, hi
        if ty == "f32":
            e.add(tt.LdOp("global.v2.f32", [lo, hi], ptr, offset, guard))
            return lo, hi
        packed, h0, h1 = e.reg("b32"), e.reg("b16"), e.reg("b16")
        e.mov("b32", packed, 0)  # defined on masked lanes too
        e.add(tt.LdOp("global.b32", [packed], ptr, offset, guard))
        e.add(tt.UnpackOp("b32", [h0, h1], packed))
        e.add(tt.CvtOp(f"f32.{ty}", lo, [h0]))
        e.add(tt.CvtOp(f"f32.{ty}", hi, [h1]))
        return lo, hi

    def _round(self, v: SSAValue) -> SSAValue:
        """``v`` rounded to the product type (kept in an f32 register)."""
        ty = self.ep.prod_type
        if ty == "f32":
            return v
        e = self.e
        h, out = e.reg("b16"), e.reg("f32")
        e.add(tt.CvtOp(f"rn.{ty}.f32", h, [v]))
        e.add(tt.CvtOp(f"f32.{ty}", out, [h]))
        return out

    def pair(self, j: int, h: int, lo: SSAValue, hi: SSAValue) -> tuple[SSAValue, SSAValue]:
        """The epilogue of the accumulators at ``(row0 + 8h, col0 + 8j)`` and ``+ 1``."""
        e, ep = self.e, self.ep
        vals = [self._round(lo), self._round(hi)]
        if ep.bias is not None:
            if ep.bias == "row":
                if j not in self._row_bias:
                    self._row_bias[j] = self._load_pair(
                        self.ptr, ep.bias_elem, 8 * j * ep.bias_bytes, self._guard(j, 0),
                        self._guard(j, 0, True) if self.n % 2 else None)
                b = self._row_bias[j]
            else:
                b = self._load_pair(self.ptr, ep.bias_elem,
                                    (8 * h * self.n + 8 * j) * ep.bias_bytes, self._guard(j, h),
                                    self._guard(j, h, True) if self.n % 2 else None)
            vals = [self._round(e.fbin(tt.AddOp, v, bv, "rn.f32")) for v, bv in zip(vals, b)]
        if ep.act is not None:
            vals = [self._round(activation(e, ep.act, v)) for v in vals]
        if ep.residual:
            r = self._load_pair(self.res_ptr, ep.prod_type,
                                (8 * h * self.n + 8 * j) * ep.elem_bytes,
                                self._guard(j, h, full=True),
                                self._guard(j, h, True, True) if self.n % 2 else None)
            vals = [self._round(e.fbin(tt.AddOp, v, rv, "rn.f32")) for v, rv in zip(vals, r)]
        return vals[0], vals[1]


# --------------------------------------------------------------------------- f32 math


def activation(e: TargetAsm, act: str, x: SSAValue) -> SSAValue:
    """``relu`` / ``silu`` / ``gelu`` (tanh form) of the f32 register ``x``."""
    if act == "relu":  # x < 0 ? 0 : x, as torch (keeps -0.0 and NaN)
        neg, d = e.reg("pred"), e.reg("f32")
        e.add(tt.SetpOp("lt.f32", neg, x, e.fimm(0.0)))
        e.add(tt.SelpOp("f32", d, e.fimm(0.0), x, neg))
        return d
    if act == "silu":
        neg = e.reg("f32")
        e.add(tt.NegOp("f32", neg, x))
        s = e.fbin(tt.DivOp, e.fimm(1.0), e.fbin(tt.AddOp, e.fimm(1.0), exp(e, neg), "rn.f32"),
                   "rn.f32")
        return e.fbin(tt.MulOp, x, s, "rn.f32")
    if act == "gelu":
        x3 = e.fbin(tt.MulOp, e.fbin(tt.MulOp, x, x, "rn.f32"), x, "rn.f32")
        inner = e.fbin(tt.AddOp, x, e.fbin(tt.MulOp, e.fimm(0.044715), x3, "rn.f32"), "rn.f32")
        inner = e.fbin(tt.MulOp, e.fimm(math.sqrt(2.0 / math.pi)), inner, "rn.f32")
        half = e.fbin(tt.MulOp, e.fimm(0.5), x, "rn.f32")
        return e.fbin(tt.MulOp, half, e.fbin(tt.AddOp, e.fimm(1.0), tanh(e, inner), "rn.f32"),
                      "rn.f32")
    raise ValueError(f"sm90 epilogue: activation {act!r}")


def exp(e: TargetAsm, x: SSAValue) -> SSAValue:
    """``e ** x`` as ``ex2.approx.f32(x * log2 e)``."""
    d = e.reg("f32")
    e.add(tt.Ex2Op("approx.f32", d, e.fbin(tt.MulOp, x, LOG2E, "rn.f32")))
    return d


def tanh(e: TargetAsm, x: SSAValue) -> SSAValue:
    """``tanh(x) = sign(x) (1 - t) / (1 + t)``, ``t = exp(-2|x|)``; an odd Taylor polynomial
    for ``|x| < 0.3``."""
    ax = e.reg("f32")
    e.add(tt.AbsOp("f32", ax, x))
    t = e.reg("f32")
    e.add(tt.Ex2Op("approx.f32", t, e.fbin(tt.MulOp, ax, -2.0 * LOG2E, "rn.f32")))
    big = e.fbin(tt.DivOp, e.fbin(tt.SubOp, e.fimm(1.0), t, "rn.f32"),
                 e.fbin(tt.AddOp, e.fimm(1.0), t, "rn.f32"), "rn.f32")
    big_s = e.reg("f32")
    e.add(tt.CopysignOp("f32", big_s, x, big))
    x2 = e.fbin(tt.MulOp, x, x, "rn.f32")
    coeffs = [62.0 / 2835.0, -17.0 / 315.0, 2.0 / 15.0, -1.0 / 3.0]
    poly = e.reg("f32")
    e.add(tt.MovOp("f32", poly, e.fimm(coeffs[0])))
    for c in coeffs[1:]:
        e.fma(poly, x2, c, dst=poly)
    small = e.fma(e.fbin(tt.MulOp, poly, x2, "rn.f32"), x, x)
    is_small = e.reg("pred")
    e.add(tt.SetpOp("lt.f32", is_small, ax, e.fimm(0.3)))
    d = e.reg("f32")
    e.add(tt.SelpOp("f32", d, small, big_s, is_small))
    return d
