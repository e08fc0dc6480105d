"""``spmd-partition``: turn a global-view Graph IR function into the per-rank program.

The input is a function with a ``tessera.mesh`` attribute whose types are global
shapes and whose arguments carry ``tessera.shard`` layouts. Using the rules of
``shard-propagation``, the pass

* rewrites every value to its per-rank (local) shape,
* inserts the collectives that give each op the operand sharding it needs:
  ``all_reduce`` / ``reduce_scatter`` for partial values, ``all_gather`` to
  un-split a dimension, ``all_to_all`` to move a mesh axis from one dimension to
  another, ``all_slice`` to split a replicated dimension,
* brings each result to the layout its ``tessera.shard`` result attribute asks
  for (replicated when absent, so every rank returns the global value),
* for pipelines: ops carrying ``tessera.stage = k`` run on the ranks whose
  coordinate on the pipeline axis (``pp``, option ``stage-axis``) is ``k``; a value
  used by a later stage is sent with ``tgraph.send`` / ``tgraph.recv``.

**Uneven splits.** A dim of global size ``n`` split into ``P`` parts that do not
divide it has local size ``ceil(n / P)``; the blocks are those of
``tessera.dist.sharding`` (padding at the global tail). Such a split is kept
through ops that never mix elements along that dim (elementwise ops, casts,
transposes, the M/N/batch dims of matmul, the dims a reduction, softmax or norm
does not reduce), where the padding only produces more padding. Before any other
use the value is gathered (``all_gather`` per axis, then ``tgraph.slice`` drops the
padding); an uneven split is made by padding with a zero ``tgraph.concat`` and
``all_slice``. So reductions and contractions never see padding.

Every op keeps its results' shardings in ``tessera.shard``; the function gets
``tessera.spmd = "local"``. Functions that already contain collectives are
per-rank programs: they are only annotated (see ``shard-propagation``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.dialects.builtin import (
    AnyFloat,
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from tessera.ir import graph as g
from tessera.passes.shard_propagation import (
    STAGE,
    MeshInfo,
    Sharding,
    ShardingPassError,
    annotate,
    arg_sharding,
    decide_fitted,
    has_user_collectives,
    mesh_of,
    propagate,
    result_sharding,
    shape,
)

SPMD = "tessera.spmd"


def local_type(t: Attribute, s: Sharding, mesh: MeshInfo, where: str) -> Attribute:
    """The per-rank tensor type of global type ``t`` under sharding ``s``: ``ceil(n / P)``
    along a dim split into ``P`` parts (padded blocks when ``P`` does not divide ``n``)."""
    if not isinstance(t, TensorType):
        # Only tensors are split; any other value (an index, a per-rank memref) is the
        # same on every rank.
        if any(s.splits):
            raise ShardingPassError(f"{where}: only tensors can be sharded, got {t}")
        return t
    out = []
    for d, (n, axes) in enumerate(zip(t.get_shape(), s.splits)):
        k = mesh.parts(axes)
        if k > n:
            names = " x ".join(f"'{a}' ({mesh.sizes[a]})" for a in axes)
            raise ShardingPassError(
                f"{where}: dim {d} of size {n} is split over mesh axes {names} = {k} parts, "
                "more parts than elements"
            )
        out.append(-(-n // k))
    return TensorType(t.element_type, out, t.encoding)


def _with_dim(t: Attribute, d: int, n: int) -> TensorType:
    assert isinstance(t, TensorType)
    s = list(t.get_shape())
    s[d] = n
    return TensorType(t.element_type, s, t.encoding)


class _Partitioner:
    def __init__(self, fn: func.FuncOp, mesh: MeshInfo, stage_axis: str):
        self.fn = fn
        self.mesh = mesh
        mesh.global_shape = self._global_shape
        self.sh: dict[SSAValue, Sharding] = {}
        self.gshape: dict[SSAValue, tuple[int, ...]] = {}
        """The global shape of each value (local shapes of uneven splits are padded)."""
        self.stage: dict[SSAValue, int | None] = {}
        self.stage_axis = stage_axis if stage_axis in mesh.sizes else None
        self.sent: dict[tuple[SSAValue, int], SSAValue] = {}
        self.moved: dict[tuple[SSAValue, Sharding], SSAValue] = {}

    # ---------------------------------------------------------------- building blocks

    def _insert(self, before: Operation, op: Operation, s: Sharding | None, stage: int | None) -> None:
        Rewriter.insert_op(op, InsertPoint.before(before))
        if s is not None:
            annotate(op, [s])
        if stage is not None:
            op.attributes[STAGE] = IntegerAttr(stage, i64)

    def _collective(
        self, kind: type[g.CollectiveOp], v: SSAValue, rtype: Attribute, axis: str,
        props: dict[str, Attribute], s: Sharding, before: Operation, stage: int | None,
    ) -> SSAValue:
        op = kind.create(
            operands=[v], result_types=[rtype],
            properties={"axis": StringAttr(axis), **props},
        )
        self._insert(before, op, s, stage)
        return op.results[0]

    def redistribute(
        self, v: SSAValue, dst: Sharding, before: Operation, stage: int | None
    ) -> SSAValue:
        """``v`` (with its current sharding) moved to sharding ``dst``."""
        src = self.sh[v]
        if src == dst:
            return v
        key = (v, dst)
        if key in self.moved:
            return self.moved[key]
        cur_v, cur = v, src
        splits = [list(d) for d in cur.splits]
        partial = list(cur.partial)
        gsh = self._global_shape(v)

        def now() -> Sharding:
            return Sharding(
                tuple(tuple(d) for d in splits), tuple(partial), cur.op if partial else "sum"
            )

        def dim(n: int) -> IntegerAttr:
            return IntegerAttr(n, i64)

        def uneven(d: int, axes: Sequence[str]) -> bool:
            return bool(axes) and gsh[d] % self.mesh.parts(axes) != 0

        def gather_whole(x: SSAValue, d: int) -> SSAValue:
            """Un-split dim ``d`` over all its axes, then drop the padding."""
            while splits[d]:
                a = splits[d].pop()
                t = _with_dim(x.type, d, shape(x)[d] * self.mesh.sizes[a])
                x = self._collective(g.AllGatherOp, x, t, a, {"dim": dim(d)}, now(), before, stage)
            if shape(x)[d] != gsh[d]:
                x = self._slice_dim(x, d, gsh[d], now(), before, stage)
            return x

        # 1. pending reductions
        for a in list(partial):
            if a in dst.partial:
                continue
            partial.remove(a)
            d = next(
                (
                    d for d in range(len(splits))
                    if list(dst.splits[d][: len(splits[d]) + 1]) == [*splits[d], a]
                ),
                None,
            )
            op_attr = StringAttr(cur.op)
            if d is not None and not uneven(d, [*splits[d], a]):
                n = shape(cur_v)[d] // self.mesh.sizes[a]
                splits[d].append(a)
                cur_v = self._collective(
                    g.ReduceScatterOp, cur_v, _with_dim(cur_v.type, d, n), a,
                    {"op": op_attr, "dim": dim(d)}, now(), before, stage,
                )
            else:
                cur_v = self._collective(
                    g.AllReduceOp, cur_v, cur_v.type, a, {"op": op_attr}, now(), before, stage
                )
        if set(dst.partial) - set(cur.partial):
            raise ShardingPassError(
                f"{before.name}: cannot make a value partial over {list(dst.partial)}"
            )
        # 2. un-split what dst does not split the same way (minor axis first); an uneven
        # split is gathered whole and its padding dropped
        for d in range(len(splits)):
            if splits[d] != list(dst.splits[d][: len(splits[d])]) and uneven(d, splits[d]):
                cur_v = gather_whole(cur_v, d)
            while splits[d] != list(dst.splits[d][: len(splits[d])]):
                a = splits[d].pop()
                e = next(
                    (
                        e for e in range(len(splits))
                        if e != d and list(dst.splits[e][: len(splits[e]) + 1]) == [*splits[e], a]
                    ),
                    None,
                )
                sz = self.mesh.sizes[a]
                if (
                    e is not None
                    and shape(cur_v)[e] % sz == 0
                    and not uneven(e, [*splits[e], a])
                ):
                    t = _with_dim(_with_dim(cur_v.type, e, shape(cur_v)[e] // sz), d,
                                  shape(cur_v)[d] * sz)
                    splits[e].append(a)
                    cur_v = self._collective(
                        g.AllToAllOp, cur_v, t, a,
                        {"split_dim": dim(e), "concat_dim": dim(d)}, now(), before, stage,
                    )
                else:
                    t = _with_dim(cur_v.type, d, shape(cur_v)[d] * sz)
                    cur_v = self._collective(
                        g.AllGatherOp, cur_v, t, a, {"dim": dim(d)}, now(), before, stage
                    )
        # 3. split what dst splits further; an uneven split starts from the whole dim,
        # padded with zeros to a multiple of its parts
        for d in range(len(splits)):
            if dst.splits[d][len(splits[d]):] and uneven(d, dst.splits[d]):
                cur_v = gather_whole(cur_v, d)
                k = self.mesh.parts(dst.splits[d])
                cur_v = self._pad_dim(cur_v, d, -(-gsh[d] // k) * k, now(), before, stage)
            for a in dst.splits[d][len(splits[d]):]:
                splits[d].append(a)
                t = _with_dim(cur_v.type, d, shape(cur_v)[d] // self.mesh.sizes[a])
                cur_v = self._collective(
                    g.AllSliceOp, cur_v, t, a, {"dim": dim(d)}, now(), before, stage
                )
        self.sh[cur_v] = now()
        self.gshape[cur_v] = gsh
        self.stage[cur_v] = stage if stage is not None else self.stage.get(v)
        self.moved[key] = cur_v
        return cur_v

    def _slice_dim(
        self, x: SSAValue, d: int, n: int, s: Sharding, before: Operation, stage: int | None
    ) -> SSAValue:
        """The first ``n`` elements of dim ``d`` of ``x`` (drops the padding at the tail)."""
        sh = list(shape(x))
        lim = [*sh[:d], n, *sh[d + 1:]]
        op = g.SliceOp.create(
            operands=[x], result_types=[_with_dim(x.type, d, n)],
            properties={
                "start": DenseArrayBase.from_list(i64, [0] * len(sh)),
                "limit": DenseArrayBase.from_list(i64, lim),
                "stride": DenseArrayBase.from_list(i64, [1] * len(sh)),
            },
        )
        self._insert(before, op, s, stage)
        return op.results[0]

    def _pad_dim(
        self, x: SSAValue, d: int, n: int, s: Sharding, before: Operation, stage: int | None
    ) -> SSAValue:
        """``x`` extended with zeros along dim ``d`` to ``n`` elements."""
        t = x.type
        assert isinstance(t, TensorType)
        extra = n - shape(x)[d]
        if extra == 0:
            return x
        elem = t.element_type
        if isinstance(elem, IntegerType):
            value = DenseIntOrFPElementsAttr.from_list(TensorType(elem, []), [0])
        elif isinstance(elem, AnyFloat):
            value = DenseIntOrFPElementsAttr.from_list(TensorType(elem, []), [0.0])
        else:
            raise ShardingPassError(
                f"{before.name}: cannot pad a {elem} tensor for an uneven split of dim {d}"
            )
        zeros = g.ConstantOp(value, _with_dim(t, d, extra))
        self._insert(before, zeros, s, stage)
        cat = g.ConcatOp.create(
            operands=[x, zeros.results[0]], result_types=[_with_dim(t, d, n)],
            properties={"axis": IntegerAttr(d, i64)},
        )
        self._insert(before, cat, s, stage)
        return cat.results[0]

    def to_stage(self, v: SSAValue, t: int | None, before: Operation) -> SSAValue:
        """``v`` made available at pipeline stage ``t`` (send/recv along the stage axis)."""
        s = self.stage.get(v)
        if t is None or s is None or s == t:
            return v
        if t < s:
            raise ShardingPassError(
                f"{before.name}: runs at stage {t} but uses a value computed at later stage {s}"
            )
        key = (v, t)
        if key not in self.sent:
            assert self.stage_axis is not None
            send = g.SendOp.create(
                operands=[v],
                properties={"axis": StringAttr(self.stage_axis), "peer": IntegerAttr(t - s, i64)},
            )
            self._insert(before, send, None, s)
            recv = g.RecvOp.create(
                result_types=[v.type],
                properties={"axis": StringAttr(self.stage_axis), "peer": IntegerAttr(s - t, i64)},
            )
            self._insert(before, recv, self.sh[v], t)
            self.sh[recv.results[0]] = self.sh[v]
            self.gshape[recv.results[0]] = self._global_shape(v)
            self.stage[recv.results[0]] = t
            self.sent[key] = recv.results[0]
        return self.sent[key]

    def op_stage(self, op: Operation) -> int | None:
        a = op.attributes.get(STAGE)
        if isinstance(a, IntegerAttr):
            if self.stage_axis is None:
                raise ShardingPassError(
                    f"{op.name}: has tessera.stage but the mesh has no pipeline axis"
                )
            n = self.mesh.sizes[self.stage_axis]
            if not 0 <= a.value.data < n:
                raise ShardingPassError(
                    f"{op.name}: stage {a.value.data} is outside pipeline axis "
                    f"'{self.stage_axis}' of size {n}"
                )
            return a.value.data
        st = [self.stage.get(v) for v in op.operands]
        known = [s for s in st if s is not None]
        return max(known) if known else None

    # ---------------------------------------------------------------- the walk

    def run(self) -> None:
        fn, mesh = self.fn, self.mesh
        name = f"@{fn.sym_name.data}"
        block = fn.body.block
        for i, arg in enumerate(list(block.args)):
            s = arg_sharding(fn, i, mesh)
            lt = local_type(arg.type, s, mesh, f"{name}: argument {i}")
            gs = shape(arg)
            new = Rewriter.replace_value_with_new_type(arg, lt) if lt != arg.type else arg
            self.sh[new] = s
            self.gshape[new] = gs
            self.stage[new] = None
        for op in list(block.ops):
            if isinstance(op, func.ReturnOp):
                self._return(op)
                continue
            stage = self.op_stage(op)
            ins = [self.sh[v] for v in op.operands]
            wants, outs = decide_fitted(op, ins, mesh)
            operands = []
            for v, want in zip(op.operands, wants):
                v2 = self.to_stage(v, stage, op)
                operands.append(self.redistribute(v2, want, op, stage))
            gshapes = [shape(r) for r in op.results]
            rtypes = [
                local_type(r.type, s, mesh, f"{op.name}: result")
                for r, s in zip(op.results, outs)
            ]
            props = dict(op.properties)
            if isinstance(op, g.SliceOp):
                lim = list(op.limit.get_values())
                for d, axes in enumerate(outs[0].splits):
                    if axes:
                        lim[d] //= mesh.parts(axes)
                props["limit"] = DenseArrayBase.from_list(i64, lim)
            new = type(op).create(
                operands=operands, result_types=rtypes, properties=props,
                attributes=dict(op.attributes), successors=list(op.successors),
                regions=[op.detach_region(r) for r in list(op.regions)],
            )
            annotate(new, outs)
            if stage is not None:
                new.attributes[STAGE] = IntegerAttr(stage, i64)
            Rewriter.replace_op(op, new)
            for r, s, gs in zip(new.results, outs, gshapes):
                self.sh[r] = s
                self.gshape[r] = gs
                self.stage[r] = stage
        fn.attributes[SPMD] = StringAttr("local")
        fn.update_function_type()

    def _global_shape(self, v: SSAValue) -> tuple[int, ...]:
        if v in self.gshape:
            return self.gshape[v]
        s = self.sh.get(v)
        if s is None:
            return shape(v)
        return tuple(n * self.mesh.parts(a) for n, a in zip(shape(v), s.splits))

    def _return(self, op: func.ReturnOp) -> None:
        outs = []
        for i, v in enumerate(op.operands):
            want = result_sharding(self.fn, i, len(shape(v)), self.mesh)
            outs.append(self.redistribute(v, want, op, self.stage.get(v)))
        new = func.ReturnOp(*outs)
        Rewriter.replace_op(op, new)


def _stage_attrs(fn: func.FuncOp) -> None:
    """Record each result's stage in the result attributes (``tessera.stage``)."""
    ret = fn.body.block.last_op
    if not isinstance(ret, func.ReturnOp):
        return
    res = [
        dict(fn.res_attrs.data[i].data) if fn.res_attrs and i < len(fn.res_attrs.data) else {}
        for i in range(len(ret.operands))
    ]
    changed = False
    for i, v in enumerate(ret.operands):
        owner = v.owner
        if isinstance(owner, Operation) and STAGE in owner.attributes:
            res[i][STAGE] = owner.attributes[STAGE]
            changed = True
    if changed:
        fn.res_attrs = ArrayAttr([DictionaryAttr(d) for d in res])


def partition_function(fn: func.FuncOp, stage_axis: str = "pp") -> None:
    """Partition one function in place (no-op when it has no mesh or is already local)."""
    mesh = mesh_of(fn)
    if mesh is None or SPMD in fn.attributes:
        return
    if has_user_collectives(fn):
        propagate(fn, "local")
        fn.attributes[SPMD] = StringAttr("local")
        return
    _Partitioner(fn, mesh, stage_axis).run()
    _stage_attrs(fn)


@dataclass(frozen=True)
class SPMDPartitionPass(ModulePass):
    """Rewrite each global-view function with a ``tessera.mesh`` into its per-rank
    program with explicit collectives (see the module docstring)."""

    name = "spmd-partition"
    stage_axis: str = "pp"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        fns: Sequence[Operation] = [f for f in op.walk() if isinstance(f, func.FuncOp)]
        for fn in fns:
            assert isinstance(fn, func.FuncOp)
            partition_function(fn, self.stage_axis)
