"""``tgraph`` indexing ops: ``take_along_axis`` (a gather by integer indices)."""

from __future__ import annotations

from xdsl.dialects.builtin import I64, IntegerAttr, IntegerType, i64
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from tessera.ir.graph.base import (
    _FN,
    TensorT,
    _check_same_elem,
    _is_float,
    _norm_axes,
    elem_of,
    fmt_shape,
    shape_of,
)


@irdl_op_definition
class TakeAlongAxisOp(IRDLOperation):
    """``result[i_0, ..., i_k] = input[i_0, ..., indices[i_0, ..., i_k], ..., i_k]`` with the
    index in dimension ``axis``: ``torch.gather(input, axis, indices)`` and
    ``numpy.take_along_axis``.

    ``indices`` (``i32`` or ``i64``) has the input's rank, and the result has the shape of
    ``indices`` and the element type of ``input`` (a float type). Outside ``axis`` the
    indices' sizes are at most the input's (torch's rule: the first ones of each dim are
    read). An index outside ``[0, input.shape[axis])`` (negative ones too, as torch) reads
    nothing: its result element is NaN, on the GPU and in the reference interpreter alike
    (torch raises an error instead), so a bad index is never a silent, plausible value.
    """

    name = "tgraph.take_along_axis"
    input = operand_def(TensorT)
    indices = operand_def(TensorT)
    axis = prop_def(IntegerAttr[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input `,` $indices `axis` `=` $axis " + _FN

    def __init__(self, input: SSAValue, indices: SSAValue, axis: int, result_type: Attribute):
        super().__init__(
            operands=[input, indices],
            result_types=[result_type],
            properties={"axis": IntegerAttr(axis, i64)},
        )

    def axis_index(self) -> int:
        """``axis`` as a non-negative dimension of the input."""
        return self.axis.value.data % max(len(shape_of(self.input)), 1)

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        if not _is_float(elem_of(self.input)):
            raise VerifyException(
                f"{self.name}: input element type {elem_of(self.input)} is not a float type"
            )
        it = elem_of(self.indices)
        if not isinstance(it, IntegerType) or it.width.data not in (32, 64):
            raise VerifyException(f"{self.name}: indices must be i32 or i64, got {it}")
        s, ix = shape_of(self.input), shape_of(self.indices)
        if len(s) == 0 or len(ix) != len(s):
            raise VerifyException(
                f"{self.name}: indices {fmt_shape(ix)} and input {fmt_shape(s)} need the same "
                "rank (at least 1)"
            )
        (ax,) = _norm_axes([self.axis.value.data], len(s), self.name)
        for d, (a, b) in enumerate(zip(ix, s)):
            if d != ax and a > b:
                raise VerifyException(
                    f"{self.name}: indices {fmt_shape(ix)} larger than input {fmt_shape(s)} in dim {d}"
                )
        if shape_of(self.result) != ix:
            raise VerifyException(
                f"{self.name}: result shape {fmt_shape(shape_of(self.result))} is not the "
                f"indices' {fmt_shape(ix)}"
            )
