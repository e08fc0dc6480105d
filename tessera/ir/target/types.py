"""The types of Target IR values: registers and immediates (``!ttarget.reg``) and
kernel parameters (``!ttarget.param<u64>``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException


@irdl_attr_definition
class RegisterType(ParametrizedAttribute, TypeAttribute):
    """A PTX operand: a virtual register (``ttarget.reg``) or an immediate (``ttarget.imm``)."""

    name = "ttarget.reg"


@irdl_attr_definition
class ParamType(ParametrizedAttribute, TypeAttribute):
    """A kernel parameter in the ``.param`` state space: ``!ttarget.param<u64>``."""

    name = "ttarget.param"

    ty: StringAttr

    PARAM_TYPES: ClassVar[frozenset[str]] = frozenset(
        {"u32", "s32", "u64", "s64", "b32", "b64", "f32", "f64", "tmap"}
    )

    def __init__(self, ty: str | StringAttr):
        super().__init__(StringAttr(ty) if isinstance(ty, str) else ty)

    def verify(self) -> None:
        if self.ty.data not in self.PARAM_TYPES:
            raise VerifyException(
                f"!ttarget.param: unsupported parameter type '{self.ty.data}'; valid: "
                + ", ".join(sorted(self.PARAM_TYPES))
            )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        parser.parse_punctuation("<")
        ty = parser.parse_identifier()
        parser.parse_punctuation(">")
        return (StringAttr(ty),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.ty.data}>")
