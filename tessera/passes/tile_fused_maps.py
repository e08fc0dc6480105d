"""Fused kernels whose bodies move data: index maps inside ``tgraph.fused``.

``fuse-elementwise`` puts ``tgraph.transpose`` (keeping the last dim), ``tgraph.slice``,
``tgraph.concat``, ``tgraph.broadcast`` and reshapes that only add or drop size-1 dims
into fused bodies. None of them computes anything: each says at which index of its
operand an element of its result is found. This module lowers such a body as one
kernel over the result's elements (the *domain*), reading each leaf (a body argument or
a constant buffer) at the index the chain of maps between it and the result gives.

Every map is affine per dim, so the index of a body value along each of its dims is
``domain[src] * scale + off`` (:class:`Axis`; ``src`` None for a constant index), and
the composition of maps stays of that form (:class:`Access`):

* an elementwise op or a broadcast reads an operand dim of size 1 at 0 and the others
  at the result's index (right-aligned);
* ``transpose(x, perm)`` reads dim ``perm[i]`` of ``x`` at the result's index ``i``;
* ``slice`` at ``start + i * stride``; a unit-dim reshape maps its non-unit dims in order;
* ``concat`` reads operand ``b`` at the result index minus the operand's offset, where
  ``lo_b <= index < hi_b`` along the axis: a condition carried by the access, which
  masks the operand's loads (its index is out of range elsewhere) and selects among
  the operands. Conditions decided by the shapes alone (a branch a slice never
  reaches) are resolved when the kernel is built.

Demands are propagated from the result to the leaves first (each body value is then
computed once per distinct access), then the values are built from the leaves up.

Each lane computes ``W`` consecutive elements of the domain's last dim. A leaf whose
last dim follows the domain's last dim with unit scale and a ``W``-aligned offset is
read as one ``vector<W x T>``; one that does not depend on the domain's last dim is read
once; any other leaf one element at a time. A concat condition on the last dim whose
bounds are ``W``-aligned is evaluated once per lane, else per element. The result is
stored as a vector. With a trailing reduction the body is the value of each reduced
element (``W = 1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from math import prod
from typing import TYPE_CHECKING

from xdsl.ir import Attribute, Operation, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv
from tessera.passes.tile_datamove import VECTOR_BYTES, elem_bytes

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering


def has_index_maps(body: Sequence[Operation]) -> bool:
    """A fused body holds an index map other than a broadcast."""
    return any(g.is_index_map(o) for o in body)


@dataclass(frozen=True)
class Axis:
    """The index along one dim of a body value: ``domain[src] * scale + off`` (``src``
    None: the constant ``off``)."""

    src: int | None
    scale: int = 1
    off: int = 0

    def then(self, scale: int, off: int) -> Axis:
        """This index mapped by ``i -> i * scale + off``."""
        if self.src is None:
            return Axis(None, 0, self.off * scale + off)
        return Axis(self.src, self.scale * scale, self.off * scale + off)


ZERO = Axis(None, 0, 0)

Cond = tuple[Axis, int, int]
"""``lo <= axis < hi``."""


@dataclass(frozen=True)
class Access:
    """Where an element of a body value is read for domain index ``i``: its index per dim,
    and the conditions (of enclosing concats) under which it is read at all."""

    axes: tuple[Axis, ...]
    conds: tuple[Cond, ...] = ()


def _static(c: Cond, domain: Sequence[int]) -> bool | None:
    """Whether condition ``c`` holds for every domain index (True), none (False), or
    depends on the index (None)."""
    ax, lo, hi = c
    if ax.src is None:
        return lo <= ax.off < hi
    n = domain[ax.src]
    a, b = ax.off, ax.off + ax.scale * (n - 1)
    first, last = min(a, b), max(a, b)
    if lo <= first and last < hi:
        return True
    if last < lo or first >= hi:
        return False
    return None


def _bcast(axes: tuple[Axis, ...], shape: Sequence[int]) -> tuple[Axis, ...]:
    """The access of an operand of ``shape`` broadcast (right-aligned) to a value read at
    ``axes``."""
    off = len(axes) - len(shape)
    return tuple(ZERO if d == 1 else axes[k + off] for k, d in enumerate(shape))


def operand_accesses(
    op: Operation, acc: Access, domain: Sequence[int]
) -> list[tuple[int, Access] | None]:
    """For each operand of body op ``op`` read at ``acc``: ``(operand index, access)``, or
    None for a concat operand that is never read there."""
    if isinstance(op, g.TransposeOp):
        perm = [int(p) for p in op.permutation.get_values()]
        axes: list[Axis] = [ZERO] * len(perm)
        for i, p in enumerate(perm):
            axes[p] = acc.axes[i]
        return [(0, replace(acc, axes=tuple(axes)))]
    if isinstance(op, g.SliceOp):
        start = [int(v) for v in op.start.get_values()]
        stride = [int(v) for v in op.stride.get_values()]
        return [(0, replace(acc, axes=tuple(
            a.then(st, s) for a, s, st in zip(acc.axes, start, stride))))]
    if isinstance(op, g.ReshapeOp):
        it = iter([a for a, d in zip(acc.axes, g.shape_of(op.result)) if d != 1])
        return [(0, replace(acc, axes=tuple(
            ZERO if d == 1 else next(it) for d in g.shape_of(op.input))))]
    if isinstance(op, g.ConcatOp):
        rank = len(acc.axes)
        ax = op.axis.value.data % rank
        out: list[tuple[int, Access] | None] = []
        lo = 0
        for i, v in enumerate(op.inputs):
            n = g.shape_of(v)[ax]
            cond: Cond = (acc.axes[ax], lo, lo + n)
            state = _static(cond, domain)
            if state is False or n == 0:
                out.append(None)
            else:
                conds = acc.conds if state else (*acc.conds, cond)
                axes_i = tuple(a.then(1, -lo) if k == ax else a for k, a in enumerate(acc.axes))
                out.append((i, Access(axes_i, conds)))
            lo += n
        return out
    # elementwise ops, broadcasts, reductions' inputs: numpy broadcasting
    return [(i, replace(acc, axes=_bcast(acc.axes, g.shape_of(v))))
            for i, v in enumerate(op.operands)]


class MapEvaluator:
    """Computes a fused body's result at domain indices (see the module docstring).

    ``values`` are the body's leaves (block arguments, then non-splat constants) and
    ``body`` its live ops up to ``result``."""

    def __init__(
        self, values: Sequence[SSAValue], body: Sequence[Operation], result: SSAValue,
        domain: Sequence[int], width: int,
    ):
        self.values = list(values)
        self.body = list(body)
        self.result = result
        self.domain = list(domain)
        self.width = width
        self.last = len(domain) - 1
        self.demands = self._demands()

    def _demands(self) -> dict[SSAValue, list[Access]]:
        ident = Access(tuple(Axis(k) for k in range(len(self.domain))))
        demands: dict[SSAValue, list[Access]] = {self.result: [ident]}
        for op in reversed(self.body):
            if isinstance(op, g.ConstantOp):
                continue
            for acc in demands.get(op.results[0], []):
                for item in operand_accesses(op, acc, self.domain):
                    if item is None:
                        continue
                    i, a = item
                    lst = demands.setdefault(op.operands[i], [])
                    if a not in lst:
                        lst.append(a)
        return demands

    # ------------------------------------------------------------------ planning
    def varies(self, acc: Access) -> bool:
        """Whether the value at ``acc`` differs among a lane's ``W`` elements."""
        return self.width > 1 and (
            any(a.src == self.last for a in acc.axes)
            or any(c[0].src == self.last for c in acc.conds)
        )

    def _cond_uniform(self, c: Cond) -> bool:
        ax, lo, hi = c
        w = self.width
        return ax.src != self.last or (
            ax.scale == 1 and (lo - ax.off) % w == 0 and (hi - ax.off) % w == 0
        )

    def leaf_mode(self, v: SSAValue, acc: Access) -> str:
        """``vector``, ``uniform`` or ``scalar`` (see the module docstring)."""
        if not self.varies(acc):
            return "uniform"
        if not all(self._cond_uniform(c) for c in acc.conds):
            return "scalar"
        shape = g.shape_of(v)
        uses = [k for k, a in enumerate(acc.axes) if a.src == self.last]
        w = self.width
        if (
            uses == [len(acc.axes) - 1]
            and acc.axes[-1].scale == 1
            and acc.axes[-1].off % w == 0
            and shape[-1] % w == 0
            and elem_bytes(g.elem_of(v)) in (2, 4, 8)
        ):
            return "vector"
        return "scalar"

    # ------------------------------------------------------------------ building
    def evaluate(
        self, e: KernelEmitter, refs: Sequence[SSAValue], base: list[Idx], ok: SSAValue | None
    ) -> list[SSAValue]:
        """The result's ``W`` elements at domain index ``base`` (its last index a multiple
        of ``W``) and the next ``W - 1`` along the last dim, reading leaf ``i`` from
        ``refs[i]``; ``ok`` masks every load."""
        from tessera.passes.lower_graph_to_tile import _splat, elementwise_scalar

        w = self.width
        leaf_ref = dict(zip(self.values, refs))
        got: dict[tuple[SSAValue, Access], list[SSAValue]] = {}
        conds: dict[Cond, list[SSAValue]] = {}

        def axis_at(a: Axis, k: int) -> Idx:
            if a.src is None:
                return a.off
            i = base[a.src]
            if a.src == self.last and k:
                i = e.add(i, k)
            return e.add(e.mul(i, a.scale), a.off)

        def cond_at(c: Cond) -> list[SSAValue]:
            if c not in conds:
                ax, lo, hi = c
                ks = [0] if self._cond_uniform(c) else list(range(w))
                vals = []
                for k in ks:
                    i = axis_at(ax, k)
                    t = e.and_(e.le(lo, i), e.lt(i, hi))
                    assert t is not None
                    vals.append(t)
                conds[c] = vals * w if len(vals) == 1 else vals
            return conds[c]

        def mask_at(acc: Access, k: int) -> SSAValue | None:
            m = ok
            for c in acc.conds:
                m = e.and_(m, cond_at(c)[k])
            return m

        def leaf(v: SSAValue, acc: Access) -> list[SSAValue]:
            ref = leaf_ref[v]
            mode = self.leaf_mode(v, acc)
            if mode == "vector":
                idx = [e.index(axis_at(a, 0)) for a in acc.axes]
                vec = e.op(tt.LoadVectorOp(ref, idx, w, mask_at(acc, 0)))
                return [e.extract(vec, k) for k in range(w)]
            if mode == "uniform":
                x = e.load(ref, [axis_at(a, 0) for a in acc.axes], mask=mask_at(acc, 0))
                return [x] * w
            return [e.load(ref, [axis_at(a, k) for a in acc.axes], mask=mask_at(acc, k))
                    for k in range(w)]

        for v in self.values:
            for acc in self.demands.get(v, []):
                got[v, acc] = leaf(v, acc)
        for op in self.body:
            r = op.results[0]
            if r in leaf_ref:  # a constant buffer, read as a leaf
                continue
            for acc in self.demands.get(r, []):
                if isinstance(op, g.ConstantOp):
                    got[r, acc] = [e.const(_splat(op), g.elem_of(r))] * w  # type: ignore[arg-type]
                    continue
                items = operand_accesses(op, acc, self.domain)
                ins = [None if it is None else got[op.operands[it[0]], it[1]] for it in items]
                n = w if self.varies(acc) else 1
                if isinstance(op, g.ConcatOp):
                    live = [(it, x) for it, x in zip(items, ins) if it is not None and x is not None]
                    ys = []
                    for k in range(n):
                        y = live[-1][1][k]
                        for it, x in reversed(live[:-1]):
                            c = it[1].conds[-1]
                            y = e.vselect(cond_at(c)[k], x[k], y)
                        ys.append(y)
                elif g.is_index_map(op) or isinstance(op, g.BroadcastOp):
                    ys = ins[0][:n]  # type: ignore[index]
                else:
                    ys = [elementwise_scalar(e, op, [x[k] for x in ins])  # type: ignore[index]
                          for k in range(n)]
                got[r, acc] = ys * w if n == 1 else ys
        ident = self.demands[self.result][0]
        return got[self.result, ident]


def _width(domain: Sequence[int], elems: Sequence[Attribute]) -> int:
    """Elements per lane: 16 bytes of the widest element among ``elems`` (the result's and
    the leaves'), halved until it divides the domain's last dim; 1 for a result with no
    vector access."""
    if not domain or elem_bytes(elems[0]) not in (2, 4, 8):
        return 1
    caps = [VECTOR_BYTES // elem_bytes(t) for t in elems if elem_bytes(t) in (2, 4, 8)]
    w = min(caps)
    while w > 1 and domain[-1] % w:
        w //= 2
    return w


def lower_mapped_fused(
    fl: _FunctionLowering, out: SSAValue, result: SSAValue, values: Sequence[SSAValue],
    refs: Sequence[SSAValue], body: Sequence[Operation],
) -> None:
    """One kernel writing ``out`` (the buffer of fused result ``result``) from the leaves
    ``values`` (buffers ``refs``) through ``body``, which holds index maps."""
    from tessera.passes.lower_graph_to_tile import ELEMENTWISE_GROUP

    domain = list(g.shape_of(result))
    n = prod(domain)
    if n == 0:
        return
    w = _width(domain, [g.elem_of(result), *(g.elem_of(v) for v in values)])
    ev = MapEvaluator(values, body, result, domain, w)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, ins = args[0], args[1:]
        lin = e.mul(e.linear_id(), w)
        ok = e.lt(lin, n)
        base = e.unravel(lin, domain) if domain else []
        ys = ev.evaluate(e, ins, base, ok)
        if w > 1:
            e.store_lanes(ys, o_ref, base, ok)
        else:
            e.store(ys[0], o_ref, base, mask=ok)

    group = ELEMENTWISE_GROUP
    fl.kernel("fused", [out, *refs], group, [cdiv(cdiv(n, w), group), 1, 1], build)


def mapped_value(
    values: Sequence[SSAValue], body: Sequence[Operation], result: SSAValue,
) -> MapEvaluator:
    """The evaluator of a body with index maps read one element at a time (the value of
    each reduced element of a trailing reduction)."""
    return MapEvaluator(values, body, result, g.shape_of(result), 1)


__all__ = [
    "Access", "Axis", "MapEvaluator", "has_index_maps", "lower_mapped_fused", "mapped_value",
]
