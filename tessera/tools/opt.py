"""``tessera-opt``: run pass pipelines over Tessera IR text, like ``mlir-opt``.

It is xDSL's opt driver with Tessera's dialects and passes registered (and all
of xDSL's), with mlir-opt's habits:

* ``-`` as the input file reads stdin, ``-o -`` writes stdout;
* ``--split-input-file`` cuts the input at ``// -----`` lines and processes
  every chunk, even after one fails; the outputs are joined by ``// -----`` and
  the exit status is 1 if any chunk failed;
* ``--verify-diagnostics`` checks the run's diagnostics against the input's
  ``// expected-error {{...}}`` annotations (see
  :mod:`tessera.tools.expected_diagnostics`) and exits 1 on a mismatch;
* ``--version`` prints Tessera's version.

Every error a user can cause is one line ``file:line:col: error: message`` on
stderr and exit status 1, never a traceback. The input is verified (op
verifiers and SSA dominance) before any pass runs.
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from io import BytesIO
from typing import IO, ClassVar

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.utils.lexer import Span
from xdsl.xdsl_opt_main import xDSLOptMain

from tessera.ir.diagnostics import (
    LocatedError,
    LocatingParser,
    located_parse_error,
    verify_located,
)
from tessera.options import CompileOptions
from tessera.tools.expected_diagnostics import Diagnostic, check, parse_expected
from tessera.version import __version__

# Errors a pass raises on input it cannot handle: the user's input, not a bug.
# (PassFailedException is a DiagnosticException; a lowering with no rule for an op
# raises NotImplementedError naming it; TesseraError subclasses ValueError/TypeError or not.)
USER_ERRORS: tuple[type[BaseException], ...] = (
    LocatedError,
    ParseError,
    DiagnosticException,
    ValueError,
    NotImplementedError,
)

_SYMBOL_REF = re.compile(r"@([A-Za-z_][\w$.]*)")
_OP_NAME = re.compile(r"\b[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_.]*\b")
_SPLIT = re.compile(rb"^// -----.*$", re.M)


def user_error_types() -> tuple[type[BaseException], ...]:
    from tessera.errors import TesseraError

    return (*USER_ERRORS, TesseraError)


def split_chunks(data: bytes) -> list[tuple[bytes, int]]:
    """``data`` cut at its ``// -----`` lines: each chunk with the number of lines before it."""
    chunks: list[tuple[bytes, int]] = []
    start, offset = 0, 0
    for m in _SPLIT.finditer(data):
        chunks.append((data[start : m.start()], offset))
        offset += data.count(b"\n", start, m.end())
        start = m.end()
    chunks.append((data[start:], offset))
    return chunks


class TesseraOptMain(xDSLOptMain):
    """xDSL's opt main with Tessera registered and mlir-opt's diagnostics and habits."""

    version_format: ClassVar[str] = (
        f"tessera-opt from Tessera version {__version__} (xDSL version {{xdsl_version}})"
    )

    def __init__(self, args: Sequence[str] | None = None):
        self._line_offset = 0
        self._places: list[_OpPlace] = []
        super().__init__(description=self._description(), args=args)

    @staticmethod
    def _description() -> str:
        from tessera.passes import ALL_PASSES

        names = ", ".join(sorted(ALL_PASSES)) or "(none)"
        return (
            "Tessera optimizer driver: parses Tessera IR (tgraph, ttile, ttarget and "
            f"xDSL's dialects), runs -p pipelines, prints the result. Tessera passes: {names}. "
            "xDSL's passes (canonicalize, cse, dce, ...) are available too. The input file "
            "'-' (or none) is stdin; '-o -' is stdout."
        )

    def register_all_dialects(self) -> None:
        from tessera.universe import ALL_DIALECTS

        super().register_all_dialects()
        for name, factory in ALL_DIALECTS.items():
            if name not in self.ctx.registered_dialect_names:
                self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        from tessera.passes import ALL_PASSES

        super().register_all_passes()
        for name, factory in ALL_PASSES.items():
            self.available_passes.setdefault(name, factory)

    def setup_pipeline(self) -> None:
        super().setup_pipeline()
        if self.args.print_between_passes or self.args.time_passes:
            from tessera.profiler.pipeline import expand_pipeline

            self.pipeline = expand_pipeline(self.pipeline)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.formatter_class = argparse.RawDescriptionHelpFormatter
        super().register_all_arguments(arg_parser)
        for action in arg_parser._actions:
            if action.dest == "verify_diagnostics":
                action.help = (
                    "check the diagnostics against the input's // expected-error {{...}} "
                    "(expected-warning, @+N, @-N, @above, @below, @unknown) annotations; "
                    "exit 1 on an unexpected or a missing diagnostic"
                )
            elif action.dest == "split_input_file":
                action.help = (
                    "cut the input at '// -----' lines and process every chunk on its own; "
                    "exit 1 if any chunk failed"
                )

    def register_all_frontends(self) -> None:
        super().register_all_frontends()

        def parse_mlir(io: IO[bytes]) -> ModuleOp:
            parser = LocatingParser(self.ctx, io.read(), self.get_input_name())
            module = parser.parse_module(not self.args.no_implicit_module)
            self._places = _op_places(module, parser)
            if not self.args.disable_verify:
                verify_located(module, parser, self._line_offset)
            return module

        self.available_frontends["mlir"] = parse_mlir

    def get_input_stream(self) -> tuple[IO[bytes], str]:
        if self.args.input_file in (None, "-"):
            return sys.stdin.buffer, "mlir"
        return super().get_input_stream()

    def get_input_name(self) -> str:
        return "<stdin>" if self.args.input_file in (None, "-") else self.args.input_file

    def prepare_output(self) -> IO[str]:
        if self.args.output_file in (None, "-"):
            return sys.stdout
        return super().prepare_output()

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0):
        self._line_offset = start_offset
        self._places = []
        return super().parse_chunk(chunk, file_extension, start_offset)

    # --- running ---------------------------------------------------------------------

    def run(self) -> int:  # type: ignore[override]
        """Process every chunk; the exit status (0 or 1)."""
        stream, extension = self.get_input_stream()
        try:
            data = stream.read()
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
        if self.args.frontend:
            extension = self.args.frontend
        if extension not in self.available_frontends:
            raise LocatedError(self.get_input_name(), 1, 1,
                               f"unrecognized file extension '{extension}'")
        chunks = split_chunks(data) if self.args.split_input_file else [(data, 0)]
        output = self.prepare_output()
        failed = False
        try:
            for i, (chunk, offset) in enumerate(chunks):
                if i > 0:
                    output.write("// -----\n")
                text, diagnostics = self._run_chunk(chunk, extension, offset)
                output.write(text)
                output.flush()
                if self.args.verify_diagnostics:
                    expected = parse_expected(chunk.decode("utf-8", "replace"), offset)
                    diagnostics = check(diagnostics, expected, self.get_input_name())
                for diag in diagnostics:
                    print(diag, file=sys.stderr)
                    failed = failed or diag.severity == "error"
        finally:
            if output is not sys.stdout:
                output.close()
        return 1 if failed else 0

    def _run_chunk(self, chunk: bytes, extension: str, offset: int) -> tuple[str, list[Diagnostic]]:
        """The printed result of one chunk (empty if it failed) and its diagnostics."""
        diagnostics: list[Diagnostic] = []
        name = self.get_input_name()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                module = self.parse_chunk(BytesIO(chunk), extension, offset)
                text = ""
                if module is not None:
                    self.apply_passes(module)
                    text = self.output_resulting_program(module)
            except user_error_types() as e:
                diagnostics.append(self.diagnostic_for(e, offset))
                text = ""
            except RecursionError:
                diagnostics.append(Diagnostic("error", "input nested too deeply", name, 1 + offset, 1))
                text = ""
            except Exception as e:  # an internal error: still one line, with a hint to debug
                if CompileOptions.from_env(device=None).debug:
                    raise
                diagnostics.append(Diagnostic(
                    "error",
                    f"internal error: {type(e).__name__}: {_first_line(e)} "
                    "(set TESSERA_DEBUG=1 for a traceback)",
                    name,
                ))
                text = ""
        warned = [Diagnostic("warning", _first_line(w.message), name) for w in caught]
        return text, warned + diagnostics

    def diagnostic_for(self, e: BaseException, offset: int) -> Diagnostic:
        """The diagnostic of the user error ``e`` in a chunk that starts after ``offset`` lines."""
        name = self.get_input_name()
        if isinstance(e, ParseError):
            e = located_parse_error(e, offset)
        if isinstance(e, LocatedError):
            return Diagnostic("error", e.msg.splitlines()[0] if e.msg else "error",
                              e.file, e.line, e.col)
        message = _first_line(e)
        # A pass error names the op and the function it failed in: report it there; one
        # about the whole module, at the module (the chunk's first op), as MLIR does.
        span = locate_message(message, self._places)
        if span is None and self._places:
            span = self._places[0].span
        if span is None:
            return Diagnostic("error", message, name, offset + 1, 1)
        loc = span.get_location()
        return Diagnostic("error", message, name, loc.line + offset, loc.col)


def _first_line(e: object) -> str:
    text = str(e)
    return text.splitlines()[0] if text.strip() else type(e).__name__


@dataclass(frozen=True)
class _OpPlace:
    """Where an op of the input was: its name, the symbol it is in, its span."""

    name: str
    symbol: str | None
    span: Span


def _op_places(module: ModuleOp, parser: LocatingParser) -> list[_OpPlace]:
    """The ops of ``module`` that came from the text, in order, with their symbols."""
    places: list[_OpPlace] = []

    def visit(op: Operation, symbol: str | None) -> None:
        sym = op.properties.get("sym_name") or op.attributes.get("sym_name")
        if isinstance(getattr(sym, "data", None), str):
            symbol = sym.data  # type: ignore[union-attr]
        span = parser.op_spans.get(id(op))
        if span is not None:
            places.append(_OpPlace(op.name, symbol, span))
        for region in op.regions:
            for block in region.blocks:
                for child in block.ops:
                    visit(child, symbol)

    visit(module, None)
    return places


def locate_message(message: str, places: list[_OpPlace]) -> Span | None:
    """Where a pass error that names an op and/or a symbol (``math.exp in kernel @k``)
    happened: the first such op in that symbol, else the symbol, else the first such op."""
    symbols = {p.symbol for p in places}
    symbol = next((m.group(1) for m in _SYMBOL_REF.finditer(message) if m.group(1) in symbols),
                  None)
    op_names = {p.name for p in places}
    named = [m.group(0) for m in _OP_NAME.finditer(message) if m.group(0) in op_names]
    for name in named:
        for place in places:
            if place.name == name and (symbol is None or place.symbol == symbol):
                return place.span
    if symbol is not None:
        # The symbol's own op is the first place in it.
        return next(p.span for p in places if p.symbol == symbol)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run tessera-opt with ``argv`` (default: the command line); the exit status."""
    try:
        return TesseraOptMain(args=argv).run()
    except LocatedError as e:
        print(str(e).splitlines()[0], file=sys.stderr)
    except ParseError as e:
        print(str(located_parse_error(e)).splitlines()[0], file=sys.stderr)
    except ArgSpecParseError as e:
        print(f"tessera-opt: error: {_first_line(e)}", file=sys.stderr)
    except (DiagnosticException, ValueError, NotImplementedError, OSError) as e:
        print(f"tessera-opt: error: {_first_line(e)}", file=sys.stderr)
    except Exception as e:  # an internal error: still one line, with a hint to debug
        if CompileOptions.from_env(device=None).debug:
            raise
        print(
            f"tessera-opt: internal error: {type(e).__name__}: {_first_line(e)} "
            "(set TESSERA_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
    return 1


if __name__ == "__main__":
    sys.exit(main())
