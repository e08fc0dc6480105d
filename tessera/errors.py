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
