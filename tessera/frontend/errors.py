"""The front end's view of :mod:`tessera.errors` (kept so ``tessera.frontend.errors``
imports keep working; the classes are defined once, at the bottom of the package)."""

from tessera.errors import (
    ShapeError,
    TesseraError,
    TesseraTypeError,
    TraceError,
    located,
    user_location,
)

__all__ = ["ShapeError", "TesseraError", "TesseraTypeError", "TraceError", "located", "user_location"]
