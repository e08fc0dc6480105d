"""The front end's view of :mod:`tessera.errors` (kept so ``tessera.frontend.errors``
imports keep working; the classes are defined once, at the bottom of the package)."""

from tessera.errors import (
    RUNTIME_ERRORS,
    DataError,
    ShapeError,
    TesseraError,
    TesseraTypeError,
    TraceError,
    data_error,
    located,
    user_location,
)

__all__ = [
    "RUNTIME_ERRORS", "DataError", "ShapeError", "TesseraError", "TesseraTypeError", "TraceError",
    "data_error", "located", "user_location",
]
