"""Tessera's element types and their mapping to xDSL, numpy and torch.

A :class:`DType` is the Python-side name of an element type (``ts.bf16``,
``ts.fp8_e4m3``...). Each maps 1:1 onto an xDSL builtin type, which is what
appears in the IR (``bf16``, ``f8E4M3FN``...), and onto a numpy dtype (through
``ml_dtypes`` for the formats numpy lacks) used by the CPU reference path.

Numeric policies (``ts.fp8_e4m3 @accum(ts.f32) @stochastic_round``) are built
from a DType with the ``@`` operator; they live in :mod:`tessera.ir.policy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
from xdsl.dialects import builtin
from xdsl.ir import Attribute

if TYPE_CHECKING:
    from tessera.ir.policy import NumericPolicy


@dataclass(frozen=True, eq=False)
class DType:
    """An element type: its Tessera name, bit width and its IR / numpy spellings."""

    name: str
    bits: int
    kind: str  # "float", "int" or "bool"
    ir_type: Attribute
    np_dtype: np.dtype
    torch_name: str | None

    def __repr__(self) -> str:
        return f"ts.{self.name}"

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DType) and other.name == self.name

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def torch_dtype(self) -> Any:
        """The matching ``torch.dtype``, or None if torch has no such type."""
        if self.torch_name is None:
            return None
        import torch

        return getattr(torch, self.torch_name, None)

    def __matmul__(self, modifier: Any) -> NumericPolicy:
        """``dtype @accum(f32)`` and friends: start a numeric policy."""
        from tessera.ir.policy import NumericPolicy

        return NumericPolicy(storage=self) @ modifier

    def __getitem__(self, dims: Any) -> Any:
        """``f32[n]`` in kernel signatures: a tensor annotation of this dtype."""
        from tessera.ir.annotations import TensorAnnotation

        if not isinstance(dims, tuple):
            dims = (dims,)
        return TensorAnnotation(dims=tuple(dims), dtype=self)


def _np(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name))


fp64 = DType("fp64", 64, "float", builtin.f64, np.dtype(np.float64), "float64")
fp32 = DType("fp32", 32, "float", builtin.f32, np.dtype(np.float32), "float32")
fp16 = DType("fp16", 16, "float", builtin.f16, np.dtype(np.float16), "float16")
bf16 = DType("bf16", 16, "float", builtin.bf16, _np("bfloat16"), "bfloat16")
fp8_e4m3 = DType(
    "fp8_e4m3", 8, "float", builtin.Float8E4M3FNType(), _np("float8_e4m3fn"), "float8_e4m3fn"
)
fp8_e5m2 = DType(
    "fp8_e5m2", 8, "float", builtin.Float8E5M2Type(), _np("float8_e5m2"), "float8_e5m2"
)
fp6_e2m3 = DType(
    "fp6_e2m3", 6, "float", builtin.Float6E2M3FNType(), _np("float6_e2m3fn"), None
)
fp6_e3m2 = DType(
    "fp6_e3m2", 6, "float", builtin.Float6E3M2FNType(), _np("float6_e3m2fn"), None
)
fp4_e2m1 = DType(
    "fp4_e2m1", 4, "float", builtin.Float4E2M1FNType(), _np("float4_e2m1fn"), None
)
int8 = DType("int8", 8, "int", builtin.i8, np.dtype(np.int8), "int8")
int32 = DType("int32", 32, "int", builtin.i32, np.dtype(np.int32), "int32")
int64 = DType("int64", 64, "int", builtin.i64, np.dtype(np.int64), "int64")
bool_ = DType("bool", 1, "bool", builtin.i1, np.dtype(np.bool_), "bool")

ALL_DTYPES: tuple[DType, ...] = (
    fp64, fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, fp6_e2m3, fp6_e3m2, fp4_e2m1,
    int8, int32, int64, bool_,
)

# Every spelling a user may write (the guide uses f32 and fp32, "bf16" strings, fp6, fp4).
ALIASES: dict[str, DType] = {d.name: d for d in ALL_DTYPES}
ALIASES.update(
    {
        "f64": fp64, "float64": fp64, "double": fp64,
        "f32": fp32, "float32": fp32, "float": fp32,
        "f16": fp16, "float16": fp16, "half": fp16,
        "bfloat16": bf16,
        "fp8": fp8_e4m3, "e4m3": fp8_e4m3, "float8_e4m3fn": fp8_e4m3,
        "e5m2": fp8_e5m2, "float8_e5m2": fp8_e5m2,
        "fp6": fp6_e2m3, "fp4": fp4_e2m1,
        "i8": int8, "i32": int32, "i64": int64, "bool_": bool_,
    }
)


def dtype_of(value: Any, *, where: str = "") -> DType:
    """Resolve a dtype spelling: a DType, a name such as ``"bf16"``, a numpy/torch dtype.

    Raises ``TypeError`` naming the valid spellings for anything else.
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        if value in ALIASES:
            return ALIASES[value]
        raise TypeError(
            f"unknown dtype '{value}'{' in ' + where if where else ''}; "
            f"valid dtypes: {', '.join(d.name for d in ALL_DTYPES)}"
        )
    policy_storage = getattr(value, "storage", None)
    if isinstance(policy_storage, DType):
        return policy_storage
    try:
        npd = np.dtype(value)
    except TypeError:
        npd = None
    if npd is not None:
        for d in ALL_DTYPES:
            if d.np_dtype == npd:
                return d
    torch_name = str(value).removeprefix("torch.")
    for d in ALL_DTYPES:
        if d.torch_name == torch_name:
            return d
    raise TypeError(
        f"unknown dtype {value!r}{' in ' + where if where else ''}; "
        f"valid dtypes: {', '.join(d.name for d in ALL_DTYPES)}"
    )


def from_ir_type(t: Attribute) -> DType:
    """The DType whose IR spelling is ``t`` (``bf16``, ``f8E4M3FN``...)."""
    for d in ALL_DTYPES:
        if d.ir_type == t:
            return d
    raise TypeError(f"element type {t} has no Tessera dtype")
