"""Parsing and verification with source locations.

xDSL's parser reports syntax errors with a line and column, but verifier
errors only name the op. :class:`LocatingParser` records where each op starts
in the text, and :func:`verify_located` verifies op by op (innermost first), so
an invalid op is reported as ``file:line:col: error: message``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Span

from tessera.errors import TesseraError


class LocatingParser(Parser):
    """A Parser that remembers the source span where each operation starts."""

    def __init__(self, ctx: Context, input: str | bytes, name: str = "<unknown>"):
        super().__init__(ctx, input, name)
        self.op_spans: dict[int, Span] = {}

    def parse_operation(self) -> Operation:
        tok = self._current_token
        try:
            op = super().parse_operation()
        except VerifyException as e:
            # An attribute or type failed its verifier while being parsed: report it at
            # the op that contains it rather than without a location.
            raise ParseError(tok.span, _verify_message(e)) from None
        self.op_spans[id(op)] = tok.span
        return op


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
    """Verify ``module``; on failure raise a LocatedError at the innermost failing op."""
    try:
        module.verify()
        return
    except (DiagnosticException, ValueError) as first:
        failure: Exception = first
    for op in reversed(list(module.walk())):
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
