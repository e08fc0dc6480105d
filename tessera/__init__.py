"""Tessera: operator graphs and tile kernels compiled through xDSL dialects to PTX.

The public API follows the Tessera guide::

    import tessera as ts
    from tessera import op, graph, dist
"""

from tessera.ir.dtypes import (
    DType,
    bf16,
    bool_,
    fp4_e2m1,
    fp6_e2m3,
    fp6_e3m2,
    fp8_e4m3,
    fp8_e5m2,
    fp16,
    fp32,
    fp64,
    int8,
    int32,
    int64,
)
from tessera.ir.policy import (
    NumericPolicy,
    accum,
    deterministic,
    loss_scale,
    nondeterministic,
    saturate,
    stochastic_round,
)
from tessera.version import __version__

# Short spellings used throughout the guide.
f64, f32, f16 = fp64, fp32, fp16
fp6, fp4 = fp6_e2m3, fp4_e2m1
i8, i32, i64 = int8, int32, int64

__all__ = [
    "__version__", "DType", "NumericPolicy",
    "bf16", "bool_", "fp4_e2m1", "fp6_e2m3", "fp6_e3m2", "fp8_e4m3", "fp8_e5m2", "fp16",
    "fp32", "fp64", "int8", "int32", "int64", "f64", "f32", "f16", "fp6", "fp4", "i8", "i32",
    "i64",
    "accum", "deterministic", "loss_scale", "nondeterministic", "saturate", "stochastic_round",
]

# --- front end (operator graphs, @jit, @graph.module, Tensor annotations) ---
from tessera.frontend import graph, op  # noqa: E402
from tessera.frontend.annotations import Tensor, TensorAnnotation  # noqa: E402
from tessera.frontend.errors import (  # noqa: E402
    ShapeError,
    TesseraError,
    TesseraTypeError,
    TraceError,
)
from tessera.frontend.jit import CompiledFunction, jit  # noqa: E402
from tessera.frontend.ops import *  # noqa: E402, F403, A004
from tessera.frontend.ops import OP_FUNCTIONS as _OP_FUNCTIONS  # noqa: E402
from tessera.frontend.ops import e, inf, pi  # noqa: E402
from tessera.frontend.tracing import TracedTensor, stage  # noqa: E402

__all__ += [
    "graph", "op", "Tensor", "TensorAnnotation", "TracedTensor", "CompiledFunction", "jit",
    "TesseraError", "ShapeError", "TesseraTypeError", "TraceError", "pi", "e", "inf", "stage",
    *_OP_FUNCTIONS,
]
# --- tile kernels (@kernel, ts.tile) ---
from tessera import tile  # noqa: E402
from tessera.frontend.kernel_api import kernel  # noqa: E402
from tessera.tile import cp_async, mut, tbarrier, tshared  # noqa: E402

__all__ += ["kernel", "tile", "tshared", "tbarrier", "cp_async", "mut"]
# --- autodiff (grad, value_and_grad, jvp, autodiff, custom_vjp) ---
from tessera.autodiff.api import (  # noqa: E402
    autodiff,
    custom_vjp,
    grad,
    jvp,
    value_and_grad,
)

__all__ += ["autodiff", "custom_vjp", "grad", "jvp", "value_and_grad"]
# --- numerics (precision_policy) ---
from tessera.numerics.api import abs, round  # noqa: E402, A004
from tessera.numerics.policy_classes import precision_policy  # noqa: E402

__all__ += ["abs", "precision_policy", "round"]
# --- profiler (ts.profiler.session) ---
from tessera import profiler  # noqa: E402

__all__ += ["profiler"]
# --- distributed (dist, ShardSpec) ---
from tessera import dist  # noqa: E402
from tessera.dist import ShardSpec  # noqa: E402

__all__ += ["dist", "ShardSpec"]

from tessera import optim  # noqa: E402

__all__ += ["optim"]
