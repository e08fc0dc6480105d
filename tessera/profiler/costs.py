"""Bytes and floating-point operations of Graph IR ops, from their shapes and dtypes.

Every count comes from the op's operand and result types; nothing is measured.

Bytes are the op's memory traffic if each operand and each result crosses
memory once: the sum of the sizes of its distinct tensor operands and of its
results, with each element taking the size of its storage dtype as the runtime
stores it (``np_dtype.itemsize``; complex elements two floats). Intermediates
inside a ``tgraph.fused`` body or a ``matmul_epilogue`` stay on chip and are not
counted.

FLOPs (floating-point or integer arithmetic operations), by op:

========================== ==========================================================
elementwise, compare,      1 per result element (``gelu``, ``tanh``, ``exp`` … count
select                     as one operation each)
cast, shape ops, constant  0 (data movement only)
sum / max / min            input elements - result elements
mean                       input elements
logsumexp                  4 per input element (max, subtract, exp, sum) + 2 per result
                           element (log, add)
softmax                    5 per element (max, subtract, exp, sum, divide)
rmsnorm                    3 per element (square, sum, scale) + 1 per row (rsqrt),
                           + 1 per element with a weight
layernorm                  5 per element (mean, subtract, square, sum, scale) + 1 per
                           row, + 1 per element each for weight and bias
matmul                     2·M·N·K per batch element
matmul_epilogue            matmul + 1 per result element each for bias and activation
flash_attention            per batch element: 2·P·D (q·kᵀ) + 2·P·Dv (p·v) + 5·P
                           (scale, max, subtract, exp, sum) + Sq·Dv (final divide),
                           P = unmasked (query, key) pairs (Sq·Sk, or causal pairs);
                           flash_attention_fwd the same
flash_attention_bwd        per batch element: 6·P·D + 4·P·Dv (S, dV, dP, dQ, dK) + 6·P
                           (P, dS) + 2·Sq·Dv (Di)
conv2d                     2·N·O·Ho·Wo·(C/groups)·kh·kw (+ N·O·Ho·Wo with a bias)
mse                        3 per broadcast element (subtract, square, sum) + 1
take_along_axis            0 (data movement)
fft / fft2d                5·n·log2(n) per transform of n points
cholesky                   n³/3 per matrix
spmm, spmm_transpose,      2·nnz·N
sddmm
adamw_update               14 per parameter element (decay, both moments, sqrt,
                           divide, add eps, step)
sgd_update                 2 per parameter element, + 2 with weight decay, + 3 with
                           momentum buffers, + 2 with Nesterov
fused                      the sum over its body
others (svd, random,       unknown (None)
collectives, send/recv)
========================== ==========================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation, SSAValue

from tessera.ir import graph as g
from tessera.ir.registry import OpRegistry


@dataclass(frozen=True)
class Cost:
    """An op's FLOPs (None when unknown) and bytes moved (read + written)."""

    flops: int | None
    bytes_read: int
    bytes_written: int

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written


def _shape(v: SSAValue | Attribute) -> tuple[int, ...]:
    t = v.type if isinstance(v, SSAValue) else v
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def numel(v: SSAValue | Attribute) -> int:
    """Number of elements of a tensor value or type."""
    return math.prod(_shape(v))


def element_bytes(t: Attribute) -> int:
    """Bytes one element of tensor type ``t`` takes in storage."""
    from tessera.runtime.graph_interpreter import np_dtype_of

    assert isinstance(t, TensorType)
    return np_dtype_of(t).itemsize


def tensor_bytes(v: SSAValue | Attribute) -> int:
    """Bytes of a tensor value or type (0 for non-tensors)."""
    t = v.type if isinstance(v, SSAValue) else v
    if not isinstance(t, TensorType):
        return 0
    return numel(t) * element_bytes(t)


def _io_bytes(op: Operation) -> tuple[int, int]:
    seen: set[SSAValue] = set()
    read = 0
    for v in op.operands:
        if v not in seen:
            seen.add(v)
            read += tensor_bytes(v)
    return read, sum(tensor_bytes(r) for r in op.results)


def _matmul_flops(op: g.MatmulOp | g.MatmulEpilogueOp) -> int:
    a = _shape(op.lhs)
    k = a[-2] if op.transpose_lhs is not None else a[-1]
    out = _shape(op.result)
    return 2 * math.prod(out) * k


def _attention_flops(op: g.FlashAttentionOp | g.FlashAttentionFwdOp) -> int:
    q, k, v = _shape(op.q), _shape(op.k), _shape(op.v)
    sq, d, sk, dv = q[-2], q[-1], k[-2], v[-1]
    batch = math.prod(q[:-2])
    if op.causal is not None:
        pairs = sum(min(sk, i + 1) for i in range(sq))
    else:
        pairs = sq * sk
    return batch * (2 * pairs * d + 2 * pairs * dv + 5 * pairs + sq * dv)


def _attention_bwd_flops(op: g.FlashAttentionBwdOp) -> int:
    """Five GEMM-shaped products (2·P·D each for S, dQ, dK; 2·P·Dv each for dV, dP over
    the P attended pairs), P and dS elementwise, and Di."""
    q, k, v = _shape(op.q), _shape(op.k), _shape(op.v)
    sq, d, sk, dv = q[-2], q[-1], k[-2], v[-1]
    batch = math.prod(q[:-2])
    pairs = sum(min(sk, i + 1) for i in range(sq)) if op.causal is not None else sq * sk
    return batch * (6 * pairs * d + 4 * pairs * dv + 6 * pairs + 2 * sq * dv)


def _norm_flops(op: g.NormOp) -> int:
    shape = _shape(op.input)
    n = math.prod(shape)
    rows = n // shape[-1] if shape and shape[-1] else 0
    per = 3 if isinstance(op, g.RMSNormOp | g.RMSNormFwdOp) else 5
    extra = n if op.weight is not None else 0
    if isinstance(op, g.LayerNormOp | g.LayerNormFwdOp) and op.bias is not None:
        extra += n
    return per * n + rows + extra


def _fft_flops(op: Operation, axes: int) -> int:
    shape = _shape(op.operands[0])
    pts = math.prod(shape[-axes:]) if shape else 1
    transforms = math.prod(shape[:-axes]) if len(shape) > axes else 1
    return int(round(5 * pts * math.log2(pts))) * transforms if pts > 1 else 0


FlopRule = Callable[[Operation], "int | None"]
"""FLOPs of one op from its types (None when unknown)."""

COSTS: OpRegistry[FlopRule] = OpRegistry("cost")
"""The FLOP count of each op, by op class (the table in the module docstring); an op with
no entry has unknown FLOPs."""


@COSTS.register(g.ElementwiseBinaryOp, g.ElementwiseUnaryOp, g.SelectOp)
def _elementwise(op: Operation) -> int:
    return numel(op.results[0])


@COSTS.register(
    g.CastOp, g.TransposeOp, g.ReshapeOp, g.BroadcastOp, g.SliceOp, g.ReverseOp, g.ConcatOp,
    g.ConstantOp,
)
def _data_movement(op: Operation) -> int:
    return 0


@COSTS.register(
    g.SVDOp, g.RandnOp, g.PoissonOp, g.AllReduceOp, g.AllGatherOp, g.ReduceScatterOp,
    g.AllToAllOp, g.AllSliceOp, g.SendOp, g.RecvOp,
)
def _unknown(op: Operation) -> None:
    return None


@COSTS.register(g.MeanOp)
def _mean(op: g.MeanOp) -> int:
    return numel(op.input)


@COSTS.register(g.ReductionOp)
def _reduction(op: g.ReductionOp) -> int:
    return numel(op.input) - numel(op.results[0])


@COSTS.register(g.LogSumExpOp)
def _logsumexp(op: g.LogSumExpOp) -> int:
    return 4 * numel(op.input) + 2 * numel(op.result)


@COSTS.register(g.SoftmaxOp)
def _softmax(op: g.SoftmaxOp) -> int:
    return 5 * numel(op.input)


COSTS.register(g.RMSNormOp, g.RMSNormFwdOp, g.LayerNormOp, g.LayerNormFwdOp)(_norm_flops)
COSTS.register(g.MatmulOp)(_matmul_flops)
COSTS.register(g.FlashAttentionOp, g.FlashAttentionFwdOp)(_attention_flops)
COSTS.register(g.FlashAttentionBwdOp)(_attention_bwd_flops)


@COSTS.register(g.MatmulEpilogueOp)
def _matmul_epilogue(op: g.MatmulEpilogueOp) -> int:
    n = numel(op.result)
    return (
        _matmul_flops(op)
        + (n if op.bias is not None else 0)
        + (n if op.activation is not None else 0)
        + (n if op.residual is not None else 0)
    )


@COSTS.register(g.Conv2dOp)
def _conv2d(op: g.Conv2dOp) -> int:
    w = _shape(op.weight)
    out = numel(op.result)
    return 2 * out * w[1] * w[2] * w[3] + (out if op.bias is not None else 0)


@COSTS.register(g.TakeAlongAxisOp)
def _take_along_axis(op: g.TakeAlongAxisOp) -> int:
    return 0  # data movement


@COSTS.register(g.MSEOp)
def _mse(op: g.MSEOp) -> int:
    a, b = _shape(op.pred), _shape(op.target)
    n = math.prod(g.broadcast_shapes(a, b) or a)
    return 3 * n + 1


@COSTS.register(g.AdamWUpdateOp)
def _adamw(op: g.AdamWUpdateOp) -> int:
    return 14 * sum(math.prod(_shape(p)) for p in op.params)


@COSTS.register(g.SGDUpdateOp)
def _sgd(op: g.SGDUpdateOp) -> int:
    per = 2 + (2 if op.weight_decay.value.data else 0)
    if op.momentum_buffers:
        per += 3 + (2 if op.nesterov is not None else 0)
    return per * sum(math.prod(_shape(p)) for p in op.params)


@COSTS.register(g.FFTOp)
def _fft(op: g.FFTOp) -> int:
    return _fft_flops(op, 1)


@COSTS.register(g.FFT2dOp)
def _fft2d(op: g.FFT2dOp) -> int:
    return _fft_flops(op, 2)


@COSTS.register(g.CholeskyOp)
def _cholesky(op: g.CholeskyOp) -> int:
    shape = _shape(op.input)
    return math.prod(shape[:-2]) * shape[-1] ** 3 // 3


@COSTS.register(g.SpMMOp, g.SpMMTransposeOp)
def _spmm(op: g.SpMMOp | g.SpMMTransposeOp) -> int:
    return 2 * numel(op.values) * _shape(op.dense)[-1]


@COSTS.register(g.SDDMMOp)
def _sddmm(op: g.SDDMMOp) -> int:
    return 2 * numel(op.indices) * _shape(op.lhs)[-1]


@COSTS.register(g.RowMomentsOp)
def _row_moments(op: g.RowMomentsOp) -> int:
    """A sum, then a subtraction, a product and a sum per element."""
    return 4 * numel(op.input)


@COSTS.register(g.FusedOp, g.FusedReductionsOp)
def _fused(op: g.FusedOp | g.FusedReductionsOp) -> int | None:
    total = 0
    for inner in op.block.ops:
        if isinstance(inner, g.YieldOp):
            continue
        f = flops(inner)
        if f is None:
            return None
        total += f
    return total


def flops(op: Operation) -> int | None:
    """The op's FLOPs by the table in the module docstring (None when unknown)."""
    rule = COSTS.get(op)
    return None if rule is None else rule(op)


def op_cost(op: Operation) -> Cost:
    """FLOPs and bytes of one Graph IR op (bytes of any op with tensor operands/results)."""
    read, written = _io_bytes(op)
    return Cost(flops(op) if op.dialect_name() == "tgraph" else None, read, written)


def kernel_flops(
    graph_module: Operation, function: str, kernels: list[str]
) -> dict[str, int | None]:
    """FLOPs per kernel of the GPU lowering of ``function``, for the kernel names ``kernels``.

    ``lower-graph-to-tile`` names the kernels of the ``n``-th op of a kind
    ``<function>_<kind>_<n>``. Where a kind has exactly one kernel per op, kernel
    ``n`` gets the FLOPs of op ``n``; kinds whose kernel count differs from the op
    count cannot be told apart and get no entry (their FLOPs stay unknown).
    """
    from xdsl.dialects import func

    by_kind: dict[str, list[Operation]] = {}
    for fn in graph_module.walk():
        if isinstance(fn, func.FuncOp) and fn.sym_name.data == function:
            for op in fn.body.block.ops:
                if op.dialect_name() == "tgraph":
                    by_kind.setdefault(op.name.split(".", 1)[1], []).append(op)
    out: dict[str, int | None] = {}
    for kind, ops in by_kind.items():
        names = [f"{function}_{kind}_{i}" for i in range(len(ops))]
        prefix = f"{function}_{kind}_"
        count = sum(1 for k in kernels if k.startswith(prefix) and k[len(prefix):].isdigit())
        if count == len(ops):
            out.update({n: flops(op) for n, op in zip(names, ops)})
    return out
