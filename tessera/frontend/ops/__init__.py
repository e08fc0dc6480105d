"""The operator functions of the guide (``ts.matmul``, ``op.softmax``, ``ts.all_reduce`` ...).

Each function appends one Graph IR op (a few for composites such as
:func:`split_qkv`) to the active trace and returns :class:`TracedTensor`
results. Shapes are checked by the ops' own verifiers (or their
``infer_shape`` helpers), so the rules live in :mod:`tessera.ir.graph`.

Result-dtype rules:

* Elementwise ops need tensor operands of one element type; two tensors of
  different types are not promoted (``ts.cast`` converts). A Python scalar
  becomes a ``tgraph.constant`` splat (rank 0) of the other operand's type,
  policy included. The result keeps the left operand's numeric policy (the right
  one's if the left has the default policy). Comparisons give ``bool`` (``i1``).
* Integer and bool operands follow torch's promotion: ``/`` is true division
  (integer or bool operands are converted to ``f32``, torch's default float
  type); an integer or bool tensor with a Python float is converted to ``f32``
  first, and a bool tensor with a Python int to ``int64``. ``sum`` of bool and
  integer tensors narrower than 64 bits counts in ``int64``; ``mean`` of them is
  an error (as in torch).
* ``matmul``/``gemm`` return ``out_dtype`` if given; else the accumulate dtype
  when the operands' policy declares one (``fp8_e4m3 @accum(f32)`` -> ``f32``);
  an operand of integer storage with a float accumulate type (a ``@ts.precision_policy``
  like the guide's ``QuantizedPolicy``) is first cast to that type (exact for int8);
  else the operands' own type and policy (``bf16 x bf16 -> bf16``, accumulated
  in f32).
* Reductions, normalizations, softmax, attention and shape ops keep the input type.

The functions are a package split by op family, as the Graph IR dialect is: :mod:`.base`
(what they share), :mod:`.elementwise`, :mod:`.nn`, :mod:`.shape`, :mod:`.scientific`,
:mod:`.collectives`, :mod:`.optim` and :mod:`.numpy_protocol`; this module re-exports every one.
"""

# ruff: noqa: F401  (the names are re-exported through __all__, built from OP_FUNCTIONS)
from __future__ import annotations

from tessera.frontend.eager import eager as _eager
from tessera.frontend.ops.base import (
    constant,
    e,
    inf,
    pi,
)
from tessera.frontend.ops.collectives import (
    all_gather,
    all_reduce,
    all_slice,
    all_to_all,
    recv,
    reduce_scatter,
    send,
)
from tessera.frontend.ops.elementwise import (
    abs,
    add,
    cast,
    cos,
    div,
    eq,
    erf,
    exp,
    ge,
    gelu,
    gt,
    le,
    log,
    lt,
    maximum,
    minimum,
    mul,
    ne,
    neg,
    pow,
    relu,
    round,
    rsqrt,
    select,
    sigmoid,
    silu,
    sin,
    sqrt,
    sub,
    tanh,
    where,
)
from tessera.frontend.ops.nn import (
    conv2d,
    flash_attention,
    gemm,
    layernorm,
    layernorm_safe,
    logsumexp,
    matmul,
    matmul_result_policy,
    max,
    mean,
    min,
    mse,
    rmsnorm,
    rmsnorm_safe,
    softmax,
    sum,
)
from tessera.frontend.ops.numpy_protocol import (
    array_function,
    array_ufunc,
)
from tessera.frontend.ops.optim import (
    adamw_update,
    sgd_update,
)
from tessera.frontend.ops.scientific import (
    cholesky,
    complex,
    fft,
    fft2d,
    ifft,
    ifft2d,
    imag,
    poisson,
    randn,
    real,
    sddmm,
    spmm,
    spmm_transpose,
    svd,
    triangular_solve,
)
from tessera.frontend.ops.shape import (
    broadcast_to,
    concat,
    flip,
    getitem,
    reshape,
    slice,
    split_qkv,
    take_along_axis,
    transpose,
)

OP_FUNCTIONS: tuple[str, ...] = (
    "add", "sub", "mul", "div", "pow", "maximum", "minimum",
    "lt", "le", "gt", "ge", "eq", "ne", "where", "select",
    "neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "relu", "gelu", "silu", "sigmoid",
    "erf", "sin", "cos",
    "round", "cast",
    "sum", "max", "min", "mean", "logsumexp",
    "softmax", "layernorm", "rmsnorm", "layernorm_safe", "rmsnorm_safe",
    "matmul", "gemm", "flash_attention", "conv2d", "mse",
    "transpose", "reshape", "broadcast_to", "slice", "concat", "constant", "split_qkv",
    "take_along_axis", "flip",
    "fft", "ifft", "fft2d", "ifft2d", "cholesky", "svd", "spmm",
    "spmm_transpose", "sddmm",
    "real", "imag", "complex", "triangular_solve",
    "randn", "poisson",
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_slice", "send", "recv",
    "adamw_update", "sgd_update",
)
"""The operator functions exported as ``ts.<name>`` and ``op.<name>``."""

for _name in OP_FUNCTIONS:  # outside traced functions, on arrays, they run at once
    globals()[_name] = _eager(globals()[_name], _name)
del _name


__all__ = [*OP_FUNCTIONS, "pi", "e", "inf", "matmul_result_policy", "getitem", "array_ufunc",
           "array_function"]
