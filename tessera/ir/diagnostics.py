"""Parsing and verification with source locations.

xDSL's parser reports syntax errors with a line and column, but verifier
errors only name the op. :class:`LocatingParser` records where each op starts
in the text, and :func:`verify_located` verifies op by op (innermost first), so
an invalid op is reported as ``file:line:col: error: message``.
"""

from __future__ import annotations

import re
import struct
from collections import defaultdict
from dataclasses import dataclass
from math import prod

from xdsl.context import Context
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    ComplexType,
    IntegerType,
    ModuleOp,
    Signedness,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import AttributeInvT
from xdsl.parser import AttrParser, Parser, UnresolvedOperand
from xdsl.parser.generic_parser import ParserState
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Input, Span
from xdsl.utils.mlir_lexer import MLIRLexer

from tessera.errors import TesseraError
from tessera.ir.dominance import find_dominance_violation

_FLOAT_BITS = {16: "<e", 32: "<f", 64: "<d"}


@dataclass
class _LiteralElement(AttrParser._TensorLiteralElement):
    """A dense literal element read as MLIR reads it.

    A hexadecimal literal of a float element type is the float's bit pattern (how
    non-finite values print: ``dense<0xFF800000> : tensor<f32>`` is -inf), not an
    integer to convert; an out-of-range or complex element is a located error.
    """

    def to_type(self, parser: AttrParser, type: Attribute):
        text = self.span.text.lstrip("-")
        if isinstance(type, AnyFloat) and text[:2] in ("0x", "0X") and isinstance(self.value, int):
            return _float_from_bits(parser, self, type)
        if isinstance(type, ComplexType):
            if not isinstance(self.value, tuple):
                parser.raise_error("expected a complex literal (re, im)", at_position=self.span)
            if not isinstance(type.element_type, AnyFloat | IntegerType):
                parser.raise_error(f"unsupported complex element type {type.element_type}",
                                   at_position=self.span)
        if isinstance(type, IntegerType) and isinstance(self.value, int):
            low, high = _int_range(type)
            if not low <= self.value <= high:
                parser.raise_error(
                    f"integer literal {self.value} does not fit in {type}", at_position=self.span
                )
        return super().to_type(parser, type)  # type: ignore[arg-type]


def _int_range(type: IntegerType) -> tuple[int, int]:
    width = type.width.data
    if type.signedness.data == Signedness.UNSIGNED:
        return 0, (1 << width) - 1
    if width == 1:
        return -1, 1
    # MLIR accepts signless literals in the signed or the unsigned range.
    low = -(1 << (width - 1))
    high = (1 << width) - 1 if type.signedness.data == Signedness.SIGNLESS else -low - 1
    return low, high


def _float_from_bits(parser: AttrParser, element: AttrParser._TensorLiteralElement,
                     type: Attribute) -> float:
    width = type.bitwidth if isinstance(type, AnyFloat) else 0
    bits = int(element.value)  # type: ignore[arg-type]
    if element.is_negative or bits >= 1 << width:
        parser.raise_error(f"hexadecimal float literal does not fit in {type}",
                           at_position=element.span)
    if type == BFloat16Type():
        return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
    fmt = _FLOAT_BITS.get(width)
    if fmt is None:
        parser.raise_error(f"hexadecimal literals of {type} are not supported",
                           at_position=element.span)
    return struct.unpack(fmt, bits.to_bytes(width // 8, "little"))[0]


# The most elements a dense literal may describe: a splat of a larger type would be
# expanded element by element in memory.
MAX_DENSE_ELEMENTS = 1 << 22


class _Lexer(MLIRLexer):
    """xDSL's lexer with a string-literal pattern that runs in linear time.

    xDSL's pattern nests a ``+`` inside a ``*``, so an unterminated string makes
    the regex engine try every way of splitting it: time doubles per character.
    """

    _unescaped_characters_regex = re.compile(
        r'"(?:[^"\\\n\v\f]|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*"'
    )


def decode_source(data: bytes, name: str) -> str:
    """``data`` as UTF-8 text; an invalid byte is a ParseError at its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        text = data.decode("utf-8", "replace")
        at = len(data[: e.start].decode("utf-8"))
        raise ParseError(
            Span(at, at + 1, Input(text, name)), f"invalid UTF-8 byte 0x{data[e.start]:02x}"
        ) from None


class LocatingParser(Parser):
    """A Parser that remembers the source span where each operation starts.

    It also reads the input as MLIR does where xDSL differs: see :class:`_Lexer`,
    :class:`_LiteralElement` and :data:`MAX_DENSE_ELEMENTS`.
    """

    def __init__(self, ctx: Context, input: str | bytes, name: str = "<unknown>"):
        text = decode_source(input, name) if isinstance(input, bytes) else input
        # Parser.__init__, with the linear-time lexer.
        super(Parser, self).__init__(ParserState(_Lexer(Input(text, name))), ctx)
        self.ssa_values = {}
        self.blocks = {}
        self.forward_block_references = defaultdict(list)
        self.forward_ssa_references = {}
        self.op_spans: dict[int, Span] = {}
        self._first_uses: dict[str, Span] = {}

    def parse_operation(self) -> Operation:
        tok = self._current_token
        try:
            op = super().parse_operation()
        except VerifyException as e:
            # An attribute or type failed its verifier while being parsed: report it at
            # the op that contains it rather than without a location.
            raise ParseError(tok.span, _verify_message(e)) from None
        except (OverflowError, struct.error, ValueError) as e:
            # A literal the attribute that holds it rejects (out of range, say).
            raise ParseError(tok.span, _verify_message(e)) from None
        self.op_spans[id(op)] = tok.span
        return op

    def resolve_operand(self, operand: UnresolvedOperand, type: AttributeInvT) -> SSAValue:
        if operand.operand_name not in self.ssa_values:
            self._first_uses.setdefault(operand.operand_name, operand.span)
        return super().resolve_operand(operand, type)

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        # xDSL reports values that are never defined at the end of the input: report
        # the first use of the first one instead.
        try:
            return super().parse_module(allow_implicit_module)
        except ParseError as e:
            if not e.msg.startswith("values used but not defined") or not self.forward_ssa_references:
                raise
            name = next(iter(self.forward_ssa_references))
            span = self._first_uses.get(name, e.span)
            raise ParseError(span, f"use of undefined value '%{name}'") from None

    def _parse_dense_literal_type(self):
        start = self._current_token.span
        type = super()._parse_dense_literal_type()
        count = prod(type.get_shape())
        if count > MAX_DENSE_ELEMENTS:
            raise ParseError(
                Span(start.start, self._current_token.span.start, start.input),
                f"dense literal of {count} elements: at most {MAX_DENSE_ELEMENTS} are supported",
            )
        return type

    def _parse_tensor_literal_element(self) -> AttrParser._TensorLiteralElement:
        element = super()._parse_tensor_literal_element()
        return _LiteralElement(element.is_negative, element.value, element.span)

    def _get_op_by_name(self, name: str) -> type[Operation]:
        # xDSL reports an unknown op at the token after its name; point at the name.
        try:
            return super()._get_op_by_name(name)
        except ParseError as e:
            text = self.lexer.input.content
            end = self._current_token.span.start
            start = text.rfind(name, 0, end)
            if start < 0:
                raise
            if start > 0 and text[start - 1] == '"':
                start -= 1
            raise ParseError(Span(start, start + len(name), self.lexer.input), e.msg) from None

    def span_of(self, op: Operation) -> Span | None:
        """Where ``op`` (or, for an op the parser did not create, its nearest parent) starts."""
        current: Operation | None = op
        while current is not None:
            span = self.op_spans.get(id(current))
            if span is not None:
                return span
            current = current.parent_op()
        return None


@dataclass
class LocatedError(TesseraError):
    """An error at a place in the source: printed as ``file:line:col: error: message``."""

    file: str
    line: int
    col: int
    msg: str
    context: str = ""

    def __str__(self) -> str:
        head = f"{self.file}:{self.line}:{self.col}: error: {self.msg}"
        return head + ("\n" + self.context if self.context else "")


def _context(span: Span) -> str:
    text = span.print_with_context()
    return "\n".join(text.splitlines()[1:])


def located_parse_error(e: ParseError, line_offset: int = 0) -> LocatedError:
    loc = e.span.get_location()
    return LocatedError(loc.file, loc.line + line_offset, loc.col, e.msg, _context(e.span))


def _verify_message(e: Exception) -> str:
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return msg.removeprefix("Operation does not verify: ")


def verify_located(module: ModuleOp, parser: LocatingParser, line_offset: int = 0) -> None:
    """Verify ``module`` and its SSA dominance; on failure raise a LocatedError at the
    innermost failing op."""
    try:
        module.verify()
    except (DiagnosticException, ValueError) as first:
        failure: Exception = first
    else:
        violation = find_dominance_violation(module)
        if violation is None:
            return
        span = parser.span_of(violation.op)
        loc = span.get_location() if span is not None else None
        raise LocatedError(
            loc.file if loc else parser.lexer.input.name,
            (loc.line if loc else 1) + line_offset,
            loc.col if loc else 1,
            f"'{violation.op.name}' {violation.message}",
            _context(span) if span is not None else "",
        ) from None
    # The first failing op in source order, nested ops before the ops that hold them.
    for op in module.walk(region_first=True):
        try:
            op.verify(verify_nested_ops=False)
        except (DiagnosticException, ValueError) as e:
            span = parser.op_spans.get(id(op))
            if span is None:
                continue
            loc = span.get_location()
            raise LocatedError(
                loc.file, loc.line + line_offset, loc.col, _verify_message(e), _context(span)
            ) from None
    raise LocatedError(parser.lexer.input.name, 1, 1, _verify_message(failure))


def parse_module(ctx: Context, text: str, name: str = "<string>") -> ModuleOp:
    """Parse and verify ``text``; errors come back as LocatedError."""
    parser = LocatingParser(ctx, text, name)
    try:
        module = parser.parse_module()
    except ParseError as e:
        raise located_parse_error(e) from None
    verify_located(module, parser)
    return module
