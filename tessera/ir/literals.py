"""Dense float literals that print in a form that parses back to the same bits.

xDSL prints an element of a float ``dense<...>`` literal that has no exact
decimal form of its own (``inf``, ``-inf``, NaN, and f32/f64 integers too long
for the short form) as a hexadecimal bit pattern: ``dense<0xFF800000> :
tensor<f32>``. MLIR reads such an element as the bits of the float; xDSL's
parser reads it as the integer 4286578688 and converts that to a float, so a
module printed and parsed again (the program cache, ``tessera-opt`` pipelines)
would compute with another constant.

:func:`print_without_type` prints such an attribute in the hex-string form
``dense<"0x0000807F">`` instead: the raw little-endian bytes of every element,
which MLIR and xDSL both read back bit for bit. Every other literal prints as
before. Importing :mod:`tessera.ir.graph` installs it on xDSL's
``DenseIntOrFPElementsAttr``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
from xdsl.printer import Printer

_BARE_HEX = re.compile(r'(?<!")\b0x[0-9A-Fa-f]+')
"""A hexadecimal element token that is not the start of a hex-string literal."""

_xdsl_print_without_type: Callable[[DenseIntOrFPElementsAttr, Printer], None] = (
    DenseIntOrFPElementsAttr.print_without_type
)


def print_without_type(attr: DenseIntOrFPElementsAttr, printer: Printer) -> None:
    """Print ``dense<...>`` as xDSL does, unless an element would print as a bare hex
    bit pattern: then print all elements as one hex string of their bytes."""
    probe = Printer(stream=io.StringIO())
    _xdsl_print_without_type(attr, probe)
    text = probe.stream.getvalue()  # type: ignore[union-attr]
    if _BARE_HEX.search(text):
        text = f'dense<"0x{attr.data.data.hex().upper()}">'
    printer.print_string(text)


def install() -> None:
    """Make every ``DenseIntOrFPElementsAttr`` print with :func:`print_without_type`."""
    DenseIntOrFPElementsAttr.print_without_type = print_without_type  # type: ignore[method-assign]


__all__ = ["install", "print_without_type"]
