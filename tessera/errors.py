"""Tessera's exception types and the user source location they report.

This module is the bottom of the package: it imports nothing of Tessera, and
every exception class Tessera defines derives from :class:`TesseraError`
(``except ts.TesseraError`` catches them all). Classes that were also raised as
a builtin kind keep that base too (``ShapeError`` is a ``ValueError``,
``CudaError`` a ``RuntimeError``), so existing ``except ValueError`` code keeps
working.

Errors about user code name the user's ``file:line`` (the innermost stack
frame outside the ``tessera`` package), in the guide's style::

    matmul inner dimensions differ: left K=128, right K=256 (model.py:12)
"""

from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class TesseraError(Exception):
    """Base of every error Tessera raises."""


class ShapeError(TesseraError, ValueError):
    """Operand shapes that an operator does not accept."""


class TesseraTypeError(TesseraError, TypeError):
    """A wrong dtype, numeric policy or Python value."""


class TraceError(TesseraError):
    """A construct that cannot be traced into Graph IR (e.g. Python control flow on a tensor)."""


def user_location() -> str:
    """``file:line`` of the innermost frame outside the tessera package ("" if none)."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE_DIR + os.sep):
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def located(msg: str, loc: str | None = None) -> str:
    """``msg (file:line)`` with the user's location (computed if not given)."""
    loc = user_location() if loc is None else loc
    return f"{msg} ({loc})" if loc else msg


class DataError(TesseraError, ValueError):
    """Argument values that an operator cannot compute with, found while running
    (malformed sparse indices, a singular triangular matrix, an index out of range in
    a kernel)."""


RUNTIME_ERRORS: tuple[type[Exception], ...] = (
    ValueError, ZeroDivisionError, IndexError, ArithmeticError
)
"""The exception types an interpreter's op implementations raise for bad data."""


def data_error(e: Exception, what: str = "") -> TesseraError:
    """A one-line :class:`DataError` naming the user's ``file:line`` from an error raised
    while running ``what``; an error made here before is returned as it is."""
    if getattr(e, "user_location", None) is not None:
        return e  # type: ignore[return-value]
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    msg = msg.removeprefix("Operation does not verify: ")
    if what and not msg.startswith(("tgraph.", "ttile.", "arith.", "memref.", "func.", what)):
        msg = f"{what}: {msg}"
    cls = type(e) if type(e) in (ShapeError, TesseraTypeError) else DataError
    loc = user_location()
    err = cls(located(msg, loc))
    err.user_location = loc  # type: ignore[attr-defined]
    return err
