"""``lower-graph-to-tile``: Graph IR functions to Tile IR kernels plus a host function.

Every ``func.func`` that works on tensors is rewritten into a host
``func.func`` of the same name taking and returning memrefs. Each ``tgraph``
op becomes one or more ``ttile.kernel`` ops (named ``<func>_<op>_<n>``) and
``ttile.launch``es of them on freshly allocated buffers (``memref.alloc``).
Ragged edges are masked. Tile shapes and lane counts follow the heuristics
documented in docs/TILE_IR.md. An op without a lowering raises
``NotImplementedError`` naming it.
"""

from __future__ import annotations

import math as pymath
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, func, math, memref
from xdsl.dialects.builtin import (
    BFloat16Type,
    ComplexType,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    StringAttr,
    TensorType,
    UnitAttr,
    f32,
    i1,
)
from xdsl.ir import Attribute, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.ir.attrs import NumericPolicyAttr, rounds_specially
from tessera.ir.registry import OpRegistry
from tessera.passes import (
    tile_attention,
    tile_attention_bwd,
    tile_collectives,
    tile_colreduce,
    tile_complex,
    tile_conv,
    tile_datamove,
    tile_fft,
    tile_fused_maps,
    tile_fused_rows,
    tile_gather,
    tile_linalg,
    tile_optim,
    tile_random,
    tile_rowreduce,
    tile_rowwise,
    tile_sparse,
    tile_splitreduce,
    tile_support,
)
from tessera.passes.dedupe_kernels import KERNEL_OPS, kernel_fingerprint
from tessera.passes.expand_attention_grad import expand_attention_grads
from tessera.passes.tile_builder import (
    Idx,
    KernelEmitter,
    cdiv,
    compute_type,
    is_float,
    not_lowered,
)
from tessera.passes.tile_fft import complex_memref
from tessera.passes.tile_numerics import (
    is_narrow_cast,
    lower_narrow_cast,
    packed_format,
    storage_memref,
)
from tessera.passes.tile_policy import (
    lower_packed_matmul,
    lower_policy_cast,
    lower_with_policy,
    rounding_policy,
)

ELEMENTWISE_GROUP = 256
ROW_MAP_MIN = 64
"""Shortest row that elementwise kernels which cannot vectorize map as rows
(:meth:`_FunctionLowering._row_map`) rather than one flat index per lane."""
ROW_MAP_UNROLL = 4
"""Elements of a row per lane in :meth:`_FunctionLowering._row_map`."""
MAX_GRID_Y = 65535
"""CUDA's largest grid extent in y."""
ROW_GROUP = 128
_COMPLEX_OPS = (g.FFTOp, g.FFT2dOp, g.RealOp, g.ImagOp, g.ComplexOp)
"""The ops besides complex elementwise arithmetic (``tile_complex``) that read or write
complex tensors (interleaved pairs)."""

IndexFn = Callable[[KernelEmitter, list[Idx], Idx], list[Idx]]


def memref_of(t: Attribute) -> Attribute:
    """The memref type holding a tensor of type ``t`` (scalars pass through).

    fp6/fp4 tensors are stored packed in ``i8`` rows (``tile_numerics.storage_memref``);
    ``complex<fT>`` tensors as interleaved (real, imaginary) pairs in a ``memref`` of
    ``fT`` with a trailing dim of 2 (``tile_fft.complex_memref``).
    """
    if isinstance(t, TensorType):
        if isinstance(t.element_type, ComplexType):
            return complex_memref(t)
        return storage_memref(t)
    return t


def _bcast_index(in_shape: Sequence[int], out_shape: Sequence[int]) -> IndexFn:
    off = len(out_shape) - len(in_shape)

    def fn(e: KernelEmitter, idx: list[Idx], lin: Idx) -> list[Idx]:
        return [idx[k + off] if d != 1 else 0 for k, d in enumerate(in_shape)]

    return fn


def _identity_index(e: KernelEmitter, idx: list[Idx], lin: Idx) -> list[Idx]:
    return idx



def _reduce_init(kind: str, t: Attribute) -> float | int:
    if kind == "sum":
        return 0
    if is_float(t):
        return -pymath.inf if kind == "max" else pymath.inf
    assert isinstance(t, IntegerType)
    w = t.width.data
    return -(2 ** (w - 1)) if kind == "max" else 2 ** (w - 1) - 1


def _combine(e: KernelEmitter, kind: str, a: SSAValue, b: SSAValue) -> SSAValue:
    f = is_float(a.type)
    if kind == "sum":
        return e.op(arith.AddfOp(a, b) if f else arith.AddiOp(a, b))
    if kind == "max":
        return e.op(arith.MaximumfOp(a, b) if f else arith.MaxSIOp(a, b))
    return e.op(arith.MinimumfOp(a, b) if f else arith.MinSIOp(a, b))


def _accum_type(t: Attribute, op: Operation) -> Attribute:
    if t == i1:
        raise not_lowered(op, "boolean operands")
    if isinstance(t, Float64Type):
        return t
    if is_float(t):
        if not isinstance(t, Float32Type | Float16Type | BFloat16Type):
            raise not_lowered(op, f"element type {t}")
        return f32
    return t


@dataclass
class _Row:
    """Rows for reductions: kept dims (one tile each) and reduced dims (strided by lanes)."""

    shape: tuple[int, ...]
    axes: list[int]

    @property
    def kept(self) -> list[int]:
        return [d for k, d in enumerate(self.shape) if k not in self.axes]

    @property
    def red(self) -> list[int]:
        return [d for k, d in enumerate(self.shape) if k in self.axes]

    def index(self, e: KernelEmitter, o: Idx, r: Idx) -> list[Idx]:
        oi = iter(e.unravel(o, self.kept))
        ri = iter(e.unravel(r, self.red))
        return [next(ri) if k in self.axes else next(oi) for k in range(len(self.shape))]

    def group(self) -> tuple[int, str]:
        n = prod(self.red)
        return (32, "warp") if n <= 32 else (ROW_GROUP, "group")


KERNEL_MEMO = True
"""False: every op lowers to kernels of its own (equal ones merged by ``dedupe-kernels``)."""

CHECK_KERNEL_MEMO = False
"""True: build every kernel even when the memo has an equal one, and fail if they differ
(tests/passes/test_kernel_memo.py)."""


def _producer_key(v: SSAValue) -> Hashable:
    """What a lowering could see of the op producing ``v`` (function arguments alike)."""
    o = v.owner
    if not isinstance(o, Operation):
        return "arg"
    return (o.name, tuple(sorted(o.properties.items())), tuple(sorted(o.attributes.items())),
            tuple(r.type for r in o.results), v.index if isinstance(v, OpResult) else -1)


_EMPTY_OPERANDS_LOWERED: tuple[type[Operation], ...] = (g.SpMMOp, g.SpMMTransposeOp, g.SDDMMOp)
"""Ops whose lowerings take operands of no elements (a sparse matrix without nonzeros)."""


def _all_results_empty(op: Operation) -> bool:
    """Whether ``op`` has results and every one is a tensor of no elements (Graph IR ops
    have no effects besides their results)."""
    return bool(op.results) and all(
        isinstance(r.type, TensorType) and 0 in r.type.get_shape() for r in op.results
    )


def _op_key(op: Operation) -> Hashable:
    """The kernels an op lowers to are a function of this key: the op's structure without
    value identities (:func:`~tessera.passes.dedupe_kernels.kernel_fingerprint`), its
    operand types and its operands' producers. Two layers of a model have equal keys, so
    the second reuses the first one's kernels (``dedupe-kernels`` would merge them later,
    after lowering each)."""
    return (kernel_fingerprint(op), tuple(v.type for v in op.operands),
            tuple(_producer_key(v) for v in op.operands))


Override = Callable[["_FunctionLowering", Operation], bool]
"""A lowering tried before the generic one for its op type: True when it has lowered the
op, False to leave it to the generic lowering (``lower-matmul-sm90``'s TMA + wgmma GEMM)."""


class _FunctionLowering:
    """Lowers one Graph IR ``func.func`` into kernels and a host function; ``overrides``
    maps op types to lowerings tried first (see :data:`Override`)."""

    def __init__(
        self, module: ModuleOp, fn: func.FuncOp,
        overrides: Mapping[type[Operation], Sequence[Override]] | None = None,
        *, deterministic: bool = True, allow_tf32: bool = False,
        claims: Sequence[Callable[[_FunctionLowering, Operation], None]] = (),
    ):
        self.module = module
        self.fn = fn
        self.overrides = overrides or {}
        self.deterministic = deterministic
        """False: collectives may reduce in the communication library's order."""
        self.allow_tf32 = allow_tf32
        """True: f32 GEMMs may round their operands to TF32 on tensor cores."""
        self.name = fn.sym_name.data
        # kernels and constants are PTX symbols: identifier characters only
        # (``<lambda>_grad`` -> ``lambda_grad``)
        self.prefix = re.sub(r"[^0-9A-Za-z_]", "_", self.name).strip("_") or "fn"
        ins = [memref_of(t) for t in fn.function_type.inputs.data]
        outs = [memref_of(t) for t in fn.function_type.outputs.data]
        self.host = func.FuncOp(self.name, (ins, outs))
        if "tessera.mesh" in fn.attributes:  # the mesh of host collectives
            self.host.attributes["tessera.mesh"] = fn.attributes["tessera.mesh"]
        self.hb = self.host.body.block
        for old, new in zip(fn.body.block.args, self.hb.args):
            new.name_hint = old.name_hint
        self.env: dict[SSAValue, SSAValue] = dict(zip(fn.body.block.args, self.hb.args))
        self.deferred: dict[
            SSAValue, tuple[SSAValue, tuple[int, ...], Callable[[], None], tuple[int, ...]]
        ] = {}
        """Values left unmade for their consumers (:meth:`defer`)."""
        self.counter: dict[str, int] = {}
        self.globals: set[SSAValue] = set()
        self._op_key: Hashable | None = None
        """The op being lowered, as :func:`_op_key` (None outside the op loop)."""
        self._op_seq = 0
        """Kernels made so far for the op being lowered."""
        self._kernels: dict[Hashable, str] = {}
        """Kernel memo: (op key, sequence number, tag, argument types, group) -> name."""
        donate = fn.attributes.get("tessera.donate")
        args = fn.body.block.args
        indices = list(donate.get_values()) if isinstance(donate, DenseArrayBase) else []
        bad = [i for i in indices if not 0 <= i < len(args)]
        if bad:
            raise ValueError(
                f"lower-graph-to-tile: @{fn.sym_name.data}: tessera.donate index {bad[0]} is "
                f"not an argument (the function has {len(args)})"
            )
        self.donatable: set[SSAValue] = {args[i] for i in indices}
        """Arguments whose buffers the caller gives up (the function attribute
        ``tessera.donate = array<i64: ...>``, argument indices): a lowering may write a
        result into one (:meth:`donated`), and the function returns it uncopied."""
        self.claimed: set[SSAValue] = set()
        """Host arguments (buffers) that a result has taken over."""
        self.skip: set[Operation] = set()
        """Ops whose work another op's lowering does (an input gradient's phase
        interleave, stored by its convolution's epilogue; its phase kernel, read from the
        forward weight by the convolution's weight relayout): not lowered."""
        self.claims = tuple(claims)
        """Called with every op before any is lowered: may add ops to :attr:`skip` whose
        work a later op's lowering takes over, noting what it needs in :attr:`notes`."""
        self.notes: dict[Hashable, object] = {}
        """Facts a claim leaves for a lowering."""

    # ------------------------------------------------------------------ host helpers
    def host_op(self, o: Operation) -> SSAValue:
        self.hb.add_op(o)
        return o.results[0] if o.results else None  # type: ignore[return-value]

    def alloc(self, t: Attribute) -> SSAValue:
        mt = memref_of(t)
        return self.host_op(memref.AllocOp([], [], mt))

    def kernel(
        self,
        tag: str,
        args: Sequence[SSAValue],
        group: int,
        grid: Sequence[int],
        build: Callable[[KernelEmitter, list[SSAValue]], None],
    ) -> str | None:
        """Create a kernel over host values ``args`` and launch it (unless the grid is
        empty); its name (for more launches, :meth:`launch`), or None when not created."""
        if min(grid) < 1:
            return None

        def make(name: str) -> Operation:
            k = tt.KernelOp(name, [a.type for a in args], group)
            e = KernelEmitter(k.body.block)
            build(e, list(k.body.block.args))
            e.emit(tt.ReturnOp())
            return k

        name = self.named_kernel(tag, make, (tuple(a.type for a in args), group))
        self.hb.add_op(tt.LaunchOp(name, list(args), list(grid)))
        return name

    def named_kernel(
        self, tag: str, make: Callable[[str], Operation], key: Hashable = ()
    ) -> str:
        """Add the kernel ``make(name)`` to the module (the caller launches it) and return
        its name, ``{prefix}_{tag}_{n}``. The kernels of an op equal to one lowered before
        (same :func:`_op_key`: the next layer of a model) are that op's, in the same
        order: the earlier kernel's name is returned and ``make`` is not called.
        ``key``: whatever else the kernel depends on (argument types, group size)."""
        n = self.counter.get(tag, 0)
        self.counter[tag] = n + 1
        name = f"{self.prefix}_{tag}_{n}"
        memo = None
        if self._op_key is not None and KERNEL_MEMO:
            memo = (self._op_key, self._op_seq, tag, key)
            self._op_seq += 1
            found = self._kernels.get(memo)
            if found is not None and not CHECK_KERNEL_MEMO:
                return found
        k = make(name)
        if memo is not None and memo in self._kernels:  # CHECK_KERNEL_MEMO: compare, drop
            first = self._kernels[memo]
            kept = next(o for o in self.module.body.block.ops
                        if isinstance(o, KERNEL_OPS) and o.sym_name.data == first)
            if kernel_fingerprint(kept) != kernel_fingerprint(k):
                raise AssertionError(
                    f"lower-graph-to-tile: kernel memo: @{name} differs from @{first}"
                )
            k.erase()
            return first
        if memo is not None:
            self._kernels[memo] = name
        self.module.body.block.insert_op_before(k, self.fn)
        return name

    def launch(self, name: str, args: Sequence[SSAValue], grid: Sequence[int]) -> None:
        """Launch kernel ``name`` (made by :meth:`kernel`) again, after the host's
        launches so far."""
        self.hb.add_op(tt.LaunchOp(name, list(args), list(grid)))

    def host_index(self, v: int) -> SSAValue:
        """An ``index`` constant on the host (a scalar kernel argument)."""
        return self.host_op(arith.ConstantOp(IntegerAttr(v, IndexType())))

    def mem(self, v: SSAValue) -> SSAValue:
        """The buffer of Graph IR value ``v`` (a deferred op's is made now: :meth:`defer`)."""
        if v not in self.env and v in self.deferred:
            self.deferred.pop(v)[2]()
        return self.env[v]

    def defer(self, v: SSAValue, source: SSAValue, perm: Sequence[int],
              emit: Callable[[], None], flips: Sequence[int] = ()) -> None:
        """Leave ``v = reverse(transpose(source, perm), flips)`` unmade: its users may read
        ``source`` in that order themselves (:meth:`peek_transpose`, :meth:`peek_view`);
        otherwise :meth:`mem` calls ``emit`` when the value is first needed."""
        self.deferred[v] = (source, tuple(perm), emit, tuple(sorted(flips)))

    def peek_transpose(self, v: SSAValue) -> tuple[SSAValue, tuple[int, ...]] | None:
        """``(source, perm)`` when ``v`` is a deferred ``transpose(source, perm)`` not made
        yet (its users may each read ``source`` through the permutation), else None."""
        d = self.deferred.get(v)
        return None if d is None or v in self.env or d[3] else (d[0], d[1])

    def peek_view(
        self, v: SSAValue
    ) -> tuple[SSAValue, tuple[int, ...], tuple[int, ...]] | None:
        """``(source, perm, flips)`` when ``v`` is a deferred ``reverse(transpose(source,
        perm), flips)`` (``flips`` in ``v``'s dims; none for a plain transpose) not made
        yet, else None."""
        d = self.deferred.get(v)
        return None if d is None or v in self.env else (d[0], d[1], d[3])


    def donated(self, v: SSAValue) -> bool:
        """Whether a result may take over the buffer of Graph IR value ``v`` (and, if so,
        claim it): ``v`` is a donated argument of the function, used once, by the op
        being lowered, and no other result has taken it."""
        if v not in self.donatable or len(list(v.uses)) != 1:
            return False
        m = self.env[v]
        if m in self.claimed:
            return False
        self.claimed.add(m)
        return True

    # ------------------------------------------------------------------ driver
    def run(self) -> None:
        for op in list(self.fn.body.block.ops):
            for claim in self.claims:
                claim(self, op)
        for op in list(self.fn.body.block.ops):
            self._op_key = None
            if op in self.skip:
                continue
            if isinstance(op, func.ReturnOp):
                # a result shares memory with no argument, constant or other result
                # (a reshape is a view of its input's buffer: tile_datamove), except a
                # donated argument's buffer that a result took over (once)
                outs: list[SSAValue] = []
                roots: set[SSAValue] = set()
                for v in op.arguments:
                    m = self.env[v]
                    root = tile_datamove.alias_root(m)
                    if (
                        (root in self.hb.args and root not in self.claimed)
                        or root in self.globals or root in roots
                    ):
                        m = self.copy(v, m)
                        root = m
                    roots.add(root)
                    outs.append(m)
                self.hb.add_op(func.ReturnOp(*outs))
                continue
            if _all_results_empty(op):
                # nothing to compute: the results are buffers of no elements
                for r in op.results:
                    self.env[r] = self.alloc(r.type)
                continue
            if not isinstance(op, _EMPTY_OPERANDS_LOWERED) and any(
                isinstance(v.type, TensorType) and 0 in v.type.get_shape() for v in op.operands
            ):
                # algebraic-simplify's fold-empty turns the ones with a defined result
                # (a sum over an empty axis, a matmul contracting 0 terms) into constants
                raise not_lowered(op, "an operand has no elements, the result has some")
            self._op_key, self._op_seq = _op_key(op), 0
            if tile_complex.handles(op):
                tile_complex.lower(self, op)
                continue
            if TILE_LOWERINGS.get(op) is None:
                raise not_lowered(op)
            if isinstance(op, g.MatmulOp | g.MatmulEpilogueOp) and any(
                packed_format(g.elem_of(v)) for v in (op.lhs, op.rhs)
            ):
                _check_accumulation(op)
                lower_packed_matmul(self, op)
                continue
            if not isinstance(op, g.CastOp) and any(
                isinstance(v.type, TensorType) and packed_format(v.type.element_type)
                for v in (*op.operands, *op.results)
            ) and not (
                # a packed result of a rounding policy is written by the policy kernel
                len(op.results) == 1 and rounding_policy(op.results[0].type)
                and not any(packed_format(g.elem_of(v)) for v in op.operands
                            if isinstance(v.type, TensorType))
            ):
                raise not_lowered(op, "fp6/fp4 tensors are stored packed; only tgraph.cast and "
                                   "tgraph.matmul read them, tgraph.cast and results of a "
                                   "rounding policy write them")
            if not isinstance(op, _COMPLEX_OPS) and any(
                isinstance(v.type, TensorType) and isinstance(v.type.element_type, ComplexType)
                for v in (*op.operands, *op.results)
            ):
                raise not_lowered(op, "complex tensors are only read and written by tgraph.fft, "
                                   "tgraph.fft2d, tgraph.real, tgraph.imag, tgraph.complex "
                                   "and elementwise add, sub, mul, div, neg and select")
            _check_accumulation(op)
            if isinstance(op, g.FusedOp) and any(
                rounds_specially(r.type) for inner in op.body.walk() for r in inner.results
            ):
                raise not_lowered(op, "a value of a rounding numeric policy (stochastic, "
                                  "saturating or scaled) inside the fused body; fuse-elementwise "
                                  "leaves such ops unfused")
            pols = [rounding_policy(r.type) for r in op.results]
            if any(pols):
                if isinstance(op, g.CastOp):
                    assert pols[0] is not None
                    lower_policy_cast(self, op, pols[0])
                    continue
                if len(op.results) != 1:
                    raise not_lowered(op, "a rounding numeric policy on one of several results")
                lower_with_policy(self, op, pols[0])
                continue
            self.lower_one(op)
        self._op_key = None
        self.module.body.block.insert_op_after(self.host, self.fn)
        self.fn.detach()
        self.fn.erase()

    def lower_one(self, op: Operation) -> None:
        """Lower ``op`` by its override hooks, else its generic lowering."""
        if not any(hook(self, op) for hook in self.overrides.get(type(op), ())):
            method = TILE_LOWERINGS.get(op)
            if method is None:
                raise not_lowered(op)
            method(self, op)

    def lower_as(self, op: Operation, operands: Sequence[SSAValue],
                 result_types: Sequence[Attribute]) -> list[SSAValue]:
        """Lower a detached copy of ``op`` with other operands / result types; returns the
        buffers of its results (the copy is erased)."""
        twin = type(op).create(
            operands=list(operands), result_types=list(result_types),
            properties=dict(op.properties), attributes=dict(op.attributes),
            regions=[r.clone() for r in op.regions],
        )
        try:
            self.lower_one(twin)
            return [self.env[r] for r in twin.results]
        finally:
            twin.erase(safe_erase=False)

    # ------------------------------------------------------------------ generic map kernel
    def map_kernel(
        self,
        tag: str,
        domain: Sequence[int],
        out: SSAValue,
        inputs: Sequence[tuple[SSAValue, IndexFn]],
        body: Callable[[KernelEmitter, list[SSAValue]], SSAValue],
        out_index: IndexFn = _identity_index,
    ) -> None:
        """One lane per element of ``domain``: load inputs, compute ``body``, store."""
        n = prod(domain)
        group = ELEMENTWISE_GROUP
        host_args = [out, *(m for m, _ in inputs)]

        def build(e: KernelEmitter, args: list[SSAValue]) -> None:
            o, ins = args[0], args[1:]
            lin = e.linear_id()
            ok = e.lt(lin, n)
            idx = e.unravel(lin, domain)
            vals = [
                e.load(ref, fn(e, idx, lin), mask=ok) for ref, (_, fn) in zip(ins, inputs)
            ]
            r = body(e, vals)
            e.store(r, o, out_index(e, idx, lin), mask=ok)

        self.kernel(tag, host_args, group, [cdiv(n, group), 1, 1], build)

    def copy(self, v: SSAValue, m: SSAValue) -> SSAValue:
        """A fresh buffer holding a copy of buffer ``m`` (of tensor ``v``)."""
        return tile_datamove.copy_buffer(self, v.type, m)

    # ------------------------------------------------------------------ elementwise
    def _elementwise(self, tag: str, op: Operation, operands: Sequence[SSAValue]) -> None:
        """One elementwise op as a :meth:`vector_map` kernel (operands broadcast to the
        result's shape)."""
        out = self.alloc(op.results[0].type)
        self.env[op.results[0]] = out
        self.vector_map(tag, g.shape_of(op.results[0]), out, op.results[0],
                        [self.mem(v) for v in operands], list(operands),
                        lambda e, xs: elementwise_scalar(e, op, xs))

    def lower_binary(self, op: g.ElementwiseBinaryOp) -> None:
        self._elementwise(op.name.split(".")[1], op, [op.lhs, op.rhs])

    def lower_unary(self, op: g.ElementwiseUnaryOp) -> None:
        self._elementwise(op.name.split(".")[1], op, [op.input])

    def lower_select(self, op: g.SelectOp) -> None:
        self._elementwise("select", op, [op.cond, op.on_true, op.on_false])

    def lower_cast(self, op: g.CastOp) -> None:
        if is_narrow_cast(op):
            lower_narrow_cast(self, op)
            return
        self._elementwise("cast", op, [op.input])

    def lower_constant(self, op: g.ConstantOp) -> None:
        rt = op.result.type
        assert isinstance(rt, TensorType)
        et = rt.element_type
        shape = g.shape_of(op.result)
        if len(op.value) == 1:
            out = self.alloc(rt)
            v0 = next(iter(op.value.get_values()))
            self.vector_map("constant", shape, out, op.result, [], [],
                            lambda e, xs: e.const(v0, et))
            self.env[op.result] = out
            return
        n = self.counter.get("cst", 0)
        self.counter["cst"] = n + 1
        sym = f"{self.prefix}_cst_{n}"
        mt = memref_of(rt)
        # the constant's own bytes (a causal mask has S^2 elements: no per-value rebuild)
        if op.value.get_element_type() == et:
            data = DenseIntOrFPElementsAttr(rt, op.value.data)
        elif is_float(et):
            data = DenseIntOrFPElementsAttr.from_list(rt, [float(x) for x in op.value.get_values()])
        else:
            data = DenseIntOrFPElementsAttr.from_list(rt, [int(x) for x in op.value.get_values()])
        gl = memref.GlobalOp.get(StringAttr(sym), mt, data, constant=UnitAttr())
        self.module.body.block.insert_op_before(gl, self.fn)
        m = self.host_op(memref.GetGlobalOp(sym, mt))
        self.globals.add(m)
        self.env[op.result] = m

    # ------------------------------------------------------------------ rows
    def row_loop(
        self,
        e: KernelEmitter,
        n: int,
        group: int,
        lane: SSAValue,
        carried: list[SSAValue],
        body: Callable[[KernelEmitter, Idx, SSAValue, list[SSAValue]], list[SSAValue]],
    ) -> list[SSAValue]:
        """Lanes stride over ``n`` row elements: ``body(e, r, valid, carried)``."""

        def step(ie: KernelEmitter, k: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
            r = ie.add(ie.mul(k, group), lane)
            return body(ie, r, ie.lt(r, n), c)

        return e.for_(0, cdiv(n, group), 1, carried, step)

    def row_reduce(
        self,
        e: KernelEmitter,
        row: _Row,
        o: Idx,
        lane: SSAValue,
        kind: str,
        acc_t: Attribute,
        value: Callable[[KernelEmitter, list[Idx], SSAValue], SSAValue],
    ) -> SSAValue:
        """Reduce ``value(e, index, valid)`` over a row; every lane gets the result."""
        group, scope = row.group()
        init = e.const(_reduce_init(kind, acc_t), acc_t)

        def body(ie: KernelEmitter, r: Idx, ok: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
            v = value(ie, row.index(ie, o, r), ok)
            v = ie.vselect(ok, v, ie.const(_reduce_init(kind, acc_t), acc_t))
            return [_combine(ie, kind, c[0], v)]

        (acc,) = self.row_loop(e, prod(row.red), group, lane, [init], body)
        return e.op(tt.ReduceOp(acc, kind, scope))

    def lower_reduction(self, op: g.ReductionOp) -> None:
        if tile_rowreduce.lower_reduction(self, op):  # last-axis rows: vectorized
            return
        if tile_colreduce.lower_vector_columns(self, op):  # columns: vectorized
            return
        acc_t = _accum_type(g.elem_of(op.input), op)

        def value(e: KernelEmitter, ins: list[SSAValue], idx: list[Idx], ok: SSAValue) -> SSAValue:
            return e.convert(e.load(ins[0], idx, mask=ok), acc_t)

        self.reduce_kernel(op, op.name.split(".")[1], [self.mem(op.input)], value)

    def reduce_kernel(
        self,
        op: g.ReductionOp,
        tag: str,
        inputs: Sequence[SSAValue],
        value: Callable[[KernelEmitter, list[SSAValue], list[Idx], SSAValue], SSAValue],
    ) -> None:
        """The kernels of the reduction ``op``: ``value(e, input_refs, index, valid)``
        gives the (accumulation-typed) element of ``op``'s input at ``index`` from the
        kernel's input memrefs (host values ``inputs``). Axes followed by a kept axis
        are column kernels (:mod:`tile_colreduce`), reductions to few outputs over many
        elements split kernels (:mod:`tile_splitreduce`); others one tile per output
        element, its lanes striding over the reduced elements."""
        t = g.elem_of(op.input)
        acc_t = _accum_type(t, op)
        kind = {g.SumOp: "sum", g.MaxOp: "max", g.MinOp: "min", g.MeanOp: "sum"}[type(op)]
        if isinstance(op, g.MeanOp) and not is_float(t):
            raise not_lowered(op, "integer mean")
        if tile_colreduce.lower_column_reduction(self, op, tag, inputs, value, kind, acc_t):
            return
        if tile_splitreduce.applies(g.shape_of(op.input), op.axis_list()):
            # few outputs, many elements each: chunks of each on several tiles
            self.env[op.result] = tile_splitreduce.lower(
                self, op, tag, inputs, value, kind, acc_t, _reduce_init(kind, acc_t),
                lambda e, a, b: _combine(e, kind, a, b),
            )
            return
        row = _Row(g.shape_of(op.input), op.axis_list())
        n = prod(row.red)
        out = self.alloc(op.result.type)
        out_shape = g.shape_of(op.result)
        keep = op.keepdims is not None
        group, _ = row.group()

        def build(e: KernelEmitter, args: list[SSAValue]) -> None:
            o_ref, ins = args[0], args[1:]
            o = e.tile_id("x")
            lane = e.local_id()
            total = self.row_reduce(
                e, row, o, lane, kind, acc_t, lambda ie, idx, ok: value(ie, ins, idx, ok)
            )
            if isinstance(op, g.MeanOp):
                total = e.fdiv(total, e.const(float(n), acc_t))
            oidx = e.unravel(o, row.kept)
            if keep:
                it = iter(oidx)
                oidx = [0 if k in row.axes else next(it) for k in range(len(row.shape))]
            assert len(oidx) == len(out_shape)
            e.store(e.convert(total, g.elem_of(op.result)), o_ref, oidx, mask=e.eq(lane, 0))

        self.kernel(tag, [out, *inputs], group, [prod(row.kept), 1, 1], build)
        self.env[op.result] = out

    def lower_softmax(self, op: g.SoftmaxOp) -> None:
        t = g.elem_of(op.input)
        acc_t = _accum_type(t, op)
        shape = g.shape_of(op.input)
        row = _Row(shape, [op.axis.value.data % len(shape)])
        group, _ = row.group()
        out = self.alloc(op.result.type)

        def build(e: KernelEmitter, args: list[SSAValue]) -> None:
            o_ref, x = args
            o = e.tile_id("x")
            lane = e.local_id()

            def load(ie: KernelEmitter, idx: list[Idx], ok: SSAValue) -> SSAValue:
                return ie.convert(ie.load(x, idx, mask=ok), acc_t)

            mx = self.row_reduce(e, row, o, lane, "max", acc_t, load)
            sm = self.row_reduce(
                e, row, o, lane, "sum", acc_t,
                lambda ie, idx, ok: ie.exp(ie.fsub(load(ie, idx, ok), mx)),
            )
            inv = e.fdiv(e.const(1.0, acc_t), sm)

            def write(ie: KernelEmitter, r: Idx, ok: SSAValue, c: list[SSAValue]) -> list:
                idx = row.index(ie, o, r)
                y = ie.fmul(ie.exp(ie.fsub(load(ie, idx, ok), mx)), inv)
                ie.store(ie.convert(y, t), o_ref, idx, mask=ok)
                return []

            self.row_loop(e, prod(row.red), group, lane, [], write)

        self.kernel("softmax", [out, self.mem(op.input)], group, [prod(row.kept), 1, 1], build)
        self.env[op.result] = out

    def lower_norm(self, op: g.NormOp) -> None:
        """The strided norm kernel: one tile per row, two passes for the statistics and
        one for the result (a training form also stores its statistics: ``rstd``, and
        ``layernorm_fwd``'s mean)."""
        t = g.elem_of(op.input)
        acc_t = _accum_type(t, op)
        shape = g.shape_of(op.input)
        row = _Row(shape, [len(shape) - 1])
        d = shape[-1]
        group, _ = row.group()
        eps = op.eps.value.data
        is_ln = isinstance(op, g.LayerNormOp | g.LayerNormFwdOp)
        stats = op.ROW_STATS
        w = op.weight
        b = op.bias if is_ln else None
        out = self.alloc(op.result.type)
        host_args = [out, self.mem(op.input)]
        if w is not None:
            host_args.append(self.mem(w))
        if b is not None:
            host_args.append(self.mem(b))
        stat_bufs = [self.alloc(getattr(op, name).type) for name in stats]
        n_params = len(host_args) - 2
        host_args += stat_bufs

        def build(e: KernelEmitter, args: list[SSAValue]) -> None:
            o_ref, x = args[0], args[1]
            params = args[2:2 + n_params]
            w_ref = params[0] if w is not None else None
            b_ref = params[-1] if b is not None else None
            o = e.tile_id("x")
            lane = e.local_id()

            def load(ie: KernelEmitter, idx: list[Idx], ok: SSAValue) -> SSAValue:
                return ie.convert(ie.load(x, idx, mask=ok), acc_t)

            n = e.const(float(d), acc_t)
            if is_ln:
                mean = e.fdiv(self.row_reduce(e, row, o, lane, "sum", acc_t, load), n)

                def centered(ie: KernelEmitter, idx: list[Idx], ok: SSAValue) -> SSAValue:
                    c = ie.fsub(load(ie, idx, ok), mean)
                    return ie.fmul(c, c)

                var = e.fdiv(self.row_reduce(e, row, o, lane, "sum", acc_t, centered), n)
                inv = e.rsqrt(e.fadd(var, e.const(eps, acc_t)))
            else:

                def square(ie: KernelEmitter, idx: list[Idx], ok: SSAValue) -> SSAValue:
                    v = load(ie, idx, ok)
                    return ie.fmul(v, v)

                ms = e.fdiv(self.row_reduce(e, row, o, lane, "sum", acc_t, square), n)
                inv = e.rsqrt(e.fadd(ms, e.const(eps, acc_t)))
                mean = None
            if stats:
                sidx = [*e.unravel(o, row.kept), 0]
                values = {"mean": mean, "rstd": inv}
                for ref, name in zip(args[2 + n_params:], stats):
                    e.store(values[name], ref, sidx, mask=e.eq(lane, 0))

            def write(ie: KernelEmitter, r: Idx, ok: SSAValue, c: list[SSAValue]) -> list:
                idx = row.index(ie, o, r)
                y = load(ie, idx, ok)
                if mean is not None:
                    y = ie.fsub(y, mean)
                y = ie.fmul(y, inv)
                if w_ref is not None:
                    y = ie.fmul(y, ie.convert(ie.load(w_ref, [idx[-1]], mask=ok), acc_t))
                if b_ref is not None:
                    y = ie.fadd(y, ie.convert(ie.load(b_ref, [idx[-1]], mask=ok), acc_t))
                ie.store(ie.convert(y, t), o_ref, idx, mask=ok)
                return []

            self.row_loop(e, d, group, lane, [], write)

        self.kernel(
            op.name.split(".")[1], host_args, group, [prod(row.kept), 1, 1], build
        )
        self.env[op.result] = out
        for name, buf in zip(stats, stat_bufs):
            self.env[getattr(op, name)] = buf

    def lower_norm_bwd(self, op: g.LayerNormBwdOp | g.RMSNormBwdOp) -> None:
        """The strided norm-gradient kernel: one tile per row, a pass for the row's sums
        and one for ``dx`` (see ``tgraph.layernorm_bwd``)."""
        t = g.elem_of(op.input)
        acc_t = _accum_type(t, op)
        shape = g.shape_of(op.input)
        row = _Row(shape, [len(shape) - 1])
        d = shape[-1]
        group, _ = row.group()
        from tessera.passes.tile_rowlayout import norm_bwd_args

        out, host_args, named = norm_bwd_args(self, op)

        def build(e: KernelEmitter, args: list[SSAValue]) -> None:
            a = named(args)
            o_ref, dy_ref, x_ref, w_ref, res_ref = a.out, a.dy, a.x, a.weight, a.residual
            o = e.tile_id("x")
            lane = e.local_id()
            sidx = [*e.unravel(o, row.kept), 0]
            rstd = e.convert(e.load(a.rstd, sidx), acc_t)
            mean = e.convert(e.load(a.mean, sidx), acc_t) if a.mean is not None else None

            def xhat(ie: KernelEmitter, idx: list[Idx], ok: SSAValue) -> SSAValue:
                x = ie.convert(ie.load(x_ref, idx, mask=ok), acc_t)
                return ie.fmul(ie.fsub(x, mean) if mean is not None else x, rstd)

            def gy(ie: KernelEmitter, idx: list[Idx], ok: SSAValue) -> SSAValue:
                v = ie.convert(ie.load(dy_ref, idx, mask=ok), acc_t)
                if w_ref is not None:
                    v = ie.fmul(v, ie.convert(ie.load(w_ref, [idx[-1]], mask=ok), acc_t))
                return v

            n = e.const(float(d), acc_t)
            m2 = e.fdiv(self.row_reduce(
                e, row, o, lane, "sum", acc_t,
                lambda ie, idx, ok: ie.fmul(gy(ie, idx, ok), xhat(ie, idx, ok))), n)
            m1 = e.fdiv(self.row_reduce(e, row, o, lane, "sum", acc_t, gy), n) if mean is not None else None

            def write(ie: KernelEmitter, r: Idx, ok: SSAValue, c: list[SSAValue]) -> list:
                idx = row.index(ie, o, r)
                y = ie.fsub(gy(ie, idx, ok), ie.fmul(xhat(ie, idx, ok), m2))
                if m1 is not None:
                    y = ie.fsub(y, m1)
                y = ie.convert(ie.fmul(y, rstd), t)
                if res_ref is not None:  # dx rounded first, as a separate add
                    y = ie.convert(ie.fadd(ie.convert(y, acc_t), ie.convert(
                        ie.load(res_ref, idx, mask=ok), acc_t)), t)
                ie.store(y, o_ref, idx, mask=ok)
                return []

            self.row_loop(e, d, group, lane, [], write)

        self.kernel(op.name.split(".")[1], host_args, group, [prod(row.kept), 1, 1], build)
        self.env[op.result] = out

    def lower_mse(self, op: g.MSEOp) -> None:
        t = g.elem_of(op.pred)
        acc_t = _accum_type(t, op)
        shape = g.broadcast_shapes(g.shape_of(op.pred), g.shape_of(op.target))
        assert shape is not None
        row = _Row(tuple(shape), list(range(len(shape))))
        group, _ = row.group()
        n = prod(shape)
        pi = _bcast_index(g.shape_of(op.pred), shape)
        ti = _bcast_index(g.shape_of(op.target), shape)
        out = self.alloc(op.result.type)

        def build(e: KernelEmitter, args: list[SSAValue]) -> None:
            o_ref, p, q = args
            lane = e.local_id()

            def sq(ie: KernelEmitter, idx: list[Idx], ok: SSAValue) -> SSAValue:
                a = ie.convert(ie.load(p, pi(ie, idx, 0), mask=ok), acc_t)
                b = ie.convert(ie.load(q, ti(ie, idx, 0), mask=ok), acc_t)
                dlt = ie.fsub(a, b)
                return ie.fmul(dlt, dlt)

            total = self.row_reduce(e, row, 0, lane, "sum", acc_t, sq)
            mean = e.fdiv(total, e.const(float(n), acc_t)) if n else total
            e.store(e.convert(mean, t), o_ref, [], mask=e.eq(lane, 0))

        self.kernel("mse", [out, self.mem(op.pred), self.mem(op.target)], group, [1, 1, 1], build)
        self.env[op.result] = out

    # ------------------------------------------------------------------ fusion
    def lower_fused(self, op: g.FusedOp) -> None:
        """A ``tgraph.fused`` op is one kernel: its body is evaluated per element on scalars.

        Without a reduction each lane computes ``W`` consecutive output elements, reading
        operands with ``ttile.load_vector`` where their rows line up with the output's
        (see :class:`_FusedAccess`) and writing with ``ttile.store_vector``. With a
        trailing reduction the kernel is the reduction's, with the body as the value
        of each reduced element.
        """
        red = op.reduction()
        result = red.input if red is not None else op.yield_op.values[0]
        body = _live_ops(op, result)
        values, refs = self._fused_leaves(op, body)
        domain = g.shape_of(result)
        if tile_fused_maps.has_index_maps(body):
            self._lower_mapped_fused(op, red, result, body, values, refs)
            return
        evaluate_all = _body_evaluator(values, body, [result])

        def evaluate(e: KernelEmitter, leaves: list[SSAValue]) -> SSAValue:
            return evaluate_all(e, leaves)[0]

        if red is not None:
            acc_t = _accum_type(g.elem_of(red.input), red)

            index = [_bcast_index(g.shape_of(v), domain) for v in values]

            def value(e: KernelEmitter, ins: list[SSAValue], idx: list[Idx], ok: SSAValue) -> SSAValue:
                leaves = [e.load(r, f(e, idx, 0), mask=ok) for r, f in zip(ins, index)]
                return e.convert(evaluate(e, leaves), acc_t)

            if not (
                tile_fused_rows.lower(self, red, values, refs, evaluate, acc_t)
                or tile_colreduce.lower_vector_fused(self, red, values, refs, evaluate, acc_t)
            ):
                self.reduce_kernel(red, "fused", refs, value)
            self.env[op.result] = self.env[red.result]
            return

        out = self.alloc(op.result.type)
        self.vector_map("fused", domain, out, op.result, refs, values, evaluate)
        self.env[op.result] = out

    def lower_fused_reductions(self, op: g.FusedReductionsOp) -> None:
        """A ``tgraph.fused_reductions`` op is one row kernel (:mod:`tile_fused_rows`): each
        element of the body's operands is read once and every reduction folds its value."""
        reds = op.reductions()
        inputs = [r.operands[0] for r in reds]
        body = _live_ops(op, *inputs)
        values, refs = self._fused_leaves(op, body)
        evaluate = _body_evaluator(values, body, inputs)
        acc = [_accum_type(g.elem_of(v), r) for v, r in zip(inputs, reds)]
        if not tile_fused_rows.lower_many(self, reds, values, refs, evaluate, acc):  # type: ignore[arg-type]
            raise not_lowered(
                op, "reductions other than f32-accumulated sum/max/min/mean over the trailing "
                "dims of bf16/f16/f32 rows (operands of the reduced shape or constant along "
                "the reduced dims)"
            )
        for r, red in zip(op.outputs, reds):
            self.env[r] = self.env[red.results[0]]

    def _fused_leaves(
        self, op: g.FusedOp | g.FusedReductionsOp, body: Sequence[Operation]
    ) -> tuple[list[SSAValue], list[SSAValue]]:
        """The leaves of a fused body (its block arguments, then the constants of ``body``
        that are not splats) and their buffers (the operands', the constants' globals)."""
        values: list[SSAValue] = list(op.block.args)
        refs = [self.mem(v) for v in op.inputs]
        for c in body:
            if isinstance(c, g.ConstantOp) and _splat(c) is None:
                self.lower_constant(c)
                values.append(c.result)
                refs.append(self.env[c.result])
        return values, refs

    def _lower_mapped_fused(
        self, op: g.FusedOp, red: Operation | None, result: SSAValue,
        body: list[Operation], values: list[SSAValue], refs: list[SSAValue],
    ) -> None:
        """A fused body holding transposes, slices, concats or unit reshapes
        (:mod:`tile_fused_maps`): one kernel over the result, or the reduction's kernels
        with the body as each reduced element's value."""
        if red is None:
            out = self.alloc(op.result.type)
            tile_fused_maps.lower_mapped_fused(self, out, result, values, refs, body)
            self.env[op.result] = out
            return
        assert isinstance(red, g.ReductionOp)
        acc_t = _accum_type(g.elem_of(red.input), red)
        ev = tile_fused_maps.mapped_value(values, body, result)

        def value(e: KernelEmitter, ins: list[SSAValue], idx: list[Idx], ok: SSAValue) -> SSAValue:
            return e.convert(ev.evaluate(e, ins, idx, ok)[0], acc_t)

        self.reduce_kernel(red, "fused", refs, value)
        self.env[op.result] = self.env[red.result]

    def vector_map(
        self, tag: str, domain: Sequence[int], out: SSAValue, result: SSAValue,
        refs: Sequence[SSAValue], values: Sequence[SSAValue],
        evaluate: Callable[[KernelEmitter, list[SSAValue]], SSAValue],
    ) -> None:
        """An elementwise kernel writing ``out`` (the buffer of ``result``, shape
        ``domain``) from ``refs`` (the buffers of ``values``, broadcast to ``domain``).

        Dims that every array either spans or broadcasts alike are merged first
        (:func:`_coalesce`; the kernel sees host views of the buffers in the merged
        shapes), so a same-shape op is one flat row whatever its dims. Each lane then
        computes :class:`_FusedAccess`'s ``width`` consecutive elements with
        ``evaluate``, reading and writing whole vectors where the rows line up."""
        n = prod(domain)
        shapes = [g.shape_of(v) for v in values]
        cdom, cshapes = _coalesce(domain, shapes)
        if cdom != list(domain):
            from tessera.passes.tile_datamove import reshape_view

            views: dict[tuple[SSAValue, tuple[int, ...]], SSAValue] = {}
            for r, v, s in zip(refs, values, cshapes):
                if (r, tuple(s)) not in views:
                    views[r, tuple(s)] = reshape_view(self, r, MemRefType(g.elem_of(v), s))
            refs = [views[r, tuple(s)] for r, s in zip(refs, cshapes)]
            out = reshape_view(self, out, MemRefType(g.elem_of(result), cdom))
            domain, shapes = cdom, cshapes
        elems = [g.elem_of(v) for v in values]
        acc = _FusedAccess.plan(domain, [*shapes, domain], [*elems, g.elem_of(result)])
        index = [_bcast_index(s, domain) for s in shapes]
        w = acc.width
        group = ELEMENTWISE_GROUP
        if (w == 1 and len(domain) > 1 and domain[-1] >= ROW_MAP_MIN
                and cdiv(domain[-1], group * ROW_MAP_UNROLL) <= MAX_GRID_Y):
            self._row_map(tag, domain, out, result, refs, shapes, evaluate)
            return

        def build(e: KernelEmitter, args: list[SSAValue]) -> None:
            o_ref, ins = args[0], args[1:]
            base = e.mul(e.linear_id(), w)
            ok = e.lt(base, n)
            idx0 = e.unravel(base, domain)
            idxs = [idx0]
            if w > 1 and "scalar" in acc.modes:
                idxs = [idx0[:-1] + [e.add(idx0[-1], k)] for k in range(w)]
            columns: list[list[SSAValue]] = []
            for r, f, mode in zip(ins, index, acc.modes):
                if mode == "vector":
                    vec = e.op(tt.LoadVectorOp(r, [e.index(i) for i in f(e, idx0, 0)], w, ok))
                    columns.append([e.extract(vec, k) for k in range(w)])
                elif mode == "uniform":
                    columns.append([e.load(r, f(e, idx0, 0), mask=ok)] * w)
                else:
                    columns.append([e.load(r, f(e, ix, 0), mask=ok) for ix in idxs])
            ys = [evaluate(e, [col[k] for col in columns]) for k in range(w)]
            if acc.modes[-1] == "vector":
                e.store_lanes(ys, o_ref, idx0, ok)
            else:
                for y, ix in zip(ys, idxs):
                    e.store(y, o_ref, ix, mask=ok)

        self.kernel(tag, [out, *refs], group, [cdiv(cdiv(n, w), group), 1, 1], build)

    def _row_map(
        self, tag: str, domain: Sequence[int], out: SSAValue, result: SSAValue,
        refs: Sequence[SSAValue], shapes: Sequence[Sequence[int]],
        evaluate: Callable[[KernelEmitter, list[SSAValue]], SSAValue],
    ) -> None:
        """:meth:`vector_map` for rows no vector width divides (an odd length such as a
        vocabulary of 50257): tile ``(r, c)`` computes ``ROW_MAP_UNROLL * group``
        elements of row ``r`` from chunk ``c``, lane ``l`` the elements ``l, l + group,
        ...`` of it, so every access of a warp is to adjacent elements and no lane
        divides a flat index; a broadcast column is read once per lane."""
        rows, last = prod(domain[:-1]), domain[-1]
        group = ELEMENTWISE_GROUP
        chunk = group * ROW_MAP_UNROLL
        index = [_bcast_index(s, domain) for s in shapes]
        uniform = [not s or s[-1] == 1 for s in shapes]

        def build(e: KernelEmitter, args: list[SSAValue]) -> None:
            o_ref, ins = args[0], args[1:]
            ridx = e.unravel(e.tile_id("x"), domain[:-1])
            base = e.add(e.mul(e.tile_id("y"), chunk), e.local_id())
            once = {
                k: e.load(r, f(e, [*ridx, 0], 0))
                for k, (r, f, u) in enumerate(zip(ins, index, uniform)) if u
            }
            for j in range(ROW_MAP_UNROLL):
                col = e.add(base, j * group)
                ok = e.lt(col, last)
                idx = [*ridx, col]
                vals = [
                    once[k] if k in once else e.load(r, f(e, idx, 0), mask=ok)
                    for k, (r, f) in enumerate(zip(ins, index))
                ]
                e.store(evaluate(e, vals), o_ref, idx, mask=ok)

        self.kernel(tag, [out, *refs], group, [rows, cdiv(last, chunk), 1], build)

    # ------------------------------------------------------------------ matmul
    def lower_matmul(self, op: g.MatmulOp) -> None:
        from tessera.passes.tile_gemm import lower_matmul

        lower_matmul(self, op)

    def lower_matmul_epilogue(self, op: g.MatmulEpilogueOp) -> None:
        from tessera.passes.tile_gemm import lower_matmul

        matmul_epilogue(op)  # unsupported steps fail before any kernel is built
        lower_matmul(self, op)

    def lower_flash_attention(self, op: g.FlashAttentionOp) -> None:
        from tessera.passes.tile_gemm import lower_flash_attention

        lower_flash_attention(self, op)


def elementwise_scalar(e: KernelEmitter, op: Operation, xs: Sequence[SSAValue]) -> SSAValue:
    """One element of the elementwise ``tgraph`` op ``op``, given one scalar per operand
    (of the operands' element types); the result has the op's result element type.

    bf16/f16 arithmetic is done in f32 and rounded back, so a chain of these computes
    exactly what the chain of ops computes. Shared by the one-op kernels and the
    ``tgraph.fused`` kernels.
    """
    if isinstance(op, g.SelectOp):
        return e.vselect(*xs)
    if isinstance(op, g.BroadcastOp):  # in a fused body: its input read at broadcast indices
        return xs[0]
    if isinstance(op, g.CastOp):
        return e.convert(xs[0], _cast_target(op))
    if isinstance(op, g.ElementwiseBinaryOp):
        t = g.elem_of(op.lhs)
        if t == i1 and not isinstance(op, g.EqOp | g.NeOp):
            raise not_lowered(op, "boolean operands")
        ct = compute_type(t)
        a, b = (e.convert(x, ct) for x in xs)
        return e.convert(_binary_scalar(e, op, type(op), a, b), g.elem_of(op.result))
    if isinstance(op, g.ElementwiseUnaryOp):
        t = g.elem_of(op.input)
        x = e.convert(xs[0], compute_type(t))
        return e.convert(_unary_scalar(e, op, x), g.elem_of(op.result))
    raise not_lowered(op, "not an elementwise op")


def _check_accumulation(op: Operation) -> None:
    """Refuse a matmul or reduction whose operand declares ``@accum(ts.f64)`` on a narrower
    float, or a float ``@accum`` on an integer (the interpreter accumulates such operands
    in the declared type; the kernels in f32, or in the integer type)."""
    if not isinstance(op, g.MatmulOp | g.MatmulEpilogueOp | g.ReductionOp):
        return
    for v in op.operands:
        t = v.type
        if isinstance(t, TensorType) and isinstance(t.encoding, NumericPolicyAttr):
            p = t.encoding.to_policy()
            if p.accum is not None and p.accum.np_dtype == np.float64 and (
                p.storage.np_dtype != np.float64
            ):
                raise not_lowered(op, f"an operand of policy {p!r}: kernels accumulate "
                                  "narrower floats in f32; cast the operand to f64 instead")
            if p.accum is not None and p.accum.kind == "float" and p.storage.kind != "float":
                raise not_lowered(op, f"an operand of policy {p!r}: kernels accumulate "
                                  "integers as integers; cast the operand to "
                                  f"{p.accum!r} first")


def _cast_target(op: g.CastOp) -> Attribute:
    """The destination element type of a cast that has a scalar lowering."""
    return _check_cast(op, g.elem_of(op.input), g.elem_of(op.result))


def _check_cast(op: Operation, src: Attribute, dst: Attribute) -> Attribute:
    ok = (Float64Type, Float32Type, Float16Type, BFloat16Type, IntegerType)
    for t in (src, dst):
        if not isinstance(t, ok):
            raise not_lowered(op, f"casts involving {t}")
    return dst


_ACTIVATION_KINDS: dict[str, type[Operation]] = {
    "relu": g.ReluOp, "gelu": g.GeluOp, "silu": g.SiluOp,
}


def matmul_epilogue(op: g.MatmulEpilogueOp) -> Callable[..., SSAValue]:
    """The per-accumulator epilogue of ``op`` for the matmul kernels
    (``tessera.passes.tile_gemm.Epilogue``).

    Each step rounds to the type its unfused op would produce: the accumulator is
    converted to the product type, the bias added, the activation applied and the
    residual added in ``compute_type`` of it (f32 for 16-bit floats) and rounded back,
    then the cast. The bias and the residual are the kernel's extra arguments
    (``op.epilogue_operands``, in that order), the bias read at the broadcast index.
    """
    pt = g.elem_of(op.product_type)
    rt = g.elem_of(op.result)
    ct = compute_type(pt)
    if op.compute_type is not None:
        _check_cast(op, pt, rt)
    act = _ACTIVATION_KINDS[op.activation.data] if op.activation is not None else None
    bias = op.bias
    bias_index = _bcast_index(g.shape_of(bias), g.shape_of(op.result)) if bias else None
    if bias is not None and pt == i1:
        raise not_lowered(op, "boolean bias")
    res_at = 1 if bias is not None else 0
    res_index = (_bcast_index(g.shape_of(op.residual), g.shape_of(op.result))
                 if op.residual is not None else None)
    if res_index is not None and pt == i1:
        raise not_lowered(op, "boolean residual")

    def apply(
        e: KernelEmitter, extra: list[SSAValue], acc: SSAValue, pre: list[Idx], row: Idx,
        col: Idx, ok: SSAValue | None,
    ) -> SSAValue:
        v = e.convert(acc, pt)
        if bias_index is not None:
            b = e.load(extra[0], bias_index(e, [*pre, row, col], 0), mask=ok)
            s = _binary_scalar(e, op, g.AddOp, e.convert(v, ct), e.convert(b, ct))
            v = e.convert(s, pt)
        if act is not None:
            v = e.convert(_unary_scalar(e, op, e.convert(v, ct), act), pt)
        if res_index is not None:
            r = e.load(extra[res_at], res_index(e, [*pre, row, col], 0), mask=ok)
            s = _binary_scalar(e, op, g.AddOp, e.convert(v, ct), e.convert(r, ct))
            v = e.convert(s, pt)
        return e.convert(v, rt)

    return apply


def _splat(op: g.ConstantOp) -> float | int | None:
    """The value of a splat constant, else None."""
    vals = list(op.value.get_values())
    return vals[0] if len(vals) == 1 else None


def _body_evaluator(
    values: Sequence[SSAValue], body: Sequence[Operation], outs: Sequence[SSAValue]
) -> Callable[[KernelEmitter, list[SSAValue]], list[SSAValue]]:
    """``evaluate(e, leaves)``: the scalars of ``outs`` computed by the elementwise ops of
    ``body`` from one scalar per leaf (``values``); splat constants become immediates."""

    def evaluate(e: KernelEmitter, leaves: list[SSAValue]) -> list[SSAValue]:
        env: dict[SSAValue, SSAValue] = dict(zip(values, leaves))
        for o in body:
            if isinstance(o, g.ConstantOp):
                if o.result not in env:
                    env[o.result] = e.const(_splat(o), g.elem_of(o.result))  # type: ignore[arg-type]
                continue
            env[o.results[0]] = elementwise_scalar(e, o, [env[x] for x in o.operands])
        return [env[v] for v in outs]

    return evaluate


def _live_ops(op: g.FusedOp | g.FusedReductionsOp, *results: SSAValue) -> list[Operation]:
    """The ops of ``op``'s body that ``results`` depend on, in order."""
    live: set[SSAValue] = set(results)
    ops: list[Operation] = []
    for o in reversed(list(op.block.ops)):
        if any(r in live for r in o.results):
            ops.append(o)
            live.update(o.operands)
    return list(reversed(ops))


VECTOR_BYTES = 16
"""Widest vector access: ``ld.global.v4.f32`` / ``v8`` 16-bit elements as ``v4.b32``."""


@dataclass
class _FusedAccess:
    """How a fused elementwise kernel reads its operands and writes its result.

    Each lane owns ``width`` consecutive elements of the output (a power of two
    dividing the output's last dim, so they lie in one row). An array whose last dim
    equals the output's (right-aligned broadcasting keeps those ``width`` elements
    consecutive and ``width``-aligned in it) with 2-, 4- or 8-byte elements is read or
    written as one ``vector<width x T>`` (mode ``"vector"``); one whose last dim is
    broadcast (size 1, or a scalar) is read once (``"uniform"``); any other array one
    element at a time (``"scalar"``).
    """

    width: int
    modes: list[str]

    @staticmethod
    def plan(
        domain: Sequence[int], shapes: Sequence[Sequence[int]], elems: Sequence[Attribute]
    ) -> _FusedAccess:
        """The access plan of arrays of ``shapes`` and element types ``elems`` (the
        output last) broadcast to ``domain``."""
        last = domain[-1] if domain else 1
        kinds: list[str] = []
        caps: list[int] = []
        for shape, et in zip(shapes, elems):
            eb = _elem_bytes(et)
            if not shape or shape[-1] == 1:
                kinds.append("uniform" if last > 1 else "scalar")
            elif eb in (2, 4, 8):
                kinds.append("vector")
                caps.append(VECTOR_BYTES // eb)
            else:
                kinds.append("scalar")
        width = min(caps) if caps else 1
        while width > 1 and last % width:
            width //= 2
        if width == 1:
            return _FusedAccess(1, ["scalar"] * len(shapes))
        return _FusedAccess(width, kinds)


def _coalesce(
    domain: Sequence[int], shapes: Sequence[Sequence[int]]
) -> tuple[list[int], list[list[int]]]:
    """``domain`` and the ``shapes`` broadcast to it (right-aligned) with adjacent dims
    merged where every shape spans both or broadcasts both, and size-1 dims of
    ``domain`` dropped: ``[8, 1024, 768]`` with ``[768]`` is ``[8192, 768]`` with
    ``[1, 768]``; all same-shape is one dim. Dense row-major buffers of the merged
    shapes hold the same elements in the same order."""
    r = len(domain)
    padded = [[1] * (r - len(s)) + list(s) for s in shapes]
    groups: list[tuple[tuple[bool, ...], list[int]]] = []
    for k in range(r):
        if domain[k] == 1:
            continue
        pattern = tuple(p[k] != 1 for p in padded)
        if groups and groups[-1][0] == pattern:
            groups[-1][1].append(k)
        else:
            groups.append((pattern, [k]))
    if not groups:
        return list(domain), [list(s) for s in shapes]
    cdom = [prod(domain[k] for k in ks) for _, ks in groups]
    return cdom, [[prod(p[k] for k in ks) for _, ks in groups] for p in padded]


def _elem_bytes(t: Attribute) -> int:
    """Bytes of one element in memory (0 for types with no vector access)."""
    if isinstance(t, IntegerType):
        return t.width.data // 8 if t.width.data in (8, 16, 32, 64) else 0
    w = getattr(t, "bitwidth", 0)
    return w // 8 if w in (16, 32, 64) else 0


def _binary_scalar(
    e: KernelEmitter, op: Operation, kind: type, a: SSAValue, b: SSAValue
) -> SSAValue:
    f = is_float(a.type)
    if issubclass(kind, g.CompareOp):
        fpred = {g.LtOp: "olt", g.LeOp: "ole", g.GtOp: "ogt", g.GeOp: "oge",
                 g.EqOp: "oeq", g.NeOp: "une"}[kind]
        ipred = {g.LtOp: "slt", g.LeOp: "sle", g.GtOp: "sgt", g.GeOp: "sge",
                 g.EqOp: "eq", g.NeOp: "ne"}[kind]
        return e.op(arith.CmpfOp(a, b, fpred) if f else arith.CmpiOp(a, b, ipred))
    if f:
        table: dict[type, Callable[[SSAValue, SSAValue], Operation]] = {
            g.AddOp: arith.AddfOp, g.SubOp: arith.SubfOp, g.MulOp: arith.MulfOp,
            g.DivOp: arith.DivfOp, g.PowOp: math.PowFOp, g.MaximumOp: arith.MaximumfOp,
            g.MinimumOp: arith.MinimumfOp,
        }
    else:
        table = {
            g.AddOp: arith.AddiOp, g.SubOp: arith.SubiOp, g.MulOp: arith.MuliOp,
            g.DivOp: arith.DivSIOp, g.MaximumOp: arith.MaxSIOp, g.MinimumOp: arith.MinSIOp,
        }
    if kind not in table:
        raise not_lowered(op, f"on {a.type} operands")
    return e.op(table[kind](a, b))


ScalarUnary = Callable[[KernelEmitter, Operation, SSAValue], SSAValue]
"""One element of a unary op: ``(emitter, op named in errors, x) -> result``; ``x`` is
in the compute type (f32 for 16-bit floats)."""

UNARY_SCALARS: OpRegistry[ScalarUnary] = OpRegistry("scalar lowering")
"""The per-element computation of each unary elementwise op (the one-op kernels, the
fused kernels and the matmul epilogues share it), by op class."""


def _float_only(e: KernelEmitter, op: Operation, x: SSAValue) -> None:
    if not is_float(x.type):
        raise not_lowered(op, f"on {x.type} operands")


@UNARY_SCALARS.register(g.NegOp)
def _neg(e: KernelEmitter, op: Operation, x: SSAValue) -> SSAValue:
    if not is_float(x.type):
        return e.op(arith.SubiOp(e.const(0, x.type), x))
    return e.op(arith.NegfOp(x))


@UNARY_SCALARS.register(g.AbsOp)
def _abs(e: KernelEmitter, op: Operation, x: SSAValue) -> SSAValue:
    if x.type == i1:
        return x  # a bool is its own magnitude
    return e.op(math.AbsFOp(x) if is_float(x.type) else math.AbsIOp(x))


def _math(ctor: Callable[[SSAValue], Operation]) -> ScalarUnary:
    def scalar(e: KernelEmitter, op: Operation, x: SSAValue) -> SSAValue:
        _float_only(e, op, x)
        return e.op(ctor(x))

    return scalar


UNARY_SCALARS.register(g.ExpOp)(_math(math.ExpOp))
UNARY_SCALARS.register(g.LogOp)(_math(math.LogOp))
UNARY_SCALARS.register(g.SqrtOp)(_math(math.SqrtOp))
UNARY_SCALARS.register(g.RsqrtOp)(_math(math.RsqrtOp))
UNARY_SCALARS.register(g.TanhOp)(_math(math.TanhOp))
UNARY_SCALARS.register(g.ErfOp)(_math(math.ErfOp))
UNARY_SCALARS.register(g.SinOp)(_math(math.SinOp))
UNARY_SCALARS.register(g.CosOp)(_math(math.CosOp))


@UNARY_SCALARS.register(g.ReluOp)
def _relu(e: KernelEmitter, op: Operation, x: SSAValue) -> SSAValue:
    """``x < 0 ? 0 : x``: torch's relu, -0.0 and NaN pass unchanged (a max would give +0.0)."""
    _float_only(e, op, x)
    zero = e.const(0.0, x.type)
    return e.vselect(e.op(arith.CmpfOp(x, zero, "olt")), zero, x)


def _sigmoid(e: KernelEmitter, x: SSAValue) -> SSAValue:
    one = e.const(1.0, x.type)
    return e.fdiv(one, e.fadd(one, e.exp(e.op(arith.NegfOp(x)), approx=False)))


@UNARY_SCALARS.register(g.SigmoidOp)
def _sigmoid_scalar(e: KernelEmitter, op: Operation, x: SSAValue) -> SSAValue:
    _float_only(e, op, x)
    return _sigmoid(e, x)


@UNARY_SCALARS.register(g.SiluOp)
def _silu(e: KernelEmitter, op: Operation, x: SSAValue) -> SSAValue:
    _float_only(e, op, x)
    return e.fmul(x, _sigmoid(e, x))


@UNARY_SCALARS.register(g.GeluOp)
def _gelu(e: KernelEmitter, op: Operation, x: SSAValue) -> SSAValue:
    """The tanh form: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    _float_only(e, op, x)
    t = x.type
    c = e.const(pymath.sqrt(2.0 / pymath.pi), t)
    x3 = e.fmul(e.fmul(x, x), x)
    inner = e.fmul(c, e.fadd(x, e.fmul(e.const(0.044715, t), x3)))
    one = e.const(1.0, t)
    return e.fmul(e.fmul(e.const(0.5, t), x), e.fadd(one, e.op(math.TanhOp(inner))))


def _unary_scalar(
    e: KernelEmitter, op: Operation, x: SSAValue, kind: type[Operation] | None = None
) -> SSAValue:
    """The unary op ``kind`` (default: ``op``'s class) on ``x``; ``op`` is named in errors."""
    scalar = UNARY_SCALARS.get(kind or type(op))
    if scalar is None:
        raise not_lowered(op)
    return scalar(e, op, x)


GraphLowering = Callable[["_FunctionLowering", Any], None]
"""Lowers one Graph IR op of the function being lowered: adds its kernels and launches and
records the buffer of each result in ``env``."""

TILE_LOWERINGS: OpRegistry[GraphLowering] = OpRegistry("Tile IR lowering")
"""The Tile IR lowering of each Graph IR op, by op class."""

# elementwise
TILE_LOWERINGS.register(
    g.AddOp, g.SubOp, g.MulOp, g.DivOp, g.PowOp, g.MaximumOp, g.MinimumOp,
    g.LtOp, g.LeOp, g.GtOp, g.GeOp, g.EqOp, g.NeOp,
)(_FunctionLowering.lower_binary)
TILE_LOWERINGS.register(
    g.NegOp, g.AbsOp, g.ExpOp, g.LogOp, g.SqrtOp, g.RsqrtOp, g.TanhOp, g.ReluOp, g.GeluOp,
    g.SiluOp, g.SigmoidOp, g.ErfOp, g.SinOp, g.CosOp,
)(_FunctionLowering.lower_unary)
TILE_LOWERINGS.register(g.SelectOp)(_FunctionLowering.lower_select)
TILE_LOWERINGS.register(g.CastOp)(_FunctionLowering.lower_cast)
TILE_LOWERINGS.register(g.FusedOp)(_FunctionLowering.lower_fused)
TILE_LOWERINGS.register(g.FusedReductionsOp)(_FunctionLowering.lower_fused_reductions)
# reductions and row-wise ops
TILE_LOWERINGS.register(g.SumOp, g.MaxOp, g.MinOp, g.MeanOp)(_FunctionLowering.lower_reduction)
TILE_LOWERINGS.register(g.LogSumExpOp)(tile_rowwise.lower_logsumexp)
TILE_LOWERINGS.register(g.SoftmaxOp)(tile_rowwise.lower_softmax)
TILE_LOWERINGS.register(
    g.RMSNormOp, g.RMSNormFwdOp, g.LayerNormOp, g.LayerNormFwdOp
)(tile_rowwise.lower_norm)
TILE_LOWERINGS.register(g.RowMomentsOp)(tile_rowwise.lower_row_moments)
TILE_LOWERINGS.register(g.LayerNormBwdOp, g.RMSNormBwdOp)(tile_rowwise.lower_norm_bwd)
TILE_LOWERINGS.register(g.MSEOp)(_FunctionLowering.lower_mse)
# data movement
TILE_LOWERINGS.register(g.ConstantOp)(_FunctionLowering.lower_constant)
tile_datamove.register(TILE_LOWERINGS)  # transpose, reshape, slice, concat, broadcast
tile_gather.register(TILE_LOWERINGS)  # take_along_axis
tile_optim.register(TILE_LOWERINGS)  # adamw_update, sgd_update
# GEMM family and attention
TILE_LOWERINGS.register(g.MatmulOp)(_FunctionLowering.lower_matmul)
TILE_LOWERINGS.register(g.MatmulEpilogueOp)(_FunctionLowering.lower_matmul_epilogue)
TILE_LOWERINGS.register(g.Conv2dOp)(tile_conv.lower_conv2d)
TILE_LOWERINGS.register(g.FlashAttentionOp, g.FlashAttentionFwdOp)(tile_attention.lower_flash_attention)
TILE_LOWERINGS.register(g.FlashAttentionBwdOp)(tile_attention_bwd.lower_flash_attention_bwd)
# scientific: FFT, linear algebra, sparse, complex parts, random
TILE_LOWERINGS.register(g.FFTOp, g.FFT2dOp)(tile_fft.lower_fft)
TILE_LOWERINGS.register(g.CholeskyOp)(tile_linalg.lower_cholesky)
TILE_LOWERINGS.register(g.SVDOp)(tile_linalg.lower_svd)
TILE_LOWERINGS.register(g.TriangularSolveOp)(tile_support.lower_triangular_solve)
TILE_LOWERINGS.register(g.SpMMOp)(tile_sparse.lower_spmm)
TILE_LOWERINGS.register(g.SpMMTransposeOp)(tile_sparse.lower_spmm_transpose)
TILE_LOWERINGS.register(g.SDDMMOp)(tile_sparse.lower_sddmm)
TILE_LOWERINGS.register(g.RealOp, g.ImagOp)(tile_support.lower_complex_part)
TILE_LOWERINGS.register(g.ComplexOp)(tile_support.lower_complex)
TILE_LOWERINGS.register(g.RandnOp)(tile_random.lower_randn)
TILE_LOWERINGS.register(g.PoissonOp)(tile_random.lower_poisson)
# collectives
for _op, _lowering in tile_collectives.lowerings().items():
    TILE_LOWERINGS.register(_op)(_lowering)  # type: ignore[arg-type]

LOWERED_OPS: tuple[str, ...] = TILE_LOWERINGS.names()
"""Names of the tgraph ops this pass lowers."""


def _is_graph_function(fn: func.FuncOp) -> bool:
    types = [*fn.function_type.inputs.data, *fn.function_type.outputs.data]
    if any(isinstance(t, TensorType) for t in types):
        return True
    return any(op.dialect_name() == "tgraph" for op in fn.walk())


@dataclass(frozen=True)
class LowerGraphToTile(ModulePass):
    """Lower every Graph IR ``func.func`` to ``ttile.kernel``s and a host function.

    ``sm90=true`` lowers the ops that ``lower-matmul-sm90`` and ``lower-attention-sm90``
    take as their Hopper (TMA + wgmma) kernels, as ``@ts.jit`` does on a compute
    capability 9.0 device.
    """

    name = "lower-graph-to-tile"

    sm90: bool = False
    sm90_tiles: tuple[str, ...] = ()
    """Tuned sm90 matmul tile configs, ``"MxNxK:in->out=bn,stages,consumers,group_m,cluster"``
    each (:func:`tessera.passes.matmul_config.parse_tiles`); other shapes use the heuristic."""
    deterministic: bool = True
    """False: every ``all_reduce`` is lowered as ``nondeterministic``
    (:attr:`tessera.options.CompileOptions.deterministic`)."""
    allow_tf32: bool = False
    """With ``sm90``: f32 matmuls run as one TF32 wgmma product (operands rounded to TF32)
    instead of the full-accuracy 3xTF32 one (``CompileOptions.allow_tf32``)."""
    sm90_attention_bwd: bool = True
    """With ``sm90``: ``flash_attention_bwd`` runs as the wgmma backward kernels
    (``CompileOptions.sm90_attention_bwd``); False keeps the ``mma.sync`` ones."""
    split_k: str | int = "off"
    """With ``sm90``: split-K for matmuls with too few output tiles: ``off``, ``auto`` (the
    cost rule of ``matmul_config.split_k``) or a count (``CompileOptions.split_k``)."""
    implicit_conv: bool = False
    """With ``sm90``: bf16/f16 conv2d as the implicit-GEMM kernel
    (``CompileOptions.implicit_conv``)."""
    sm90_store: str = "staged"
    """With ``sm90``: how matmul results that TMA does not store (f32, split-K partials,
    N % 8 != 0) leave the kernel: ``staged`` (through shared memory, coalesced) or
    ``registers`` (``st.global`` from the accumulators; ``CompileOptions.sm90_store``)."""

    def claims(self) -> tuple[Callable[[_FunctionLowering, Operation], None], ...]:
        """Called with every op before any is lowered (``_FunctionLowering.claims``)."""
        if not (self.sm90 and self.implicit_conv):
            return ()
        from tessera.passes.sm90.conv_phase_weight import claim

        return (claim,)

    def overrides(self) -> dict[type[Operation], tuple[Override, ...]]:
        """Lowerings tried before the generic one, by op type."""
        if not self.sm90:
            return {}
        from tessera.passes.sm90.lower_attention_sm90 import LowerAttentionSm90
        from tessera.passes.sm90.lower_matmul_sm90 import LowerMatmulSm90

        return {
            **LowerMatmulSm90(sm90_tiles=self.sm90_tiles, allow_tf32=self.allow_tf32,
                             split_k=self.split_k, implicit_conv=self.implicit_conv,
                             sm90_store=self.sm90_store).overrides(),
            **LowerAttentionSm90(sm90_attention_bwd=self.sm90_attention_bwd).overrides(),
        }

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in [f for f in op.body.block.ops if isinstance(f, func.FuncOp)]:
            if fn.body.blocks and _is_graph_function(fn):
                if len(fn.body.blocks) != 1:
                    raise NotImplementedError(
                        f"lower-graph-to-tile: func.func @{fn.sym_name.data} has more than one "
                        "block"
                    )
                _check_static(fn)
                expand_attention_grads(fn, tile_attention_bwd.fused)
                _FunctionLowering(
                    op, fn, self.overrides(), deterministic=self.deterministic,
                    allow_tf32=self.allow_tf32, claims=self.claims(),
                ).run()


def _check_static(fn: func.FuncOp) -> None:
    """Graph IR is lowered for static shapes only: reject a dynamic size by name."""
    values = [*fn.body.block.args, *(r for o in fn.body.walk() for r in o.results)]
    for v in values:
        if isinstance(v.type, TensorType) and any(d < 0 for d in v.type.get_shape()):
            raise NotImplementedError(
                f"lower-graph-to-tile: func.func @{fn.sym_name.data}: {v.type} has a dynamic "
                "size; Graph IR is lowered for static shapes only"
            )


