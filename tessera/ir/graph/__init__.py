"""Graph IR (``tgraph``): whole-tensor algebraic operators.

A Graph IR program is a ``func.func`` whose body is a dataflow graph of
``tgraph`` ops on ``tensor<...>`` values. Every op states its full result type;
verifiers check shapes, dtypes and attributes and name the dims that disagree.
Element types may carry a numeric policy as the tensor encoding
(``tensor<64x64xf8E4M3FN, #tessera.policy<f8E4M3FN, accum = f32>>``); ops
compare element types, not encodings.

Syntax is uniform: operands, then keyword attributes, then
``: (operand types) -> result types``::

    %c = tgraph.matmul %a, %b tile_shape = [128, 128, 64]
        : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %s = tgraph.sum %c axes = [1] keepdims
        : (tensor<256x128xf32>) -> tensor<256x1xf32>

The dialect is a package split by op family, as xDSL's dialect packages are:
:mod:`.base` (the tensor constraint, shape helpers, shared verifier checks),
:mod:`.elementwise`, :mod:`.nn` (reductions and neural-network ops), :mod:`.shape`,
:mod:`.indexing`, :mod:`.scientific`, :mod:`.collectives`, :mod:`.fusion` and :mod:`.optim` (multi-tensor
optimizer updates). This module re-exports
every op and helper, so ``from tessera.ir import graph as g; g.MatmulOp`` works.
"""

from __future__ import annotations

from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation

from tessera.ir.graph.base import (
    TensorT,
    _mesh_axis_size,
    broadcast_shapes,
    elem_of,
    fmt_shape,
    shape_of,
)
from tessera.ir.graph.collectives import (
    AllGatherOp,
    AllReduceOp,
    AllSliceOp,
    AllToAllOp,
    CollectiveOp,
    RecvOp,
    ReduceScatterOp,
    SendOp,
)
from tessera.ir.graph.elementwise import (
    MAX_F32,
    MAX_TILE_SIZE,
    AbsOp,
    AddOp,
    CastOp,
    CompareOp,
    CosOp,
    DivOp,
    ElementwiseBinaryOp,
    ElementwiseUnaryOp,
    EqOp,
    ErfOp,
    ExpOp,
    GeluOp,
    GeOp,
    GtOp,
    LeOp,
    LogOp,
    LtOp,
    MaximumOp,
    MinimumOp,
    MulOp,
    NegOp,
    NeOp,
    PowOp,
    ReluOp,
    RsqrtOp,
    SelectOp,
    SigmoidOp,
    SiluOp,
    SinOp,
    SqrtOp,
    SubOp,
    TanhOp,
)
from tessera.ir.graph.fusion import (
    ACTIVATIONS,
    FUSIBLE_BINARY_OPS,
    FUSIBLE_ELEMENTWISE_OPS,
    FUSIBLE_REDUCTION_OPS,
    FUSIBLE_UNARY_OPS,
    FusedOp,
    MatmulEpilogueOp,
    YieldOp,
    is_index_map,
    unit_reshape,
)
from tessera.ir.graph.indexing import TakeAlongAxisOp
from tessera.ir.graph.nn import (
    AxesReductionOp,
    Conv2dOp,
    FlashAttentionBwdOp,
    FlashAttentionFwdOp,
    FlashAttentionOp,
    LayerNormBwdOp,
    LayerNormFwdOp,
    LayerNormOp,
    LogSumExpOp,
    MatmulOp,
    MaxOp,
    MeanOp,
    MinOp,
    MSEOp,
    NormOp,
    ReductionOp,
    RMSNormBwdOp,
    RMSNormFwdOp,
    RMSNormOp,
    SoftmaxOp,
    SumOp,
)
from tessera.ir.graph.optim import (
    ADAMW_HYPER,
    SGD_HYPER,
    AdamWUpdateOp,
    SGDUpdateOp,
    hyper_type,
)
from tessera.ir.graph.scientific import (
    CholeskyOp,
    ComplexOp,
    FFT2dOp,
    FFTOp,
    ImagOp,
    PoissonOp,
    RandnOp,
    RealOp,
    SDDMMOp,
    SpMMOp,
    SpMMTransposeOp,
    SVDOp,
    TriangularSolveOp,
)
from tessera.ir.graph.shape import (
    BroadcastOp,
    ConcatOp,
    ConstantOp,
    ReshapeOp,
    ReverseOp,
    SliceOp,
    TransposeOp,
)

DERIVATIVE_SUPPORT_OPS: list[type[IRDLOperation]] = [
    FlashAttentionFwdOp, FlashAttentionBwdOp, LayerNormFwdOp, LayerNormBwdOp,
    RMSNormFwdOp, RMSNormBwdOp, RealOp, ImagOp, ComplexOp, TriangularSolveOp,
    SpMMTransposeOp, SDDMMOp,
]


GRAPH_OPS: list[type[IRDLOperation]] = [
    AddOp, SubOp, MulOp, DivOp, PowOp, MaximumOp, MinimumOp,
    LtOp, LeOp, GtOp, GeOp, EqOp, NeOp, SelectOp,
    NegOp, AbsOp, ExpOp, LogOp, SqrtOp, RsqrtOp, TanhOp, ReluOp, GeluOp, SiluOp, SigmoidOp,
    ErfOp, SinOp, CosOp, CastOp,
    SumOp, MaxOp, MinOp, MeanOp, LogSumExpOp,
    SoftmaxOp, LayerNormOp, RMSNormOp, MatmulOp, FlashAttentionOp, Conv2dOp, MSEOp,
    TransposeOp, ReshapeOp, BroadcastOp, SliceOp, ReverseOp, ConcatOp, ConstantOp,
    TakeAlongAxisOp,
    FFTOp, FFT2dOp, CholeskyOp, SVDOp, SpMMOp,
    RandnOp, PoissonOp,
    AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, AllSliceOp, SendOp, RecvOp,
    FusedOp, YieldOp, MatmulEpilogueOp,
    AdamWUpdateOp, SGDUpdateOp,
]

Graph = Dialect("tgraph", [*GRAPH_OPS, *DERIVATIVE_SUPPORT_OPS], [])

__all__ = [
    "ACTIVATIONS",
    "ADAMW_HYPER",
    "AdamWUpdateOp",
    "SGDUpdateOp",
    "SGD_HYPER",
    "AbsOp",
    "AddOp",
    "AllGatherOp",
    "AllReduceOp",
    "AllSliceOp",
    "AllToAllOp",
    "AxesReductionOp",
    "BroadcastOp",
    "CastOp",
    "CholeskyOp",
    "CollectiveOp",
    "CompareOp",
    "ComplexOp",
    "ConcatOp",
    "ConstantOp",
    "Conv2dOp",
    "DERIVATIVE_SUPPORT_OPS",
    "DivOp",
    "ElementwiseBinaryOp",
    "ElementwiseUnaryOp",
    "CosOp",
    "ErfOp",
    "EqOp",
    "ExpOp",
    "FFT2dOp",
    "FFTOp",
    "FUSIBLE_BINARY_OPS",
    "FUSIBLE_ELEMENTWISE_OPS",
    "FUSIBLE_REDUCTION_OPS",
    "FUSIBLE_UNARY_OPS",
    "is_index_map",
    "unit_reshape",
    "FlashAttentionBwdOp",
    "FlashAttentionFwdOp",
    "FlashAttentionOp",
    "FusedOp",
    "GRAPH_OPS",
    "GeOp",
    "GeluOp",
    "Graph",
    "GtOp",
    "IRDLOperation",
    "ImagOp",
    "LayerNormBwdOp",
    "LayerNormFwdOp",
    "LayerNormOp",
    "LogSumExpOp",
    "LeOp",
    "LogOp",
    "LtOp",
    "MAX_F32",
    "MAX_TILE_SIZE",
    "MSEOp",
    "MatmulEpilogueOp",
    "MatmulOp",
    "MaxOp",
    "MaximumOp",
    "MeanOp",
    "MinOp",
    "MinimumOp",
    "MulOp",
    "NeOp",
    "NegOp",
    "PoissonOp",
    "PowOp",
    "RMSNormBwdOp",
    "RMSNormFwdOp",
    "NormOp",
    "RMSNormOp",
    "RandnOp",
    "RealOp",
    "RecvOp",
    "ReduceScatterOp",
    "ReductionOp",
    "ReluOp",
    "ReshapeOp",
    "RsqrtOp",
    "SDDMMOp",
    "SVDOp",
    "SelectOp",
    "SendOp",
    "SigmoidOp",
    "SiluOp",
    "ReverseOp",
    "SinOp",
    "SliceOp",
    "SoftmaxOp",
    "SpMMOp",
    "SpMMTransposeOp",
    "SqrtOp",
    "SubOp",
    "SumOp",
    "TakeAlongAxisOp",
    "TanhOp",
    "TensorT",
    "TransposeOp",
    "TriangularSolveOp",
    "YieldOp",
    "_mesh_axis_size",
    "broadcast_shapes",
    "elem_of",
    "fmt_shape",
    "hyper_type",
    "shape_of",
]
