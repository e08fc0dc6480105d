"""``tessera-opt``: run pass pipelines over Tessera IR text, like ``mlir-opt``.

It is xDSL's opt driver with Tessera's dialects and passes registered (and all
of xDSL's), and with diagnostics that name the place: a malformed or invalid
input prints ``file:line:col: error: ...`` and exits 1, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import IO

from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from tessera.ir.diagnostics import (
    LocatedError,
    LocatingParser,
    located_parse_error,
    verify_located,
)
from tessera.options import CompileOptions


class TesseraOptMain(xDSLOptMain):
    """xDSL's opt main with Tessera registered and located, one-line diagnostics."""

    def __init__(self, args: Sequence[str] | None = None):
        self._line_offset = 0
        super().__init__(description=self._description(), args=args)

    @staticmethod
    def _description() -> str:
        from tessera.passes import ALL_PASSES

        names = ", ".join(sorted(ALL_PASSES)) or "(none)"
        return (
            "Tessera optimizer driver: parses Tessera IR (tgraph, ttile, ttarget and "
            f"xDSL's dialects), runs -p pipelines, prints the result. Tessera passes: {names}. "
            "xDSL's passes (canonicalize, cse, dce, ...) are available too."
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

    def register_all_frontends(self) -> None:
        super().register_all_frontends()

        def parse_mlir(io: IO[bytes]):
            parser = LocatingParser(self.ctx, io.read(), self.get_input_name())
            module = parser.parse_module(not self.args.no_implicit_module)
            if not self.args.disable_verify:
                verify_located(module, parser, self._line_offset)
            return module

        self.available_frontends["mlir"] = parse_mlir

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0):
        self._line_offset = start_offset
        try:
            return super().parse_chunk(chunk, file_extension, start_offset)
        except LocatedError as e:
            if self.args.verify_diagnostics:
                raise DiagnosticException(e.msg) from None
            raise


def main(argv: Sequence[str] | None = None) -> int:
    try:
        TesseraOptMain(args=argv).run()
    except LocatedError as e:
        print(str(e).splitlines()[0], file=sys.stderr)
        return 1
    except ParseError as e:
        print(str(located_parse_error(e)).splitlines()[0], file=sys.stderr)
        return 1
    except ArgSpecParseError as e:
        print(f"tessera-opt: error: {e}", file=sys.stderr)
        return 1
    except (DiagnosticException, ValueError, NotImplementedError) as e:
        # PassFailedException is a DiagnosticException; a lowering that has no rule for an
        # op raises NotImplementedError naming it: both are the user's input, not a bug.
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"tessera-opt: error: {first}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"tessera-opt: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # an internal error: still one line, with a hint to debug
        if CompileOptions.from_env(device=None).debug:
            raise
        print(
            f"tessera-opt: internal error: {type(e).__name__}: {e} "
            "(set TESSERA_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
