"""Numeric policies as Python values: ``ts.fp8_e4m3 @accum(ts.f32) @stochastic_round``.

A :class:`NumericPolicy` says how a tensor is stored (storage dtype), which
type its arithmetic accumulates in, how results are rounded back to storage
(nearest-even or stochastic), an optional loss scale, whether conversions
saturate at the format's finite range, and whether reductions must use a
fixed order. It converts to and from :class:`tessera.ir.attrs.NumericPolicyAttr`,
its IR form, which rides on tensor types as their encoding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tessera.ir.dtypes import DType, dtype_of

ROUNDINGS = ("nearest_even", "stochastic")


@dataclass(frozen=True)
class NumericPolicy:
    """Storage dtype plus accumulate / rounding / scaling rules."""

    storage: DType
    accum: DType | None = None
    rounding: str = "nearest_even"
    loss_scale: float | None = None
    saturate: bool = False
    deterministic: bool = True

    def __post_init__(self) -> None:
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"unknown rounding '{self.rounding}'; valid: {', '.join(ROUNDINGS)}")
        if self.loss_scale is not None and not self.loss_scale > 0:
            raise ValueError(f"loss_scale must be positive, got {self.loss_scale}")

    def __matmul__(self, modifier: Any) -> NumericPolicy:
        if isinstance(modifier, _Modifier):
            return modifier.apply(self)
        raise TypeError(
            f"cannot apply {modifier!r} to a numeric policy; expected accum(dtype), "
            "stochastic_round, loss_scale(k), saturate or deterministic"
        )

    @property
    def accum_dtype(self) -> DType:
        """The accumulate dtype: the declared one, else the storage dtype."""
        return self.accum or self.storage

    def rounds_specially(self) -> bool:
        """True when storing under this policy is more than nearest-even rounding to the
        storage type: stochastic rounding, saturation or a loss scale."""
        return self.rounding == "stochastic" or self.saturate or self.loss_scale is not None

    def is_default(self) -> bool:
        """True when the policy says nothing beyond its storage dtype."""
        return self == NumericPolicy(self.storage)

    def __repr__(self) -> str:
        s = repr(self.storage)
        if self.accum is not None:
            s += f" @accum({self.accum!r})"
        if self.rounding == "stochastic":
            s += " @stochastic_round"
        if self.loss_scale is not None:
            s += f" @loss_scale({self.loss_scale})"
        if self.saturate:
            s += " @saturate"
        if not self.deterministic:
            s += " @nondeterministic"
        return s


class _Modifier:
    """Something that can stand right of ``@`` in a dtype expression."""

    def __init__(self, name: str, fn: Any) -> None:
        self._name = name
        self._fn = fn

    def apply(self, policy: NumericPolicy) -> NumericPolicy:
        return self._fn(policy)

    def __repr__(self) -> str:
        return self._name

    def __rmatmul__(self, other: Any) -> NumericPolicy:
        if isinstance(other, DType):
            return NumericPolicy(other) @ self
        return NotImplemented


def accum(dtype: Any) -> _Modifier:
    """``@accum(ts.f32)``: accumulate in ``dtype``."""
    d = dtype_of(dtype, where="accum()")
    return _Modifier(f"accum({d!r})", lambda p: replace(p, accum=d))


def loss_scale(k: float) -> _Modifier:
    """``@loss_scale(128.0)``: scale values by ``k`` before storing in low precision."""
    return _Modifier(f"loss_scale({k})", lambda p: replace(p, loss_scale=float(k)))


stochastic_round = _Modifier("stochastic_round", lambda p: replace(p, rounding="stochastic"))
saturate = _Modifier("saturate", lambda p: replace(p, saturate=True))
deterministic = _Modifier("deterministic", lambda p: replace(p, deterministic=True))
nondeterministic = _Modifier("nondeterministic", lambda p: replace(p, deterministic=False))


def as_policy(x: Any) -> NumericPolicy:
    """A policy from a DType, a dtype spelling or a policy."""
    if isinstance(x, NumericPolicy):
        return x
    return NumericPolicy(dtype_of(x))
