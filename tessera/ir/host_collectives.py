"""Host-side collective ops, shared by Tile IR (``ttile``) and Target IR (``ttarget``).

``lower-graph-to-tile`` turns each Graph IR collective into one of these ops in the
lowered program's host ``func.func``, next to the kernel launches;
``lower-tile-to-target`` maps each ``ttile`` op to the ``ttarget`` op of the same
name. They work on whole memrefs and return fresh ones (a collective never writes
into its operand)::

    %r = ttile.all_reduce %x op = "sum" axis = "tp" : memref<8x32xf32> -> memref<8x32xf32>
    %g = ttile.all_gather %y axis = "tp" dim = 1 : memref<8x16xf32> -> memref<8x32xf32>
    %c = ttile.mesh_coord axis = "tp"

The bases below hold the operands, properties, syntax and verifiers; the dialects
define the named ops (``tessera/ir/tile.py``, ``tessera/ir/target.py``). The mesh is
the host function's ``tessera.mesh`` attribute: with one, shapes are checked against
the axis size; without one, only the element types and ranks are. The runtimes run
them with the deterministic collectives of :mod:`tessera.dist.collectives`
(:mod:`tessera.runtime.host_collectives`).
"""

from __future__ import annotations

from abc import ABC

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    I64,
    IndexType,
    IntegerAttr,
    MemRefType,
    StringAttr,
    UnitAttr,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from tessera.ir.attrs import REDUCTIONS, MeshAttr

MemRefT = MemRefType.constr()

_FN = "attr-dict `:` type($input) `->` type($result)"


def _shape(op: Operation, what: str, v: SSAValue) -> list[int]:
    t = v.type
    assert isinstance(t, MemRefType)
    s = list(t.get_shape())
    if any(d < 0 for d in s):
        raise VerifyException(f"{op.name}: {what} type {t} must have a static shape")
    return s


def _fmt(s: list[int]) -> str:
    return "x".join(map(str, s)) if s else "scalar"


def _dim(op: Operation, d: int, rank: int, what: str = "dim") -> int:
    if not -rank <= d < rank:
        raise VerifyException(f"{op.name}: {what} {d} out of range for rank {rank}")
    return d % rank


class HostCollectiveOp(IRDLOperation, ABC):
    """Base of every host-side collective: one mesh axis, placed in a host ``func.func``."""

    axis = prop_def(StringAttr)

    @property
    def kind(self) -> str:
        """The collective's name without the dialect: ``all_reduce``, ``mesh_coord`` ..."""
        return self.name.split(".", 1)[1]

    def mesh_sizes(self) -> dict[str, int] | None:
        """Axis sizes of the nearest enclosing ``tessera.mesh`` attribute (None if none)."""
        p = self.parent_op()
        while p is not None:
            m = p.attributes.get("tessera.mesh")
            if isinstance(m, MeshAttr):
                return m.as_dict()
            p = p.parent_op()
        return None

    def group(self) -> int | None:
        """Size of the mesh axis (None without an enclosing ``tessera.mesh``)."""
        sizes = self.mesh_sizes()
        if sizes is None:
            return None
        if self.axis.data not in sizes:
            raise VerifyException(
                f"{self.name}: mesh has no axis '{self.axis.data}' (axes: {', '.join(sizes)})"
            )
        return sizes[self.axis.data]

    def verify_(self) -> None:
        parent = self.parent_op()
        if parent is not None and not isinstance(parent, func.FuncOp):
            raise VerifyException(
                f"{self.name}: must be in a host func.func, not in {parent.name}"
            )
        self.group()
        self.verify_collective()

    def verify_collective(self) -> None:
        """Shape and property checks of the concrete collective."""

    def _same_elem(self, a: Attribute, b: Attribute) -> None:
        assert isinstance(a, MemRefType) and isinstance(b, MemRefType)
        if a.element_type != b.element_type:
            raise VerifyException(
                f"{self.name}: result element type {b.element_type} differs from the input's "
                f"{a.element_type}"
            )

    def _check_reduction(self, op: StringAttr) -> None:
        if op.data not in REDUCTIONS:
            raise VerifyException(
                f"{self.name}: unknown reduction '{op.data}'; valid: {', '.join(REDUCTIONS)}"
            )

    def _expect(self, got: list[int], want: list[int]) -> None:
        if got != want:
            raise VerifyException(
                f"{self.name}: result shape {_fmt(got)} does not match the expected {_fmt(want)}"
            )

    def _split(self, s: list[int], d: int, g: int) -> None:
        if s[d] % g:
            raise VerifyException(
                f"{self.name}: dim {d} of size {s[d]} does not split over {g} ranks"
            )
        s[d] //= g


class AllReduceBase(HostCollectiveOp, ABC):
    """Reduce over the mesh axis; every rank gets the result. Deterministic (all_to_all,
    rank-ordered fold, all_gather) unless ``nondeterministic``."""

    input = operand_def(MemRefT)
    op = prop_def(StringAttr)
    nondeterministic = opt_prop_def(UnitAttr)
    result = result_def(MemRefT)
    assembly_format = (
        "$input `op` `=` $op `axis` `=` $axis (`nondeterministic` $nondeterministic^)? " + _FN
    )

    def verify_collective(self) -> None:
        self._check_reduction(self.op)
        self._same_elem(self.input.type, self.result.type)
        self._expect(_shape(self, "result", self.result), _shape(self, "input", self.input))


class AllGatherBase(HostCollectiveOp, ABC):
    """Concatenate every rank's block along ``dim``, in rank order."""

    input = operand_def(MemRefT)
    dim = prop_def(IntegerAttr[I64])
    result = result_def(MemRefT)
    assembly_format = "$input `axis` `=` $axis `dim` `=` $dim " + _FN

    def verify_collective(self) -> None:
        self._same_elem(self.input.type, self.result.type)
        s = _shape(self, "input", self.input)
        r = _shape(self, "result", self.result)
        d = _dim(self, self.dim.value.data, len(s))
        g = self.group()
        if g is not None:
            s[d] *= g
            self._expect(r, s)
        elif len(r) != len(s) or r[d] % max(s[d], 1) or any(
            a != b for k, (a, b) in enumerate(zip(r, s)) if k != d
        ):
            raise VerifyException(
                f"{self.name}: result shape {_fmt(r)} is not a gather of {_fmt(s)} along dim {d}"
            )


class ReduceScatterBase(HostCollectiveOp, ABC):
    """Reduce over the mesh axis; rank ``r`` keeps block ``r`` of ``dim``."""

    input = operand_def(MemRefT)
    op = prop_def(StringAttr)
    dim = prop_def(IntegerAttr[I64])
    result = result_def(MemRefT)
    assembly_format = "$input `op` `=` $op `axis` `=` $axis `dim` `=` $dim " + _FN

    def verify_collective(self) -> None:
        self._check_reduction(self.op)
        self._same_elem(self.input.type, self.result.type)
        s = _shape(self, "input", self.input)
        r = _shape(self, "result", self.result)
        d = _dim(self, self.dim.value.data, len(s))
        g = self.group()
        if g is not None:
            self._split(s, d, g)
            self._expect(r, s)
        elif len(r) != len(s):
            raise VerifyException(f"{self.name}: result rank {len(r)} differs from {len(s)}")


class AllToAllBase(HostCollectiveOp, ABC):
    """Split ``split_dim`` into one block per rank, send block ``j`` to rank ``j``,
    concatenate the received blocks along ``concat_dim`` in rank order."""

    input = operand_def(MemRefT)
    split_dim = prop_def(IntegerAttr[I64])
    concat_dim = prop_def(IntegerAttr[I64])
    result = result_def(MemRefT)
    assembly_format = (
        "$input `axis` `=` $axis `split_dim` `=` $split_dim `concat_dim` `=` $concat_dim " + _FN
    )

    def verify_collective(self) -> None:
        self._same_elem(self.input.type, self.result.type)
        s = _shape(self, "input", self.input)
        r = _shape(self, "result", self.result)
        sd = _dim(self, self.split_dim.value.data, len(s), "split_dim")
        cd = _dim(self, self.concat_dim.value.data, len(s), "concat_dim")
        g = self.group()
        if g is not None:
            self._split(s, sd, g)
            s[cd] *= g
            self._expect(r, s)
        elif len(r) != len(s):
            raise VerifyException(f"{self.name}: result rank {len(r)} differs from {len(s)}")


class SendBase(HostCollectiveOp, ABC):
    """Send ``input`` to the rank ``peer`` steps along the mesh axis (blocking)."""

    input = operand_def(MemRefT)
    peer = prop_def(IntegerAttr[I64])
    assembly_format = "$input `axis` `=` $axis `peer` `=` $peer attr-dict `:` type($input)"

    def verify_collective(self) -> None:
        _shape(self, "input", self.input)
        if self.peer.value.data == 0:
            raise VerifyException(f"{self.name}: peer offset must be non-zero")


class RecvBase(HostCollectiveOp, ABC):
    """Receive a buffer of the result type from the rank ``peer`` steps along the axis."""

    peer = prop_def(IntegerAttr[I64])
    result = result_def(MemRefT)
    assembly_format = "`axis` `=` $axis `peer` `=` $peer attr-dict `:` type($result)"

    def verify_collective(self) -> None:
        _shape(self, "result", self.result)
        if self.peer.value.data == 0:
            raise VerifyException(f"{self.name}: peer offset must be non-zero")


class MeshCoordBase(HostCollectiveOp, ABC):
    """This rank's coordinate along the mesh axis, as an ``index`` (0 on an axis of size 1
    without a process group). ``tgraph.all_slice`` lowers to it plus a slicing kernel."""

    result = result_def(IndexType)
    assembly_format = "`axis` `=` $axis attr-dict"


HOST_COLLECTIVE_BASES: tuple[type[HostCollectiveOp], ...] = (
    AllReduceBase, AllGatherBase, ReduceScatterBase, AllToAllBase, SendBase, RecvBase,
    MeshCoordBase,
)
"""The bases, in the order each dialect defines its ops."""
