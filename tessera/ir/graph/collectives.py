"""``tgraph`` collectives over a mesh axis and point-to-point ``send``/``recv``."""

from __future__ import annotations

from abc import ABC

from xdsl.dialects.builtin import (
    I64,
    IntegerAttr,
    StringAttr,
    UnitAttr,
)
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from tessera.ir.attrs import REDUCTIONS
from tessera.ir.graph.base import (
    _FN,
    TensorT,
    _check_same_elem,
    _check_shape,
    _mesh_axis_size,
    _norm_axes,
    fmt_shape,
    shape_of,
)

# --------------------------------------------------------------------------- collectives


class CollectiveOp(IRDLOperation, ABC):
    """Base of collectives over one named mesh axis. The mesh comes from the enclosing
    op's ``tessera.mesh`` attribute; without one, factor checks are skipped."""

    input = operand_def(TensorT)
    axis = prop_def(StringAttr)
    result = result_def(TensorT)

    def _group(self) -> int | None:
        return _mesh_axis_size(self, self.axis.data)

    def _split(self, s: list[int], d: int, g: int) -> None:
        """Divide dim ``d`` of shape ``s`` into ``g`` blocks, in place; an error if it does not
        divide."""
        if s[d] % g:
            raise VerifyException(
                f"{self.name}: dim {d} of size {s[d]} does not split over {g} ranks"
            )
        s[d] //= g

    def _check_reduction(self, op: StringAttr) -> None:
        if op.data not in REDUCTIONS:
            raise VerifyException(
                f"{self.name}: unknown reduction '{op.data}'; valid: {', '.join(REDUCTIONS)}"
            )


@irdl_op_definition
class AllReduceOp(CollectiveOp):
    """Reduce over the mesh axis; every rank gets the result. Deterministic (a fixed,
    rank-ordered reduction) unless ``nondeterministic``."""

    name = "tgraph.all_reduce"
    op = prop_def(StringAttr)
    nondeterministic = opt_prop_def(UnitAttr)
    assembly_format = (
        "$input `op` `=` $op `axis` `=` $axis (`nondeterministic` $nondeterministic^)? " + _FN
    )

    def verify_(self) -> None:
        self._check_reduction(self.op)
        self._group()
        _check_same_elem(self, self.input, self.result)
        _check_shape(self, "result", shape_of(self.result), shape_of(self.input))


@irdl_op_definition
class AllGatherOp(CollectiveOp):
    """Concatenate every rank's block along ``dim``, in rank order."""

    name = "tgraph.all_gather"
    dim = prop_def(IntegerAttr[I64])
    assembly_format = "$input `axis` `=` $axis `dim` `=` $dim " + _FN

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        s = list(shape_of(self.input))
        (d,) = _norm_axes([self.dim.value.data], len(s), self.name)
        r = shape_of(self.result)
        g = self._group()
        if g is not None:
            s[d] *= g
            _check_shape(self, "result", r, s)
        elif len(r) != len(s) or r[d] % max(s[d], 1):
            raise VerifyException(
                f"{self.name}: result shape {fmt_shape(r)} is not a gather of {fmt_shape(s)}"
            )


@irdl_op_definition
class ReduceScatterOp(CollectiveOp):
    """Reduce over the mesh axis, then rank r keeps block r of ``dim``."""

    name = "tgraph.reduce_scatter"
    op = prop_def(StringAttr)
    dim = prop_def(IntegerAttr[I64])
    assembly_format = "$input `op` `=` $op `axis` `=` $axis `dim` `=` $dim " + _FN

    def verify_(self) -> None:
        self._check_reduction(self.op)
        _check_same_elem(self, self.input, self.result)
        s = list(shape_of(self.input))
        (d,) = _norm_axes([self.dim.value.data], len(s), self.name)
        g = self._group()
        if g is not None:
            self._split(s, d, g)
            _check_shape(self, "result", shape_of(self.result), s)


@irdl_op_definition
class AllToAllOp(CollectiveOp):
    """Split ``split_dim`` into one block per rank, exchange, concatenate along
    ``concat_dim``."""

    name = "tgraph.all_to_all"
    split_dim = prop_def(IntegerAttr[I64])
    concat_dim = prop_def(IntegerAttr[I64])
    assembly_format = (
        "$input `axis` `=` $axis `split_dim` `=` $split_dim `concat_dim` `=` $concat_dim " + _FN
    )

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        s = list(shape_of(self.input))
        sd, cd = _norm_axes(
            [self.split_dim.value.data, self.concat_dim.value.data], len(s), self.name
        ) if self.split_dim.value.data != self.concat_dim.value.data else (
            _norm_axes([self.split_dim.value.data], len(s), self.name) * 2
        )
        g = self._group()
        if g is not None:
            self._split(s, sd, g)
            s[cd] *= g
            _check_shape(self, "result", shape_of(self.result), s)


@irdl_op_definition
class AllSliceOp(CollectiveOp):
    """Keep this rank's block ``r`` of ``dim`` along the mesh axis, without communication
    (a replicated value becomes a sharded one; the inverse of ``all_gather``)."""

    name = "tgraph.all_slice"
    dim = prop_def(IntegerAttr[I64])
    assembly_format = "$input `axis` `=` $axis `dim` `=` $dim " + _FN

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        s = list(shape_of(self.input))
        (d,) = _norm_axes([self.dim.value.data], len(s), self.name)
        g = self._group()
        if g is not None:
            self._split(s, d, g)
            _check_shape(self, "result", shape_of(self.result), s)


@irdl_op_definition
class SendOp(IRDLOperation):
    """Send a tensor to the rank ``peer`` steps along mesh axis ``axis`` (pipeline stages)."""

    name = "tgraph.send"
    input = operand_def(TensorT)
    axis = prop_def(StringAttr)
    peer = prop_def(IntegerAttr[I64])
    assembly_format = "$input `axis` `=` $axis `peer` `=` $peer attr-dict `:` type($input)"

    def verify_(self) -> None:
        if self.peer.value.data == 0:
            raise VerifyException(f"{self.name}: peer offset must be non-zero")
        _mesh_axis_size(self, self.axis.data)


@irdl_op_definition
class RecvOp(IRDLOperation):
    """Receive a tensor of the result type from the rank ``peer`` steps along ``axis``."""

    name = "tgraph.recv"
    axis = prop_def(StringAttr)
    peer = prop_def(IntegerAttr[I64])
    result = result_def(TensorT)
    assembly_format = "`axis` `=` $axis `peer` `=` $peer attr-dict `:` type($result)"

    def verify_(self) -> None:
        if self.peer.value.data == 0:
            raise VerifyException(f"{self.name}: peer offset must be non-zero")
        _mesh_axis_size(self, self.axis.data)


