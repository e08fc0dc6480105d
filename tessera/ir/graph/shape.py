"""``tgraph`` shape ops and constants: ``transpose``, ``reshape``, ``broadcast``, ``slice``,
``reverse``, ``concat``, ``constant``."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from tessera.ir.graph.base import (
    _FN,
    TensorT,
    _check_same_elem,
    _check_shape,
    _norm_axes,
    broadcast_shapes,
    fmt_shape,
    shape_of,
)

# --------------------------------------------------------------------------- shape ops


@irdl_op_definition
class TransposeOp(IRDLOperation):
    """Permute dimensions: result dim i is input dim ``permutation[i]``."""

    name = "tgraph.transpose"
    input = operand_def(TensorT)
    permutation = prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input `permutation` `=` $permutation " + _FN

    def __init__(self, input: SSAValue, perm: Sequence[int], result_type: Attribute):
        super().__init__(
            operands=[input],
            result_types=[result_type],
            properties={"permutation": DenseArrayBase.from_list(i64, list(perm))},
        )

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        p = list(self.permutation.get_values())
        s = shape_of(self.input)
        if sorted(p) != list(range(len(s))):
            raise VerifyException(
                f"{self.name}: permutation {p} is not a permutation of {len(s)} dims"
            )
        _check_shape(self, "result", shape_of(self.result), [s[i] for i in p])


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """Same elements in row-major order, new shape (element counts must match)."""

    name = "tgraph.reshape"
    input = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input " + _FN

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        a, b = shape_of(self.input), shape_of(self.result)
        na = nb = 1
        for d in a:
            na *= d
        for d in b:
            nb *= d
        if na != nb:
            raise VerifyException(
                f"{self.name}: cannot reshape {fmt_shape(a)} ({na} elements) to "
                f"{fmt_shape(b)} ({nb} elements)"
            )


@irdl_op_definition
class BroadcastOp(IRDLOperation):
    """Broadcast to the result shape with numpy rules."""

    name = "tgraph.broadcast"
    input = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input " + _FN

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        a, b = shape_of(self.input), shape_of(self.result)
        if len(a) > len(b) or broadcast_shapes(a, b) != tuple(b):
            raise VerifyException(
                f"{self.name}: cannot broadcast {fmt_shape(a)} to {fmt_shape(b)}"
            )


@irdl_op_definition
class SliceOp(IRDLOperation):
    """Static strided slice: ``input[start:limit:stride]`` per dimension."""

    name = "tgraph.slice"
    input = operand_def(TensorT)
    start = prop_def(DenseArrayBase[I64])
    limit = prop_def(DenseArrayBase[I64])
    stride = prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$input `start` `=` $start `limit` `=` $limit `stride` `=` $stride " + _FN
    )

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        s = shape_of(self.input)
        st, li, sr = (list(x.get_values()) for x in (self.start, self.limit, self.stride))
        if not len(st) == len(li) == len(sr) == len(s):
            raise VerifyException(f"{self.name}: start/limit/stride need {len(s)} entries each")
        want = []
        for i, (a, b, c, d) in enumerate(zip(st, li, sr, s)):
            if not (0 <= a <= b <= d) or c < 1:
                raise VerifyException(
                    f"{self.name}: dim {i}: slice {a}:{b}:{c} out of range for size {d}"
                )
            want.append((b - a + c - 1) // c)
        _check_shape(self, "result", shape_of(self.result), want)


@irdl_op_definition
class ReverseOp(IRDLOperation):
    """Reverse the order of elements along each of ``dims`` (``stablehlo.reverse``,
    ``torch.flip``): ``y[..., i, ...] = x[..., n - 1 - i, ...]`` on those dims. A
    convolution's input gradient correlates with its kernel reversed along kh and kw."""

    name = "tgraph.reverse"
    input = operand_def(TensorT)
    dims = prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input `dims` `=` $dims " + _FN

    def __init__(self, input: SSAValue, dims: Sequence[int], result_type: Attribute):
        super().__init__(
            operands=[input],
            result_types=[result_type],
            properties={"dims": DenseArrayBase.from_list(i64, list(dims))},
        )

    def dim_values(self) -> tuple[int, ...]:
        """The reversed dims, in increasing order."""
        return tuple(sorted(int(d) for d in self.dims.get_values()))

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        s = shape_of(self.input)
        d = [int(v) for v in self.dims.get_values()]
        bad = [v for v in d if not 0 <= v < len(s)]
        if bad:
            raise VerifyException(
                f"{self.name}: dim {bad[0]} out of range for rank {len(s)} input {fmt_shape(s)}"
            )
        if len(set(d)) != len(d):
            raise VerifyException(f"{self.name}: dims {d} repeat a dim")
        _check_shape(self, "result", shape_of(self.result), s)


@irdl_op_definition
class ConcatOp(IRDLOperation):
    """Concatenate operands along ``axis``."""

    name = "tgraph.concat"
    inputs = var_operand_def(TensorT)
    axis = prop_def(IntegerAttr[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$inputs `axis` `=` $axis " + _FN

    def verify_(self) -> None:
        if not self.inputs:
            raise VerifyException(f"{self.name}: needs at least one operand")
        _check_same_elem(self, *self.inputs, self.result)
        shapes = [shape_of(v) for v in self.inputs]
        (ax,) = _norm_axes([self.axis.value.data], len(shapes[0]), self.name)
        for i, s in enumerate(shapes):
            if len(s) != len(shapes[0]) or any(
                a != b for j, (a, b) in enumerate(zip(s, shapes[0])) if j != ax
            ):
                raise VerifyException(
                    f"{self.name}: operand {i} has shape {fmt_shape(s)}, incompatible with "
                    f"{fmt_shape(shapes[0])} outside axis {ax}"
                )
        want = list(shapes[0])
        want[ax] = sum(s[ax] for s in shapes)
        _check_shape(self, "result", shape_of(self.result), want)


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A constant tensor. ``value`` is a dense elements attribute of the result's
    shape (or a splat); it is converted to the result's element type."""

    name = "tgraph.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict `->` type($result)"

    def __init__(self, value: DenseIntOrFPElementsAttr, result_type: Attribute):
        super().__init__(result_types=[result_type], properties={"value": value})

    def verify_(self) -> None:
        vs = tuple(self.value.get_type().get_shape())
        n = 1
        for d in vs:
            n *= d
        if vs != shape_of(self.result) and n != 1:
            raise VerifyException(
                f"{self.name}: value has shape {fmt_shape(vs)}, result "
                f"{fmt_shape(shape_of(self.result))}"
            )


