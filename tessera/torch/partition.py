"""Splitting an ATen FX graph into Tessera partitions and eager torch code.

:func:`partition` marks each ``call_function`` node that has a rule in
:data:`tessera.torch.aten_ops.RULES` (and passes its checks) as supported,
groups supported nodes into maximal partitions with torch's
``CapabilityBasedPartitioner``, and replaces each partition by a
:class:`TesseraPartition` module. Everything else stays in the graph and runs
in torch: those nodes are the fallbacks that the report counts.

A :class:`TesseraPartition` traces its sub-graph into Graph IR through the
operator functions of :mod:`tessera.frontend.ops`, as a ``ts.jit`` compiled
function of the partition's inputs: Graph IR shapes are static, so each new
set of input shapes (batch, sequence length) traces and caches its own
specialization, while dynamo's graph, compiled with symbolic sizes, is reused.
CPU tensors run on the numpy reference interpreter, CUDA tensors on the GPU.
"""

from __future__ import annotations

import operator
from collections import Counter
from typing import Any

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from xdsl.dialects.builtin import UnitAttr

from tessera.frontend.errors import TesseraError
from tessera.frontend.jit import CompiledFunction
from tessera.frontend.tracing import TracedTensor, active_trace
from tessera.passes.fused_f32_intermediates import ATTR as F32_INTERMEDIATES
from tessera.runtime import convert
from tessera.torch import aten_ops
from tessera.torch.dropout import RANDOM_DRAWS
from tessera.torch.report import LOG, GraphReport

aten = torch.ops.aten

_SCALARS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)
"""Non-tensor operands a partition takes: sizes, symbolic at compile time, concrete
Python numbers (static arguments of the Tessera function) at run time."""

_SYM_OPS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv,
            operator.neg, operator.mod, operator.pow, operator.eq, operator.ne, operator.lt,
            operator.le, operator.gt, operator.ge}


def op_name(target: Any) -> str:
    """A short printable name of a node target (``aten.mm.default``)."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    name = getattr(target, "__name__", None)
    return f"{target.__module__}.{name}" if name else str(target)


def _tensor_vals(v: Any) -> list[Any]:
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, tuple | list):
        return [t for x in v for t in _tensor_vals(x)]
    return []


def unsupported_reason(node: torch.fx.Node) -> str | None:
    """None when ``node`` can be translated, else why not (for the report)."""
    target = node.target
    if target in RANDOM_DRAWS:
        return "a random draw (torch's generator)"
    r = aten_ops.RULES.get(target)
    if r is None:
        return "no Tessera rule"
    v = node.meta.get("val")
    if isinstance(v, tuple | list) and node.users and all(
        u.target is operator.getitem for u in node.users
    ):  # only the results that are used must be translatable
        v = [v[i] for i in sorted({u.args[1] for u in node.users})]
    outs = _tensor_vals(v)
    if not outs:
        return "no tensor result"
    ins = [
        t
        for a in node.all_input_nodes
        for t in _tensor_vals(a.meta.get("val"))
    ]
    for t in (*outs, *ins):
        if t.dtype not in aten_ops.SUPPORTED_DTYPES:
            return f"dtype {t.dtype}"
        if t.is_sparse or t.is_complex():
            return "sparse or complex tensor"
    for a in node.all_input_nodes:
        av = a.meta.get("val")
        if not isinstance(av, (torch.Tensor, tuple, list, *_SCALARS)):
            return f"operand {a.name} of type {type(av).__name__}"
    if target is operator.getitem and not isinstance(node.args[0].meta.get("val"), tuple | list):
        return "getitem of a non-tuple"
    if r.check is not None:
        try:
            return r.check(node)
        except (IndexError, AttributeError, TypeError) as e:
            return f"unexpected arguments ({e})"
    return None


STORAGE_OPS = frozenset({aten.as_strided.default, aten.as_strided_copy.default,
                         aten.as_strided_scatter.default})
"""Ops whose meaning depends on their operand's storage (strides, offset), not only its
values."""

STRIDED_OPS = frozenset({
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_efficient_attention_backward.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_flash_attention_backward.default,
    aten._scaled_dot_product_cudnn_attention.default,
    aten._scaled_dot_product_cudnn_attention_backward.default,
    aten._efficient_attention_forward.default, aten._efficient_attention_backward.default,
    aten._flash_attention_forward.default, aten._flash_attention_backward.default,
    aten._cudnn_attention_forward.default,
})
"""Ops whose kernels require their operands' strides, not only their values: the CUDA
attention kernels check the bias's alignment (torch's SDPA pads the bias's last dim to a
multiple of 8 or 16 and hands over a slice, ``attn_bias.stride(1) = 17 * 24``). Ops
tagged ``needs_exact_strides`` or ``needs_fixed_stride_order`` count too
(:func:`needs_strides`)."""


def needs_strides(target: Any) -> str | None:
    """Whether an op left to torch must get its tensor operands with the fake tensors'
    strides: ``"exact"`` (tagged ``needs_exact_strides`` or ``needs_fixed_stride_order``:
    any non-contiguous layout), ``"aligned"`` (:data:`STRIDED_OPS`: padded or broadcast
    layouts; a dense one that passes the kernels' checks passes them contiguous too, and
    copying q, k and v into it would cost three copies a layer), else None."""
    tags = getattr(target, "tags", ())
    if torch.Tag.needs_exact_strides in tags or torch.Tag.needs_fixed_stride_order in tags:
        return "exact"
    return "aligned" if target in STRIDED_OPS else None


def _dense_own(t: Any) -> bool:
    """``t`` (a fake tensor) lays out its elements densely (any order of strides) in a
    storage of exactly its size from offset 0: a copy of its values into
    ``torch.empty_strided(t.shape, t.stride())`` is the same storage."""
    if not isinstance(t, torch.Tensor) or not all(isinstance(d, int) for d in t.shape):
        return False
    try:
        nbytes = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError, AttributeError):
        return False
    return (t.storage_offset() == 0 and torch._prims_common.is_non_overlapping_and_dense_or_false(t)
            and nbytes == t.numel() * t.element_size())


def strided_layout(t: Any) -> tuple[tuple[int, ...], tuple[int, ...], int, int] | None:
    """(shape, strides, storage offset, storage elements) of fake tensor ``t`` when all are
    static and its elements, apart from broadcast (stride-0) dims, do not overlap: a
    fresh storage of that size viewed so holds ``t``'s values in ``t``'s layout. None
    otherwise (symbolic sizes, overlapping windows)."""
    if not isinstance(t, torch.Tensor):
        return None
    try:
        shape, stride = tuple(t.shape), tuple(t.stride())
        offset = t.storage_offset()
        if not all(type(d) is int for d in (*shape, *stride, offset)):
            return None
        extent = offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride) if n > 0)
        try:
            size = t.untyped_storage().nbytes() // t.element_size()
        except (RuntimeError, NotImplementedError, AttributeError, TypeError):
            size = extent
        if type(size) is not int:
            size = extent
    except (RuntimeError, TypeError):
        return None
    dims = sorted((s, n) for n, s in zip(shape, stride) if n > 1 and s != 0)
    reach = 0  # the elements the dims with smaller strides span
    for s, n in dims:
        if s < 0 or s <= reach:
            return None
        reach += s * (n - 1)
    return shape, stride, offset, max(size, extent)


def with_layout(value: torch.Tensor,
                layout: tuple[tuple[int, ...], tuple[int, ...], int, int]) -> torch.Tensor:
    """``value`` (contiguous) copied into a fresh tensor of ``layout``
    (:func:`strided_layout`); a broadcast dim is written once."""
    shape, stride, offset, size = layout
    out = torch.empty(size, dtype=value.dtype, device=value.device).as_strided(
        shape, stride, offset)
    if any(s == 0 and n > 1 for n, s in zip(shape, stride)):
        first = tuple(slice(0, 1) if s == 0 and n > 1 else slice(None)
                      for n, s in zip(shape, stride))
        out[first].copy_(value[first])
    else:
        out.copy_(value)
    return out


def storage_constraints(gm: torch.fx.GraphModule) -> tuple[dict[str, str], set[str]]:
    """What torch-side ops of ``gm`` need from Tessera, whose result is a fresh contiguous
    tensor. An operand of an untranslated :data:`STORAGE_OPS` node (or of a view leading
    to it) that torch has as a strided view or in another layout would be read wrongly;
    an operand of an untranslated node that :func:`needs_strides` (or a view of it) would
    reach the kernel with other strides. Returns the nodes that must stay in torch (a
    view of another tensor's storage read by a storage op), with why, and the names of
    the nodes whose Tessera result must be given the fake tensor's layout (a dense one
    such as channels-last; for a :func:`needs_strides` operand also a padded or
    broadcast one, :func:`strided_layout`)."""
    keep: dict[str, str] = {}
    restride: set[str] = set()
    todo = [n for n in gm.graph.nodes
            if n.op == "call_function" and n.target in STORAGE_OPS and unsupported_reason(n)]
    seen: set[torch.fx.Node] = set()
    while todo:
        node = todo.pop()
        for a in node.all_input_nodes:
            if a in seen or a.op != "call_function":
                continue
            seen.add(a)
            fake = a.meta.get("val")
            if not isinstance(fake, torch.Tensor) or (
                fake.is_contiguous() and _dense_own(fake)
            ):
                continue  # Tessera's contiguous result is torch's storage
            if _dense_own(fake):
                restride.add(a.name)
            else:  # a view of a larger storage: computed in torch, from its own operands
                keep[a.name] = f"a strided view read by {op_name(node.target)} in torch"
                todo.append(a)
    strided = [(n, kind) for n in gm.graph.nodes if n.op == "call_function"
               and (kind := needs_strides(n.target)) and unsupported_reason(n)]
    for n, kind in strided:
        todo = [n]
        seen = set()
        while todo:
            node = todo.pop()
            for a in node.all_input_nodes:
                if a in seen or a.op != "call_function" or a.name in keep:
                    continue
                seen.add(a)
                fake = a.meta.get("val")
                if not isinstance(fake, torch.Tensor) or fake.is_contiguous() or (
                    kind == "aligned"
                    and torch._prims_common.is_non_overlapping_and_dense_or_false(fake)
                ):
                    continue
                if strided_layout(fake) is not None:
                    restride.add(a.name)
                if getattr(a.target, "is_view", False):
                    todo.append(a)  # a view left to torch keeps its operand's strides
    return keep, restride


class _Support(OperatorSupportBase):
    def __init__(self, reasons: dict[str, str], keep: dict[str, str] | None = None,
                 free: set[str] | None = None):
        self.reasons = reasons
        self.keep = keep or {}
        self.free = free or set()
        """Views left to torch without being fallbacks (:func:`views_of_results_in_torch`)."""

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        if node.op != "call_function" or node.name in self.free:
            return False
        reason = self.keep.get(node.name) or unsupported_reason(node)
        if reason is not None:
            self.reasons[node.name] = reason
            return False
        return True


def _is_eager_op(node: torch.fx.Node) -> bool:
    """Nodes that count as fallbacks: ATen ops left to torch (not size arithmetic)."""
    return (
        node.op == "call_function"
        and node.target is not operator.getitem
        and node.target not in _SYM_OPS
        and isinstance(node.target, torch._ops.OpOverload)
        and node.target.namespace in ("aten", "prims")
        and "sym_" not in node.target.__name__
    )


ALIAS_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default,
                         aten.alias.default, aten.unsqueeze.default, aten.squeeze.dim,
                         aten.squeeze.dims, aten.squeeze.default})
"""Views that keep a contiguous tensor contiguous."""


def views_of_results_in_torch(gm: torch.fx.GraphModule) -> set[str]:
    """Graph results that are contiguous views (:data:`ALIAS_VIEWS` chains) of one base,
    another result or an input (a forward saving ``x.view(a, b)`` and ``x.view(-1, d)``
    for its backward), are made by torch as reshapes of one of them: a partition returns
    no result sharing memory with another or with an argument, so it would copy them. Of
    results viewing an input, all are made so; of a group viewing an intermediate, all
    but one (the base itself when it is a result). Returns the new nodes' names, to
    leave to torch; the originals keep their other users, inside a partition."""
    out = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if out is None:
        return set()
    results: list[torch.fx.Node] = []
    torch.fx.node.map_arg(out.args, lambda n: results.append(n) or n)
    groups: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for n in dict.fromkeys(results):
        base = n
        while base.op == "call_function" and base.target in ALIAS_VIEWS:
            base = base.args[0]
        groups.setdefault(base, []).append(n)
    kept: set[str] = set()
    swap: dict[torch.fx.Node, torch.fx.Node] = {}
    for base, members in groups.items():
        views = [m for m in members if m is not base]
        if base.op == "placeholder":
            rep = base
        elif base in members:
            rep = base
        elif len(views) >= 2:
            rep = views.pop(0)
        else:
            continue
        for m in views:
            val = m.meta.get("val")
            if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape):
                continue  # a symbolic size: left as it is
            with gm.graph.inserting_before(out):
                new = gm.graph.call_function(aten.reshape.default, (rep, list(val.shape)))
            new.meta = dict(m.meta)
            kept.add(new.name)
            swap[m] = new
    if swap:
        out.args = torch.fx.node.map_arg(out.args, lambda n: swap.get(n, n))
        for n in swap:
            v = n
            while v.op == "call_function" and v.target in ALIAS_VIEWS and not v.users:
                nxt = v.args[0]
                gm.graph.erase_node(v)
                v = nxt
        gm.recompile()
    return kept


def partition(gm: torch.fx.GraphModule, name: str, report: GraphReport) -> torch.fx.GraphModule:
    """Replace the translatable parts of ``gm`` by :class:`TesseraPartition` modules."""
    reasons: dict[str, str] = {}  # node name -> why a node with a rule was not translated
    free = views_of_results_in_torch(gm)
    keep, restride = storage_constraints(gm)
    support = _Support(reasons, keep, free)
    report.aten_ops = sum(1 for n in gm.graph.nodes if _is_eager_op(n))
    partitioner = CapabilityBasedPartitioner(
        gm, support, allows_single_node_partition=True
    )
    parts = partitioner.propose_partitions()
    kept = []
    for p in parts:
        nodes = list(p.nodes)
        if any(aten_ops.RULES[n.target].compute for n in nodes):
            kept.append(p)
    fused = partitioner.fuse_partitions(kept) if kept else gm
    report.fallback_ops = Counter()
    report.fallback_reasons = {}
    for n in fused.graph.nodes:
        if n.op == "call_function" and _is_eager_op(n):
            key = op_name(n.target)
            if n.target in aten_ops.RULES and n.name not in reasons:
                continue  # a data-movement op of a partition kept in torch: free there
            report.fallback_ops[key] += 1
            report.fallback_reasons.setdefault(key, reasons.get(n.name, "no Tessera rule"))
    _views_to_reshapes(fused)
    count = 0
    for n in list(fused.graph.nodes):
        if n.op == "call_module" and n.target.startswith("fused_"):
            sub = getattr(fused, n.target)
            report.tessera_ops += sum(
                1 for m in sub.graph.nodes
                if m.op == "call_function" and m.target is not operator.getitem
            )
            mod = TesseraPartition(f"{name}_p{count}", sub, report, restride)
            setattr(fused, n.target, mod)
            count += 1
    report.partitions = count
    fused.recompile()
    return fused


def _views_to_reshapes(gm: torch.fx.GraphModule) -> None:
    """Views left to torch become reshapes: a Tessera partition returns contiguous
    tensors where the graph may have expected other strides, and in a functional
    graph a reshape means the same as a view."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in (aten.view.default, aten._unsafe_view.default):
            n.target = aten.reshape.default


class TesseraPartition(torch.nn.Module):
    """One translated sub-graph, run as a Tessera compiled function of its inputs."""

    def __init__(self, name: str, gm: torch.fx.GraphModule, report: GraphReport,
                 restride: set[str] | frozenset[str] = frozenset()):
        super().__init__()
        self.name = name
        self.gm = gm
        self.report = report
        self.eager_reason: str | None = None
        self.compiled = CompiledFunction(self._body, name)
        out = next(n for n in gm.graph.nodes if n.op == "output")
        self._single = isinstance(out.args[0], torch.fx.Node)
        self._out_nodes = [out.args[0]] if self._single else list(out.args[0])
        # results that a storage op or a strided kernel in torch reads: given the fake
        # tensor's layout
        self._restride = [
            (i, layout) for i, n in enumerate(self._out_nodes)
            if n.name in restride and (layout := strided_layout(n.meta.get("val"))) is not None
        ]
        self._out_specs: list[tuple[Any, torch.Size, torch.device] | None] | None = None
        self._check_messages: list[str] = []
        """What each run-time check of the traced body reports (its count of bad
        elements follows the results; see ``aten_ops.fail_at_run_time_if``)."""

    def _body(self, *args: Any) -> tuple[TracedTensor, ...]:
        """The partition's sub-graph on traced values (run by the tracer): its results,
        then the count of each run-time check."""
        trace = active_trace()
        assert trace is not None
        # torch.compile's numerics: a fused kernel keeps 16-bit intermediates in f32
        trace.attributes[F32_INTERMEDIATES] = UnitAttr()
        env: dict[torch.fx.Node, Any] = {}
        it = iter(args)
        checks: list[tuple[TracedTensor, str]] = []
        aten_ops.collect_run_checks(checks)
        try:
            for node in self.gm.graph.nodes:
                if node.op == "placeholder":
                    env[node] = next(it)
                elif node.op == "call_function":
                    a = torch.fx.node.map_arg(node.args, lambda n: env[n])
                    kw = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
                    n_checks = len(checks)
                    env[node] = aten_ops.RULES[node.target].emit(node, *a, **kw)
                    for k in range(n_checks, len(checks)):
                        checks[k] = (checks[k][0], f"{node.name} ({node.target}): {checks[k][1]}")
                elif node.op == "output":
                    break
                else:
                    raise aten_ops.Unsupported(f"{node.op} node {node.name}")
        finally:
            aten_ops.collect_run_checks(None)
        outs = tuple(env[n] for n in self._out_nodes)
        for n, o in zip(self._out_nodes, outs):
            if not isinstance(o, TracedTensor):
                raise aten_ops.Unsupported(f"result {n.name} is not a tensor")
        self._check_messages = [m for _, m in checks]
        return outs + tuple(c for c, _ in checks)

    def forward(self, *args: Any) -> Any:
        if self.eager_reason is not None:
            return self.gm(*args)
        device = next((a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda),
                      None)
        call_args = [
            _on(a, device) if isinstance(a, torch.Tensor) else _static(a) for a in args
        ]
        try:
            results = self.compiled(*call_args)
        except (aten_ops.Unsupported, NotImplementedError) as e:
            # a node found untranslatable at trace time, or a Graph IR op the GPU
            # lowering does not have yet: this partition runs in torch from now on
            self.eager_reason = f"{type(e).__name__}: {e}"
            self.report.runtime_fallbacks[self.name] = self.eager_reason
            LOG.warning("tessera.torch: %s runs in torch (%s)", self.name, self.eager_reason)
            return self.gm(*args)
        if self._check_messages:
            results, counts = results[: len(self._out_nodes)], results[len(self._out_nodes):]
            for count, message in zip(counts, self._check_messages):
                if int(count) > 0:
                    raise TesseraError(f"tessera.torch: partition {self.name}: {message}")
        specs = self._out_specs
        if specs is None:
            specs = self._out_specs = [_out_spec(n) for n in self._out_nodes]
        tensor = torch.Tensor
        outs = [
            r if type(r) is tensor and spec is not None and r.dtype is spec[0]
            and r.shape == spec[1] and r.device == spec[2] else self._check(n, r)
            for n, r, spec in zip(self._out_nodes, results, specs)
        ]
        for i, layout in self._restride:
            outs[i] = with_layout(outs[i], layout)
        self.report.tessera_calls += 1
        return outs[0] if self._single else tuple(outs)

    def _check(self, node: torch.fx.Node, r: Any) -> torch.Tensor:
        """``r`` as a torch tensor on the device dynamo expects, checked against its fake."""
        fake = node.meta.get("val")
        t = r if isinstance(r, torch.Tensor) else convert.to_torch(r)
        if fake is not None:
            if t.device != fake.device:
                t = t.to(fake.device)
            if fake.dim() == 0 and t.dim() == 1 and t.numel() == 1:
                t = t.reshape(())  # numpy's ascontiguousarray gives 0-d arrays one dim
            ok_shape = all(
                not isinstance(f, int) or f == s for f, s in zip(fake.shape, t.shape)
            ) and len(fake.shape) == t.dim()
            if t.dtype != fake.dtype or not ok_shape:
                raise TesseraError(
                    f"tessera.torch: partition {self.name} result {node.name} is "
                    f"{t.dtype}{list(t.shape)}, torch expects {fake.dtype}{list(fake.shape)}"
                )
        return t


def _on(a: torch.Tensor, device: torch.device | None) -> torch.Tensor:
    """A partition argument as the compiled call takes it: contiguous on the CUDA device
    of the call (``device``; None: a CPU call). A CPU tensor is moved there: Dynamo's
    fake tensors have checked the graph's devices, so a CPU operand of a CUDA graph is
    one torch's CUDA kernels take in place (a 0-dim tensor torch made of a Python
    scalar, e.g. Gemma's ``torch.tensor(hidden_size ** 0.5)``; an index tensor built on
    the CPU in ``forward``, e.g. BEiT's relative position index into a CUDA table)."""
    if device is None:
        return a
    if not a.is_cuda:
        return a.to(device)
    return a.contiguous()


def _out_spec(node: torch.fx.Node) -> tuple[Any, torch.Size, torch.device] | None:
    """(dtype, shape, device) of a result whose fake has only static sizes: a result
    matching all three needs no further check (``TesseraPartition._check``)."""
    fake = node.meta.get("val")
    if not isinstance(fake, torch.Tensor) or not all(isinstance(d, int) for d in fake.shape):
        return None
    return fake.dtype, torch.Size(fake.shape), fake.device


def _static(a: Any) -> Any:
    """Size arguments: concrete Python numbers (symbolic sizes are resolved at call time)."""
    if isinstance(a, torch.SymInt | torch.SymFloat | torch.SymBool):
        return a.node.hint if hasattr(a.node, "hint") else int(a)
    return a


__all__ = ["partition", "TesseraPartition", "unsupported_reason", "op_name", "storage_constraints",
           "STORAGE_OPS", "STRIDED_OPS", "needs_strides", "strided_layout", "with_layout"]
