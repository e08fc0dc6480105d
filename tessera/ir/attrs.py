"""Attributes shared by Tessera's dialects: numeric policies, meshes, shardings.

They belong to the small ``tessera`` dialect:

* ``#tessera.policy<f8E4M3FN, accum = f32, rounding = stochastic, loss_scale = 128.0,
  saturate, nondeterministic>`` — a numeric policy. It rides on a tensor type as
  its encoding: ``tensor<16x32xf8E4M3FN, #tessera.policy<f8E4M3FN, accum = f32>>``.
* ``#tessera.mesh<dp = 2, tp = 4>`` — a device mesh: named axes and their sizes.
* ``#tessera.shard<[[tp], []]>`` — a sharding: for each tensor dimension, the mesh
  axes it is split over (``[]`` = not split), as in MLIR's ``shard`` dialect
  ``split_axes``. ``#tessera.shard<[[], []], partial = sum over [tp]>`` marks a
  value that still needs a reduction over the listed axes.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    FloatAttr,
    IntAttr,
    StringAttr,
    TensorType,
    f64,
)
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from tessera.ir import dtypes
from tessera.ir.policy import ROUNDINGS, NumericPolicy

REDUCTIONS = ("sum", "max", "min", "prod", "mean")


@irdl_attr_definition
class NumericPolicyAttr(ParametrizedAttribute):
    """A numeric policy: storage type, accumulate type, rounding, scaling, saturation.

    Printed ``#tessera.policy<STORAGE (, accum = T)? (, rounding = R)? (, loss_scale = F)?
    (, saturate)? (, nondeterministic)?>``; omitted fields take their defaults
    (accumulate in the storage type, nearest-even rounding, no scale, no saturation,
    deterministic).
    """

    name = "tessera.policy"

    storage: Attribute
    accum: Attribute
    rounding: StringAttr
    loss_scale: FloatAttr
    saturate: IntAttr
    deterministic: IntAttr

    def verify(self) -> None:
        for role, t in (("storage", self.storage), ("accum", self.accum)):
            try:
                dtypes.from_ir_type(t)
            except TypeError as e:
                raise VerifyException(f"policy {role} type: {e}") from None
        if self.rounding.data not in ROUNDINGS:
            raise VerifyException(
                f"unknown rounding '{self.rounding.data}'; valid: {', '.join(ROUNDINGS)}"
            )
        if self.loss_scale.value.data < 0:
            raise VerifyException("loss_scale must be positive")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        parser.parse_punctuation("<")
        storage = parser.parse_type()
        accum: Attribute = storage
        rounding = "nearest_even"
        scale = 0.0
        sat = 0
        det = 1
        while parser.parse_optional_punctuation(",") is not None:
            key = parser.parse_identifier()
            if key == "accum":
                parser.parse_punctuation("=")
                accum = parser.parse_type()
            elif key == "rounding":
                parser.parse_punctuation("=")
                rounding = parser.parse_identifier()
            elif key == "loss_scale":
                parser.parse_punctuation("=")
                scale = parser.parse_float()
            elif key == "saturate":
                sat = 1
            elif key == "nondeterministic":
                det = 0
            else:
                parser.raise_error(
                    f"unknown policy field '{key}'; expected accum, rounding, loss_scale, "
                    "saturate or nondeterministic"
                )
        parser.parse_punctuation(">")
        return (
            storage, accum, StringAttr(rounding), FloatAttr(scale, f64), IntAttr(sat), IntAttr(det)
        )

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_attribute(self.storage)
        if self.accum != self.storage:
            printer.print_string(", accum = ")
            printer.print_attribute(self.accum)
        if self.rounding.data != "nearest_even":
            printer.print_string(f", rounding = {self.rounding.data}")
        if self.loss_scale.value.data:
            printer.print_string(f", loss_scale = {self.loss_scale.value.data!r}")
        if self.saturate.data:
            printer.print_string(", saturate")
        if not self.deterministic.data:
            printer.print_string(", nondeterministic")
        printer.print_string(">")

    @staticmethod
    def from_policy(p: NumericPolicy) -> NumericPolicyAttr:
        return NumericPolicyAttr(
            p.storage.ir_type,
            p.accum_dtype.ir_type,
            StringAttr(p.rounding),
            FloatAttr(p.loss_scale or 0.0, f64),
            IntAttr(int(p.saturate)),
            IntAttr(int(p.deterministic)),
        )

    def to_policy(self) -> NumericPolicy:
        storage = dtypes.from_ir_type(self.storage)
        acc = dtypes.from_ir_type(self.accum)
        return NumericPolicy(
            storage=storage,
            accum=None if acc == storage else acc,
            rounding=self.rounding.data,
            loss_scale=self.loss_scale.value.data or None,
            saturate=bool(self.saturate.data),
            deterministic=bool(self.deterministic.data),
        )


def tensor_type(shape: Sequence[int], policy: NumericPolicy | dtypes.DType) -> TensorType:
    """The IR tensor type for ``shape`` and a dtype or policy (policy as encoding)."""
    if isinstance(policy, dtypes.DType):
        policy = NumericPolicy(policy)
    if policy.is_default():
        return TensorType(policy.storage.ir_type, list(shape))
    return TensorType(policy.storage.ir_type, list(shape), NumericPolicyAttr.from_policy(policy))


def policy_of(t: Attribute) -> NumericPolicy:
    """The numeric policy of a tensor type (its encoding, or the plain element type)."""
    if isinstance(t, TensorType):
        if isinstance(t.encoding, NumericPolicyAttr):
            return t.encoding.to_policy()
        return NumericPolicy(dtypes.from_ir_type(t.element_type))
    return NumericPolicy(dtypes.from_ir_type(t))


def rounds_specially(t: Attribute) -> bool:
    """Whether storing into tensor type ``t`` rounds by its policy (stochastically, with
    saturation or a loss scale): such values keep their own op (no fusion hides them)."""
    return (
        isinstance(t, TensorType)
        and isinstance(t.encoding, NumericPolicyAttr)
        and t.encoding.to_policy().rounds_specially()
    )


def _parse_axis_list(parser: AttrParser) -> list[str]:
    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_identifier)


@irdl_attr_definition
class MeshAttr(ParametrizedAttribute):
    """A logical device mesh: ``#tessera.mesh<dp = 2, tp = 4>`` (axis order = major to minor)."""

    name = "tessera.mesh"

    axes: ArrayAttr[StringAttr]
    sizes: ArrayAttr[IntAttr]

    def verify(self) -> None:
        names = [a.data for a in self.axes.data]
        if len(names) != len(self.sizes.data):
            raise VerifyException("mesh needs one size per axis")
        if len(set(names)) != len(names):
            raise VerifyException(f"mesh axis names repeat: {names}")
        for n, s in zip(names, self.sizes.data):
            if s.data < 1:
                raise VerifyException(f"mesh axis '{n}' has size {s.data}; sizes must be >= 1")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        def entry() -> tuple[str, int]:
            k = parser.parse_identifier()
            parser.parse_punctuation("=")
            return k, parser.parse_integer()

        items = parser.parse_comma_separated_list(parser.Delimiter.ANGLE, entry)
        return (
            ArrayAttr([StringAttr(k) for k, _ in items]),
            ArrayAttr([IntAttr(v) for _, v in items]),
        )

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(
            "<"
            + ", ".join(f"{a.data} = {s.data}" for a, s in zip(self.axes.data, self.sizes.data))
            + ">"
        )

    @staticmethod
    def get(axes: dict[str, int] | Sequence[tuple[str, int]]) -> MeshAttr:
        items = list(axes.items()) if isinstance(axes, dict) else list(axes)
        return MeshAttr(
            ArrayAttr([StringAttr(k) for k, _ in items]), ArrayAttr([IntAttr(v) for _, v in items])
        )

    def as_dict(self) -> dict[str, int]:
        return {a.data: s.data for a, s in zip(self.axes.data, self.sizes.data)}


@irdl_attr_definition
class ShardSpecAttr(ParametrizedAttribute):
    """How a tensor is laid out over a mesh.

    ``#tessera.shard<[[tp], []]>``: dimension 0 split over mesh axis ``tp``, dimension 1
    whole. ``#tessera.shard<[[dp, tp], []]>`` splits dimension 0 over both axes
    (``dp`` major). ``#tessera.shard<[[], []]>`` is replicated. A trailing
    ``partial = sum over [tp]`` marks per-rank partial values awaiting a reduction.
    """

    name = "tessera.shard"

    split_axes: ArrayAttr[ArrayAttr[StringAttr]]
    partial_axes: ArrayAttr[StringAttr]
    partial_op: StringAttr

    def verify(self) -> None:
        seen: list[str] = []
        for dim in self.split_axes.data:
            for a in dim.data:
                if a.data in seen:
                    raise VerifyException(f"mesh axis '{a.data}' shards two tensor dimensions")
                seen.append(a.data)
        for a in self.partial_axes.data:
            if a.data in seen:
                raise VerifyException(f"mesh axis '{a.data}' is both split and partial")
        if self.partial_axes.data and self.partial_op.data not in REDUCTIONS:
            raise VerifyException(
                f"unknown partial reduction '{self.partial_op.data}'; valid: {', '.join(REDUCTIONS)}"
            )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        parser.parse_punctuation("<")
        dims = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: _parse_axis_list(parser)
        )
        partial: list[str] = []
        op = ""
        if parser.parse_optional_punctuation(",") is not None:
            parser.parse_keyword("partial")
            parser.parse_punctuation("=")
            op = parser.parse_identifier()
            parser.parse_keyword("over")
            partial = _parse_axis_list(parser)
        parser.parse_punctuation(">")
        return (
            ArrayAttr([ArrayAttr([StringAttr(a) for a in d]) for d in dims]),
            ArrayAttr([StringAttr(a) for a in partial]),
            StringAttr(op),
        )

    def print_parameters(self, printer: Printer) -> None:
        dims = ", ".join(
            "[" + ", ".join(a.data for a in d.data) + "]" for d in self.split_axes.data
        )
        s = f"<[{dims}]"
        if self.partial_axes.data:
            axes = ", ".join(a.data for a in self.partial_axes.data)
            s += f", partial = {self.partial_op.data} over [{axes}]"
        printer.print_string(s + ">")

    @staticmethod
    def get(
        split: Sequence[Sequence[str]], partial: Sequence[str] = (), op: str = "sum"
    ) -> ShardSpecAttr:
        return ShardSpecAttr(
            ArrayAttr([ArrayAttr([StringAttr(a) for a in d]) for d in split]),
            ArrayAttr([StringAttr(a) for a in partial]),
            StringAttr(op if partial else ""),
        )

    def splits(self) -> list[list[str]]:
        return [[a.data for a in d.data] for d in self.split_axes.data]

    def partial(self) -> list[str]:
        return [a.data for a in self.partial_axes.data]


@irdl_attr_definition
class SharedMemorySpaceAttr(ParametrizedAttribute):
    """Marks a memref as living in a CTA's shared memory: ``#tessera.smem``."""

    name = "tessera.smem"


Tessera = Dialect(
    "tessera",
    [],
    [NumericPolicyAttr, MeshAttr, ShardSpecAttr, SharedMemorySpaceAttr],
)
