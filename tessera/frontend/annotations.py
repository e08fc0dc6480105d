"""``ts.Tensor[...]`` annotations, seen from the front end: the classes are defined with
the types they describe, in :mod:`tessera.ir.annotations`."""

from tessera.ir.annotations import (
    Tensor,
    TensorAnnotation,
    as_policy_or_none,
    bind_shape,
    shape_from_annotation,
)

__all__ = ["Tensor", "TensorAnnotation", "as_policy_or_none", "bind_shape", "shape_from_annotation"]
