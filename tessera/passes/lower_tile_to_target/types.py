"""How Tile IR types map to PTX: register classes, instruction types and widths,
and the error every lowering raises."""

from __future__ import annotations

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
)
from xdsl.ir import Attribute

from tessera.errors import TesseraError


class TileLoweringError(TesseraError, ValueError):
    """A Tile IR construct that ``lower-tile-to-target`` cannot lower."""


def reg_class_of(t: Attribute) -> str:
    """The PTX register class holding one value of scalar type ``t``."""
    if isinstance(t, IndexType):
        return "b64"
    if isinstance(t, IntegerType):
        w = t.width.data
        return {1: "pred", 8: "b16", 16: "b16", 32: "b32", 64: "b64"}[w]
    if isinstance(t, Float32Type):
        return "f32"
    if isinstance(t, Float64Type):
        return "f64"
    if isinstance(t, BFloat16Type | Float16Type):
        return "b16"
    if element_bits(t) == 8:
        return "b16"
    raise TileLoweringError(f"no PTX register class for type {t}")


def element_bits(t: Attribute) -> int:
    """The width in bits of one element of scalar type ``t``."""
    return 64 if isinstance(t, IndexType) else getattr(t, "bitwidth", 0) or getattr(
        getattr(t, "width", None), "data", 0
    )


def int_type(t: Attribute, signed: bool = True) -> str:
    """PTX integer type for an integer/index type (i8 values live in 16-bit registers,
    sign-extended: loads are ``.s8``)."""
    bits = 64 if isinstance(t, IndexType) else max(16, t.width.data)  # type: ignore[attr-defined]
    return f"{'s' if signed else 'u'}{bits}"


def float_type(t: Attribute) -> str:
    """The PTX type of float arithmetic on ``t`` (f32 or f64; others are computed in f32)."""
    if isinstance(t, Float32Type):
        return "f32"
    if isinstance(t, Float64Type):
        return "f64"
    raise TileLoweringError(f"arithmetic on {t} is not lowered (compute in f32)")


def float_name(t: Attribute) -> str:
    """The PTX name of a float type (``bf16``, ``f16``, ``e4m3``, ``e5m2``, ``f32``, ``f64``)."""
    if isinstance(t, BFloat16Type):
        return "bf16"
    if isinstance(t, Float16Type):
        return "f16"
    if isinstance(t, Float8E4M3FNType):
        return "e4m3"
    if isinstance(t, Float8E5M2Type):
        return "e5m2"
    return float_type(t)


def mem_type(t: Attribute) -> str:
    """PTX type used to load/store one element of type ``t``."""
    if isinstance(t, Float32Type | Float64Type):
        return float_type(t)
    if isinstance(t, IntegerType) and t.width.data == 1:
        return "u8"
    if isinstance(t, IntegerType) and t.width.data == 8:
        return "s8"  # loads sign-extend into the 16-bit register, which holds i8 values so
    bits = element_bits(t)
    return {8: "b8", 16: "b16", 32: "b32", 64: "b64"}[bits]


def bits_type(cls: str) -> str:
    """The untyped (``.bN``) instruction type of a register class."""
    return {"b16": "b16", "b32": "b32", "b64": "b64", "f32": "b32", "f64": "b64"}[cls]


TYPE_BITS_OF = {"b16": 16, "b32": 32, "b64": 64}
"""The widths of the integer register classes."""


def is_i1(t: Attribute) -> bool:
    """Whether ``t`` is ``i1`` (held in a predicate register, stored as a byte)."""
    return isinstance(t, IntegerType) and t.width.data == 1
