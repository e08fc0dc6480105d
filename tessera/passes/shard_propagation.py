"""``shard-propagation``: give every Graph IR value a sharding over the function's mesh.

Inputs are the function's ``tessera.mesh`` attribute and its arguments'
``tessera.shard`` attributes (replicated when absent). Walking the ops in
order, a rule per op chooses the sharding each operand must have and the
sharding of each result; the pass writes the results' shardings on the op as
``tessera.shard = [#tessera.shard<...>, ...]``. ``spmd-partition`` uses the
same rules and also inserts the collectives that move operands to the
required sharding and rewrites the program to per-rank shapes.

A sharding is ``#tessera.shard<[[axes of dim 0], ...], partial = OP over [axes]>``:
``partial`` values are per-rank contributions still awaiting a reduction. Rules
keep a value partial while the ops are linear in it (sum-partials through add,
sub, neg, mul/div by a non-partial value, matmul, sum, transpose, reshape,
broadcast, slice) and reduce it (``all_reduce``) before anything else.

A split that does not divide its dim (uneven: padded blocks of ``ceil(n / P)``) is
kept only on dims the op never combines elements along (:func:`uneven_dims`);
elsewhere it is dropped, so the operand is gathered first (:func:`decide_fitted`).

Programs that already contain collectives written by the user are per-rank
("local view") programs: their argument types are shards, and the pass only
annotates them, following each collective's effect on the sharding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from tessera.errors import TesseraError
from tessera.ir import graph as g
from tessera.ir.attrs import MeshAttr, ShardSpecAttr
from tessera.ir.registry import OpRegistry

SHARD = "tessera.shard"
MESH = "tessera.mesh"
STAGE = "tessera.stage"
USER_COLLECTIVES = (
    g.AllReduceOp, g.AllGatherOp, g.ReduceScatterOp, g.AllToAllOp, g.AllSliceOp, g.SendOp,
    g.RecvOp,
)


class ShardingPassError(TesseraError, DiagnosticException):
    """A program the sharding passes cannot handle; the message names the op and dims."""


@dataclass(frozen=True)
class Sharding:
    """Mesh axes per tensor dim (major first) and the axes of a pending reduction."""

    splits: tuple[tuple[str, ...], ...]
    partial: tuple[str, ...] = ()
    op: str = "sum"

    @staticmethod
    def replicated(rank: int) -> Sharding:
        return Sharding(tuple(() for _ in range(rank)))

    @staticmethod
    def from_attr(a: ShardSpecAttr) -> Sharding:
        return Sharding(
            tuple(tuple(d) for d in a.splits()), tuple(a.partial()), a.partial_op.data or "sum"
        )

    def to_attr(self) -> ShardSpecAttr:
        return ShardSpecAttr.get(self.splits, self.partial, self.op)

    @property
    def rank(self) -> int:
        return len(self.splits)

    def axes(self) -> set[str]:
        return {a for d in self.splits for a in d}

    def resolved(self) -> Sharding:
        """The same splits with the pending reduction done."""
        return Sharding(self.splits)

    def with_splits(self, splits: Sequence[Sequence[str]]) -> Sharding:
        return Sharding(tuple(tuple(d) for d in splits), self.partial, self.op)

    def is_replicated(self) -> bool:
        return not self.partial and not self.axes()


@dataclass
class Decision:
    """What a rule asks: the sharding of each operand and of each result."""

    operands: list[Sharding]
    results: list[Sharding]


@dataclass
class MeshInfo:
    sizes: dict[str, int]
    global_shape: Callable[[SSAValue], tuple[int, ...]] | None = None

    def shape(self, v: SSAValue) -> tuple[int, ...]:
        """The global shape of ``v`` (``global_shape`` when set, else its type's shape)."""
        if self.global_shape is not None:
            return self.global_shape(v)
        return shape(v)

    def parts(self, axes: Sequence[str]) -> int:
        n = 1
        for a in axes:
            n *= self.sizes[a]
        return n


def shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    return tuple(t.get_shape()) if isinstance(t, TensorType) else ()


def _rank(v: SSAValue) -> int:
    return len(shape(v))


def _divides(mesh: MeshInfo, size: int, axes: Sequence[str]) -> bool:
    return size % mesh.parts(axes) == 0


# --------------------------------------------------------------------------- rules


_LINEAR_ADD = (g.AddOp, g.SubOp)
_LINEAR_SCALE = (g.MulOp, g.DivOp)


def _elementwise(op: Operation, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    res = op.results[0]
    rshape = mesh.shape(res)
    R = len(rshape)
    # partial handling
    parts = [s for s in ins if s.partial]
    keep: tuple[tuple[str, ...], str] | None = None
    if parts:
        p0 = (parts[0].partial, parts[0].op)
        if isinstance(op, _LINEAR_ADD) and len(parts) == len(ins) and all(
            (s.partial, s.op) == p0 for s in ins
        ) and p0[1] == "sum":
            keep = p0
        elif isinstance(op, _LINEAR_SCALE) and len(parts) == 1 and p0[1] == "sum" and (
            ins[0].partial if isinstance(op, g.DivOp) else True
        ):
            keep = p0
    # result splits: first operand that splits a (non-broadcast) dim wins
    rs: list[tuple[str, ...]] = [()] * R
    used: set[str] = set(keep[0]) if keep else set()
    for v, s in zip(op.operands, ins):
        vs = mesh.shape(v)
        off = R - len(vs)
        for d, axes in enumerate(s.splits):
            if not axes or rs[off + d] or vs[d] != rshape[off + d] or used & set(axes):
                continue
            rs[off + d] = axes
            used |= set(axes)
    req = []
    for v, s in zip(op.operands, ins):
        vs = mesh.shape(v)
        off = R - len(vs)
        sp = [rs[off + d] if vs[d] == rshape[off + d] else () for d in range(len(vs))]
        req.append(
            Sharding(tuple(sp), s.partial, s.op) if keep and s.partial else Sharding(tuple(sp))
        )
    out = Sharding(tuple(rs), keep[0], keep[1]) if keep else Sharding(tuple(rs))
    return Decision(req, [out])


def _unary(op: Operation, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    s = ins[0]
    if isinstance(op, g.NegOp) and s.op == "sum":
        return Decision([s], [s])
    return Decision([s.resolved()], [s.resolved()])


def _reduction(op: g.ReductionOp, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    s = ins[0]
    kind = {"tgraph.sum": "sum", "tgraph.mean": "mean", "tgraph.max": "max", "tgraph.min": "min"}[
        op.name
    ]
    axes = set(op.axis_list())
    new = tuple(a for d in sorted(axes) for a in s.splits[d])
    linear = kind in ("sum", "mean") and s.op == "sum"
    if s.partial and not (linear and (not new or kind == "sum")):
        s = s.resolved()
    keepdims = op.keepdims is not None
    rs = [
        (() if d in axes else s.splits[d])
        for d in range(s.rank)
        if keepdims or d not in axes
    ]
    partial = tuple(s.partial) + new
    pop = s.op if s.partial else kind
    return Decision([s], [Sharding(tuple(rs), partial, pop if partial else "sum")])


def _matmul(op: g.MatmulOp, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    a, b = ins
    if a.partial and b.partial or (a.partial and a.op != "sum") or (b.partial and b.op != "sum"):
        b = b.resolved()
        if a.partial and a.op != "sum":
            a = a.resolved()
    la, lb = mesh.shape(op.lhs), mesh.shape(op.rhs)
    ta, tb = op.transpose_lhs is not None, op.transpose_rhs is not None
    ra, rb = len(la), len(lb)
    am, ak = (ra - 1, ra - 2) if ta else (ra - 2, ra - 1)
    bk, bn = (rb - 1, rb - 2) if tb else (rb - 2, rb - 1)
    sm, sn = a.splits[am], b.splits[bn]
    partial = a.partial or b.partial
    sk = a.splits[ak] or b.splits[bk]
    if set(sn) & set(sm):
        sn = ()
    if set(sk) & (set(sm) | set(sn) | set(partial)):
        sk = ()
    if a.splits[ak] != b.splits[bk] and a.splits[ak] and b.splits[bk]:
        sk = a.splits[ak] if not set(a.splits[ak]) & (set(sm) | set(sn)) else ()
    used = set(sm) | set(sn) | set(sk) | set(partial)
    # batch dims, broadcast like numpy
    rshape = mesh.shape(op.result)
    nb = len(rshape) - 2
    batch: list[tuple[str, ...]] = []
    for d in range(nb):
        pick: tuple[str, ...] = ()
        for v, s, r in ((op.lhs, a, ra), (op.rhs, b, rb)):
            i = d - (nb - (r - 2))
            if 0 <= i and mesh.shape(v)[i] == rshape[d] and s.splits[i] and not set(s.splits[i]) & used:
                pick = s.splits[i]
                break
        used |= set(pick)
        batch.append(pick)

    def req(v: SSAValue, s: Sharding, r: int, mdim: int, kdim: int, mn: tuple[str, ...]) -> Sharding:
        sp: list[tuple[str, ...]] = [()] * r
        for d in range(r - 2):
            i = d + (nb - (r - 2))
            sp[d] = batch[i] if mesh.shape(v)[d] == rshape[i] else ()
        sp[mdim], sp[kdim] = mn, sk
        return Sharding(tuple(sp), s.partial, s.op)

    ra_s = req(op.lhs, a, ra, am, ak, sm)
    rb_s = req(op.rhs, b, rb, bn, bk, sn)
    out = Sharding((*batch, sm, sn), tuple(partial) + tuple(sk), "sum")
    return Decision([ra_s, rb_s], [out])


def _transpose(op: g.TransposeOp, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    p = list(op.permutation.get_values())
    s = ins[0]
    return Decision([s], [Sharding(tuple(s.splits[i] for i in p), s.partial, s.op)])


def _reshape(op: g.ReshapeOp, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    s = ins[0]
    a, b = mesh.shape(op.input), mesh.shape(op.result)
    keep0 = (
        a and b and a[0] == b[0] and all(not d for d in s.splits[1:])
    )
    sp_in = [s.splits[0]] + [()] * (len(a) - 1) if keep0 else [()] * len(a)
    sp_out = [s.splits[0]] + [()] * (len(b) - 1) if keep0 else [()] * len(b)
    return Decision([s.with_splits(sp_in)], [Sharding(tuple(sp_out), s.partial, s.op)])


def _broadcast(op: g.BroadcastOp, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    s = ins[0]
    a, b = mesh.shape(op.input), mesh.shape(op.result)
    off = len(b) - len(a)
    sp_in = [s.splits[d] if a[d] == b[off + d] else () for d in range(len(a))]
    out = [()] * off + sp_in
    return Decision([s.with_splits(sp_in)], [Sharding(tuple(out), s.partial, s.op)])


def _slice(op: g.SliceOp, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    s = ins[0]
    a = mesh.shape(op.input)
    st, li, sr = (list(x.get_values()) for x in (op.start, op.limit, op.stride))
    sp = [
        s.splits[d] if (st[d], li[d], sr[d]) == (0, a[d], 1) else () for d in range(len(a))
    ]
    return Decision([s.with_splits(sp)], [s.with_splits(sp)])


def _concat(op: g.ConcatOp, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    ax = op.axis.value.data % ins[0].rank
    sp = [() if d == ax else ins[0].splits[d] for d in range(ins[0].rank)]
    p0 = (ins[0].partial, ins[0].op)
    same = all((s.partial, s.op) == p0 for s in ins) and p0[1] == "sum"
    req = [Sharding(tuple(sp), s.partial, s.op) if same else Sharding(tuple(sp)) for s in ins]
    return Decision(req, [req[0]])


def _keep_last_dims(op: Operation, ins: list[Sharding], n: int) -> Decision:
    """Ops that work along their last ``n`` dims: those unsplit, leading dims kept (first
    operand's), other operands (weights) replicated unless of the same rank."""
    s = ins[0].resolved()
    lead = list(s.splits[: s.rank - n]) + [()] * n
    req = []
    for v, t in zip(op.operands, ins):
        if _rank(v) == s.rank:
            req.append(Sharding(tuple(lead)))
        else:
            req.append(Sharding.replicated(t.rank))
    outs = [Sharding(tuple(lead[: _rank(r)])) if _rank(r) == s.rank else
            Sharding.replicated(_rank(r)) for r in op.results]
    return Decision(req, outs)


def _mse(op: g.MSEOp, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    p = ins[0].resolved()
    if mesh.shape(op.pred) != mesh.shape(op.target):
        return _replicate_all(op, ins, mesh)
    ax = tuple(a for d in p.splits for a in d)
    return Decision([p, p], [Sharding((), ax, "mean" if ax else "sum")])


def _conv2d(op: g.Conv2dOp, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    n = ins[0].splits[0]
    req = [Sharding((n, (), (), ()))] + [Sharding.replicated(t.rank) for t in ins[1:]]
    return Decision(req, [Sharding((n, (), (), ()))])


def _replicate_all(op: Operation, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    return Decision(
        [Sharding.replicated(s.rank) for s in ins],
        [Sharding.replicated(_rank(r)) for r in op.results],
    )


def _softmax(op: g.SoftmaxOp, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    ax = op.axis.value.data % ins[0].rank
    s = ins[0].resolved()
    sp = [() if d == ax else s.splits[d] for d in range(s.rank)]
    return Decision([Sharding(tuple(sp))], [Sharding(tuple(sp))])


def _logsumexp(op: g.LogSumExpOp, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    """Not linear in its input: a pending reduction is done first, and the reduced axes are
    gathered (each rank reduces whole slices); kept dims stay split."""
    axes = set(op.axis_list())
    s = ins[0].resolved()
    sp = [() if d in axes else s.splits[d] for d in range(s.rank)]
    keep = op.keepdims is not None
    rs = [sp[d] if d not in axes else () for d in range(s.rank) if keep or d not in axes]
    return Decision([Sharding(tuple(sp))], [Sharding(tuple(rs))])


def _last_dim(op: Operation, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    return _keep_last_dims(op, ins, 1)


def _last_two_dims(op: Operation, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    return _keep_last_dims(op, ins, 2)


Rule = Callable[[Operation, list[Sharding], MeshInfo], Decision]
"""A sharding rule: from the operands' shardings, the ones the op needs and its results'."""

SHARDING_RULES: OpRegistry[Rule] = OpRegistry("sharding rule")
"""The sharding rule of each op (global view), by op class; an op with no entry has its
operands and results replicated."""

SHARDING_RULES.register(g.ElementwiseBinaryOp, g.SelectOp)(_elementwise)
SHARDING_RULES.register(g.ElementwiseUnaryOp, g.CastOp)(_unary)
SHARDING_RULES.register(g.ReductionOp)(_reduction)
SHARDING_RULES.register(g.MatmulOp)(_matmul)
SHARDING_RULES.register(g.TransposeOp)(_transpose)
SHARDING_RULES.register(g.ReshapeOp)(_reshape)
SHARDING_RULES.register(g.BroadcastOp)(_broadcast)
SHARDING_RULES.register(g.SliceOp)(_slice)
SHARDING_RULES.register(g.ConcatOp)(_concat)
SHARDING_RULES.register(g.SoftmaxOp)(_softmax)
SHARDING_RULES.register(g.LogSumExpOp)(_logsumexp)
SHARDING_RULES.register(
    g.LayerNormOp, g.RMSNormOp, g.LayerNormFwdOp, g.RMSNormFwdOp, g.LayerNormBwdOp,
    g.RMSNormBwdOp,
)(_last_dim)
SHARDING_RULES.register(g.FlashAttentionOp)(_last_two_dims)
SHARDING_RULES.register(g.MSEOp)(_mse)
SHARDING_RULES.register(g.Conv2dOp)(_conv2d)


def decide(op: Operation, ins: list[Sharding], mesh: MeshInfo) -> Decision:
    """The rule for ``op`` (global view): its entry in :data:`SHARDING_RULES`, else
    everything replicated."""
    return (SHARDING_RULES.get(op) or _replicate_all)(op, ins, mesh)


def fit(s: Sharding, v_shape: Sequence[int], mesh: MeshInfo) -> Sharding:
    """Drop splits that do not divide their dim (a dim too small stays whole)."""
    sp = []
    for n, axes in zip(v_shape, s.splits):
        keep: list[str] = []
        for a in axes:
            if _divides(mesh, n, [*keep, a]):
                keep.append(a)
            else:
                break
        sp.append(tuple(keep))
    return s.with_splits(sp)


def fit_uneven(
    s: Sharding, v_shape: Sequence[int], mesh: MeshInfo, uneven_ok: set[int]
) -> Sharding:
    """Like ``fit``, but the dims in ``uneven_ok`` keep splits that do not divide them
    (as long as every part gets at least one element)."""
    sp = []
    for d, (n, axes) in enumerate(zip(v_shape, s.splits)):
        keep: list[str] = []
        for a in axes:
            k = mesh.parts([*keep, a])
            if n % k == 0 or (d in uneven_ok and k <= n):
                keep.append(a)
            else:
                break
        sp.append(tuple(keep))
    return s.with_splits(sp)


UnevenRule = Callable[[Operation, list[int], list[int]], tuple[list[set[int]], list[set[int]]]]
"""From the operands' and results' ranks: per operand and result, the dims an uneven split
may stay on."""

UNEVEN_DIMS: OpRegistry[UnevenRule] = OpRegistry("uneven-split rule")
"""Where each op keeps uneven splits (the op never combines elements along those dims, so
padding only makes padding), by op class; an op with no entry keeps none."""


@UNEVEN_DIMS.register(
    g.ElementwiseBinaryOp, g.SelectOp, g.ElementwiseUnaryOp, g.CastOp, g.TransposeOp
)
def _uneven_every(op: Operation, ins: list[int], outs: list[int]):
    return [set(range(r)) for r in ins], [set(range(r)) for r in outs]


@UNEVEN_DIMS.register(g.MatmulOp)
def _uneven_matmul(op: g.MatmulOp, ins: list[int], outs: list[int]):
    ra, rb = ins
    am, bn = (ra - 1 if op.transpose_lhs else ra - 2), (rb - 2 if op.transpose_rhs else rb - 1)
    return [set(range(ra - 2)) | {am}, set(range(rb - 2)) | {bn}], [set(range(r)) for r in outs]


@UNEVEN_DIMS.register(g.ReductionOp, g.LogSumExpOp)
def _uneven_reduction(op: g.AxesReductionOp, ins: list[int], outs: list[int]):
    axes = set(op.axis_list())
    return [set(range(ins[0])) - axes], [set(range(r)) for r in outs]


@UNEVEN_DIMS.register(g.SoftmaxOp)
def _uneven_softmax(op: g.SoftmaxOp, ins: list[int], outs: list[int]):
    ax = op.axis.value.data % ins[0]
    return [set(range(ins[0])) - {ax}], [set(range(outs[0])) - {ax}]


@UNEVEN_DIMS.register(
    g.LayerNormOp, g.RMSNormOp, g.LayerNormFwdOp, g.RMSNormFwdOp, g.LayerNormBwdOp,
    g.RMSNormBwdOp,
)
def _uneven_norm(op: Operation, ins: list[int], outs: list[int]):
    """Rows (every dim but the last) of the operands and results of the input's rank
    (the input, its gradient, the row statistics); none of the weights'."""
    rank = ins[0]

    def rows(r: int) -> set[int]:
        return set(range(r - 1)) if r == rank else set()

    return [rows(r) for r in ins], [rows(r) for r in outs]


def uneven_dims(op: Operation) -> tuple[list[set[int]], list[set[int]]]:
    """For each operand and result of ``op``: the dims an uneven split may stay on
    (:data:`UNEVEN_DIMS`; none for an op without an entry)."""
    ins = [len(shape(v)) for v in op.operands]
    outs = [len(shape(r)) for r in op.results]
    rule = UNEVEN_DIMS.get(op)
    if rule is None:
        return [set() for _ in ins], [set() for _ in outs]
    return rule(op, ins, outs)


def decide_fitted(
    op: Operation, ins: list[Sharding], mesh: MeshInfo
) -> tuple[list[Sharding], list[Sharding]]:
    """The operand and result shardings of ``op`` (global view) that fit their dims:
    ``decide``, then ``fit_uneven`` (uneven splits only where ``uneven_dims`` allows);
    when fitting drops an operand's split, decide again from what remains."""
    ok_in, ok_out = uneven_dims(op)
    dec = decide(op, ins, mesh)
    wants = list(dec.operands)
    for _ in range(len(op.operands) + 1):
        wants = [fit_uneven(w, mesh.shape(v), mesh, ok)
                 for v, w, ok in zip(op.operands, dec.operands, ok_in)]
        if wants == list(dec.operands):
            break
        dec = decide(op, wants, mesh)
    outs = [fit_uneven(s, shape(r), mesh, ok) for s, r, ok in zip(dec.results, op.results, ok_out)]
    return wants, outs


# --------------------------------------------------------------------------- local view


def local_view_result(op: Operation, ins: list[Sharding]) -> list[Sharding]:
    """How a user-written collective changes its operand's sharding (local view)."""
    if isinstance(op, g.RecvOp):
        return [Sharding.replicated(_rank(op.result))]
    if isinstance(op, g.SendOp):
        return []
    s = ins[0]
    ax = op.axis.data
    sp = [tuple(a for a in d if a != ax) for d in s.splits]
    partial = tuple(a for a in s.partial if a != ax)
    if isinstance(op, g.ReduceScatterOp):
        d = op.dim.value.data % s.rank
        sp[d] = (*sp[d], ax)
    elif isinstance(op, g.AllToAllOp):
        d = op.split_dim.value.data % s.rank
        sp[d] = (*sp[d], ax)
    elif isinstance(op, g.AllSliceOp):
        d = op.dim.value.data % s.rank
        sp[d] = (*sp[d], ax)
    return [Sharding(tuple(sp), partial, s.op if partial else "sum")]


# --------------------------------------------------------------------------- helpers


def mesh_of(fn: func.FuncOp) -> MeshInfo | None:
    m = fn.attributes.get(MESH)
    return MeshInfo(m.as_dict()) if isinstance(m, MeshAttr) else None


def _dict_attr(attrs: ArrayAttr[DictionaryAttr] | None, i: int) -> dict[str, Attribute]:
    if attrs is None or i >= len(attrs.data):
        return {}
    return dict(attrs.data[i].data)


def arg_sharding(fn: func.FuncOp, i: int, mesh: MeshInfo) -> Sharding:
    """Argument ``i``'s ``tessera.shard`` (replicated when absent), checked against the mesh."""
    a = _dict_attr(fn.arg_attrs, i).get(SHARD)
    r = _rank(fn.body.block.args[i])
    if a is None:
        return Sharding.replicated(r)
    if not isinstance(a, ShardSpecAttr):
        raise ShardingPassError(f"@{fn.sym_name.data}: argument {i}: tessera.shard must be a #tessera.shard")
    s = Sharding.from_attr(a)
    check_sharding(s, fn, f"argument {i}", r, mesh)
    return s


def result_sharding(fn: func.FuncOp, i: int, rank: int, mesh: MeshInfo) -> Sharding:
    a = _dict_attr(fn.res_attrs, i).get(SHARD)
    if a is None:
        return Sharding.replicated(rank)
    if not isinstance(a, ShardSpecAttr):
        raise ShardingPassError(f"@{fn.sym_name.data}: result {i}: tessera.shard must be a #tessera.shard")
    s = Sharding.from_attr(a)
    check_sharding(s, fn, f"result {i}", rank, mesh)
    return s


def check_sharding(s: Sharding, fn: func.FuncOp, what: str, rank: int, mesh: MeshInfo) -> None:
    where = f"@{fn.sym_name.data}: {what}"
    if s.rank != rank:
        raise ShardingPassError(
            f"{where}: sharding {s.to_attr()} has {s.rank} dims, the tensor has {rank}"
        )
    for a in [*s.axes(), *s.partial]:
        if a not in mesh.sizes:
            raise ShardingPassError(
                f"{where}: mesh has no axis '{a}' (axes: {', '.join(mesh.sizes)})"
            )


def has_user_collectives(fn: func.FuncOp) -> bool:
    return any(isinstance(op, USER_COLLECTIVES) for op in fn.walk())


def annotate(op: Operation, shs: Sequence[Sharding]) -> None:
    if shs:
        op.attributes[SHARD] = ArrayAttr([s.to_attr() for s in shs])


def propagate(fn: func.FuncOp, view: str = "auto") -> dict[SSAValue, Sharding]:
    """Annotate every op of ``fn`` with its results' shardings; return them by value."""
    mesh = mesh_of(fn)
    if mesh is None:
        return {}
    local = view == "local" or (view == "auto" and has_user_collectives(fn))
    sh: dict[SSAValue, Sharding] = {}
    for i, arg in enumerate(fn.body.block.args):
        sh[arg] = arg_sharding(fn, i, mesh)
    for op in list(fn.body.block.ops):
        if isinstance(op, func.ReturnOp):
            continue
        ins = [sh.get(v, Sharding.replicated(_rank(v))) for v in op.operands]
        if isinstance(op, USER_COLLECTIVES):
            if not local:
                raise ShardingPassError(
                    f"{op.name}: collectives written in the program make it a per-rank "
                    "(local view) program, but view=global was asked"
                )
            outs = local_view_result(op, ins)
        else:
            _, outs = decide_fitted(op, ins, mesh)
        for r, s in zip(op.results, outs):
            sh[r] = s
        annotate(op, outs)
    return sh


@dataclass(frozen=True)
class ShardPropagationPass(ModulePass):
    """Annotate every op of each function that has a ``tessera.mesh`` with its results'
    shardings (``tessera.shard``). ``view``: ``auto`` (local view when the program has
    collectives), ``global`` or ``local``."""

    name = "shard-propagation"
    view: str = "auto"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        if self.view not in ("auto", "global", "local"):
            raise ShardingPassError(f"shard-propagation: unknown view '{self.view}'")
        for fn in op.walk():
            if isinstance(fn, func.FuncOp) and MESH in fn.attributes:
                propagate(fn, self.view)
