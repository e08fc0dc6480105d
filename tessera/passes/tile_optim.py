"""Multi-tensor Tile IR kernels of the optimizer updates (``tgraph.adamw_update``,
``tgraph.sgd_update``).

One kernel updates many tensors: its parameters are ``hyper`` and, per tensor, the
buffers of the parameter, its gradient and its state, each viewed as a flat vector.
Tensor ``i`` of ``n_i`` elements is cut into 16-byte vectors (``w`` elements) and a
tail of ``n_i mod w`` elements; it gets ``T_i = ceil(slots_i / (LANES * UNROLL))``
consecutive tiles of the grid, where ``slots_i`` counts its vectors plus one slot for
the tail. A tile finds its tensor by a binary search over the static tile offsets
(``scf.if`` on the tile id: ``log2(tensors)`` compares, then only that tensor's code
runs), and each lane updates ``UNROLL`` vectors ``LANES`` apart with 16-byte loads and
stores; the lane holding the tail slot updates the tail element by element. Math is
in f32 (f64 for f64 tensors), in the order the reference semantics use, with IEEE
rounding on every operation, so the kernels compute the interpreter's bits.

The updated buffers (parameters and state) are written in place: the op's results
take them over when they are arguments of the function that the caller donated
(``tessera.donate``, :meth:`_FunctionLowering.donated`), and are fresh copies
otherwise. A kernel takes at most :data:`MAX_TENSORS` tensors and
:data:`MAX_PARAM_BYTES` of parameters, so long tensor lists are split into several
launches (of about equal size).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import math
from xdsl.dialects.builtin import MemRefType, VectorType
from xdsl.ir import Attribute, Operation, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import KernelEmitter, cdiv, compute_type, float_elem
from tessera.passes.tile_datamove import VECTOR_BYTES, elem_bytes, reshape_view

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

LANES = 256
"""Lanes per tile."""

UNROLL = 1
"""16-byte vectors per lane and tensor buffer (all loads of a lane are issued before its
math)."""

MAX_PARAM_BYTES = 4000
"""Kernel parameter bytes per launch (the CUDA limit is 4096): a kernel of the AdamW
update takes ``(4000 - 8) // 32 = 124`` tensors."""

MAX_TENSORS = 32
"""Tensors per launch at most: a kernel holds one copy of the update per tensor, and
its branches make compile time grow faster than its size (a few launches more cost
microseconds)."""

Update = Callable[[KernelEmitter, list[SSAValue], list[SSAValue]], list[SSAValue]]
"""``update(e, hyper, values) -> new values``: the per-element math on compute-type
scalars; ``values`` are one element of each buffer of a tensor (updated ones first, then
the read-only ones), the result the new values of the updated buffers."""


def _flat(fl: _FunctionLowering, m: SSAValue) -> SSAValue:
    t = m.type
    assert isinstance(t, MemRefType)
    return reshape_view(fl, m, MemRefType(t.element_type, [max(1, prod(t.get_shape()))]))


def _in_place(fl: _FunctionLowering, v: SSAValue) -> SSAValue:
    """The buffer an update of tensor ``v`` may write: ``v``'s own when the caller donated
    it (and no other result has taken it), else a fresh copy."""
    m = fl.mem(v)
    if fl.donated(v):
        return m
    return fl.copy(v, m)


def lower_multi_tensor(
    fl: _FunctionLowering, op: Operation, tag: str,
    updated: Sequence[Sequence[SSAValue]], read: Sequence[Sequence[SSAValue]],
    results: Sequence[Sequence[SSAValue]], hyper: SSAValue, hyper_len: int, update: Update,
    consts: Sequence[float] = (),
) -> None:
    """Lower a multi-tensor update: ``updated[k][i]`` (written as ``results[k][i]``) and
    ``read[k][i]`` are the buffers of tensor ``i``; ``update`` is the per-element math,
    whose first argument holds the ``hyper`` entries and then ``consts`` (emitted once
    per kernel)."""
    n = len(updated[0])
    et = float_elem(op, updated[0][0].type)
    ct = compute_type(et)
    eb = elem_bytes(et)
    w = VECTOR_BYTES // eb if eb else 1
    out: list[list[SSAValue]] = []
    for vals, res in zip(updated, results):
        bufs = [_in_place(fl, v) for v in vals]
        for r, b in zip(res, bufs):
            fl.env[r] = b
        out.append(bufs)
    ins = [[fl.mem(v) for v in vals] for vals in read]
    per_tensor = len(updated) + len(read)
    cap = max(1, min(MAX_TENSORS, (MAX_PARAM_BYTES - 8) // (8 * per_tensor)))
    launches = cdiv(n, cap)
    size = cdiv(n, launches)
    hyper_buf = fl.mem(hyper)
    for start in range(0, n, size):
        idx = [i for i in range(start, min(n, start + size))
               if prod(g.shape_of(updated[0][i])) > 0]
        if not idx:
            continue
        sizes = [prod(g.shape_of(updated[0][i])) for i in idx]
        args: list[SSAValue] = [hyper_buf]
        for i in idx:
            args += [_flat(fl, b[i]) for b in out] + [_flat(fl, b[i]) for b in ins]
        _kernel(fl, tag, args, sizes, len(out), w, ct, hyper_len, consts, update)


def _kernel(
    fl: _FunctionLowering, tag: str, args: list[SSAValue], sizes: list[int], n_updated: int,
    w: int, ct: Attribute, hyper_len: int, consts: Sequence[float], update: Update,
) -> None:
    per_tile = LANES * UNROLL
    per = len(args[1:]) // len(sizes)
    offsets = [0]
    for n in sizes:
        slots = n // w + (1 if n % w else 0)
        offsets.append(offsets[-1] + cdiv(slots, per_tile))

    def build(e: KernelEmitter, refs: list[SSAValue]) -> None:
        hyper = [e.convert(e.load(refs[0], [k]), ct) for k in range(hyper_len)]
        hyper += [e.const(c, ct) for c in consts]
        t = e.tile_id("x")
        lane = e.local_id()

        def tensor(e: KernelEmitter, i: int) -> list[SSAValue]:
            bufs = refs[1 + i * per: 1 + (i + 1) * per]
            n = sizes[i]
            nv = n // w
            base = e.add(e.mul(e.sub(t, offsets[i]), per_tile), lane)
            for k in range(UNROLL):
                j = e.add(base, k * LANES)
                if nv:
                    _vector(e, bufs, j, nv, w, n_updated, ct, hyper, update)
                if n % w:
                    tail = e.eq(j, nv)
                    for x in range(nv * w, n):
                        _scalar(e, bufs, x, tail, n_updated, ct, hyper, update)
            return []

        def search(e: KernelEmitter, lo: int, hi: int) -> list[SSAValue]:
            if hi - lo == 1:
                return tensor(e, lo)
            mid = (lo + hi) // 2
            e.if_(e.lt(t, offsets[mid]), lambda e: search(e, lo, mid),
                  lambda e: search(e, mid, hi))
            return []

        search(e, 0, len(sizes))

    fl.kernel(tag, args, LANES, [offsets[-1], 1, 1], build)


def _vector(
    e: KernelEmitter, bufs: list[SSAValue], j: SSAValue | int, nv: int, w: int,
    n_updated: int, ct: Attribute, hyper: list[SSAValue], update: Update,
) -> None:
    """Update vector ``j`` (elements ``j*w ...``) of one tensor when ``j < nv``."""
    ok = e.lt(j, nv)
    at = [e.index(e.mul(j, w))]
    loaded = [e.op(tt.LoadVectorOp(b, at, w, ok)) for b in bufs]
    news: list[list[SSAValue]] = []
    for x in range(w):
        vals = [e.convert(e.extract(v, x), ct) for v in loaded]
        news.append(update(e, hyper, vals))
    for k in range(n_updated):
        et = loaded[k].type
        assert isinstance(et, VectorType)
        v = e.const(0.0, et)
        for x in range(w):
            v = e.insert(e.convert(news[x][k], et.element_type), v, x)
        e.emit(tt.StoreVectorOp(v, bufs[k], at, ok))


def _scalar(
    e: KernelEmitter, bufs: list[SSAValue], x: int, ok: SSAValue, n_updated: int,
    ct: Attribute, hyper: list[SSAValue], update: Update,
) -> None:
    """Update element ``x`` of one tensor when ``ok``."""
    vals = [e.load(b, [x], mask=ok) for b in bufs]
    st = vals[0].type
    new = update(e, hyper, [e.convert(v, ct) for v in vals])
    for k in range(n_updated):
        e.store(e.convert(new[k], st), bufs[k], [x], mask=ok)


# --------------------------------------------------------------------------- the updates


def lower_adamw(fl: _FunctionLowering, op: g.AdamWUpdateOp) -> None:
    """``tgraph.adamw_update`` (the formula of :class:`tessera.ir.graph.AdamWUpdateOp`)."""
    b1, b2, eps = op.beta1.value.data, op.beta2.value.data, op.eps.value.data

    def update(e: KernelEmitter, h: list[SSAValue], vals: list[SSAValue]) -> list[SSAValue]:
        decay, step_size, bc2, cb1, cc1, cb2, cc2, ceps = h
        p, m, v, gr = vals
        p = e.fmul(p, decay)
        m = e.fadd(e.fmul(cb1, m), e.fmul(cc1, gr))
        v = e.fadd(e.fmul(cb2, v), e.fmul(cc2, e.fmul(gr, gr)))
        denom = e.fadd(e.fdiv(e.op(math.SqrtOp(v)), bc2), ceps)
        p = e.fsub(p, e.fdiv(e.fmul(step_size, m), denom))
        return [p, m, v]

    lower_multi_tensor(
        fl, op, "adamw",
        [op.params, op.exp_avgs, op.exp_avg_sqs], [op.grads],
        [op.new_params, op.new_exp_avgs, op.new_exp_avg_sqs],
        op.hyper, len(g.ADAMW_HYPER), update, (b1, 1.0 - b1, b2, 1.0 - b2, eps),
    )


def lower_sgd(fl: _FunctionLowering, op: g.SGDUpdateOp) -> None:
    """``tgraph.sgd_update`` (the formula of :class:`tessera.ir.graph.SGDUpdateOp`)."""
    wd = op.weight_decay.value.data
    mom = op.momentum.value.data
    nesterov = op.nesterov is not None
    has_buf = bool(op.momentum_buffers)

    def update(e: KernelEmitter, h: list[SSAValue], vals: list[SSAValue]) -> list[SSAValue]:
        lr, buf_scale, grad_scale, cwd, cmom = h
        p = vals[0]
        d = vals[-1]
        if wd != 0.0:
            d = e.fadd(d, e.fmul(cwd, p))
        out = []
        if has_buf:
            buf = e.fadd(e.fmul(buf_scale, vals[1]), e.fmul(grad_scale, d))
            out.append(buf)
            d = e.fadd(d, e.fmul(cmom, buf)) if nesterov else buf
        return [e.fsub(p, e.fmul(lr, d)), *out]

    updated = [op.params, *([op.momentum_buffers] if has_buf else [])]
    results = [op.new_params, *([op.new_momentum_buffers] if has_buf else [])]
    lower_multi_tensor(fl, op, "sgd", updated, [op.grads], results,
                       op.hyper, len(g.SGD_HYPER), update, (wd, mom))


def register(registry: object) -> None:
    """Register this module's lowerings in the Tile IR lowering registry."""
    registry.register(g.AdamWUpdateOp)(lower_adamw)  # type: ignore[attr-defined]
    registry.register(g.SGDUpdateOp)(lower_sgd)  # type: ignore[attr-defined]


