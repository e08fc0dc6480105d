"""The ``torch.compile`` backend: TorchDynamo + AOTAutograd FX graphs into Tessera.

:func:`backend` is what ``torch.compile(model, backend="tessera")`` calls with
each graph dynamo captures. AOTAutograd splits it into a forward and a
backward graph of core ATen ops (:data:`DECOMPOSITIONS`), and
:func:`compile_graph` hands each to :func:`tessera.torch.partition.partition`,
which replaces the translatable parts by Tessera partitions and leaves the rest
to eager torch. Training works because the backward graph is translated the
same way as the forward.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import core_aten_decompositions, decomposition_table
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import _has_tag_is_forward, _is_primal, default_partition

from tessera.runtime.cuda_graphs import requested_here
from tessera.torch import report as _report
from tessera.torch.attention import ATTENTION_BACKWARDS, static_masks
from tessera.torch.cross_entropy import fuse_cross_entropy
from tessera.torch.dropout import DROPOUT_DECOMPOSITIONS
from tessera.torch.partition import partition
from tessera.torch.rms_norm import fuse_rms_norm

aten = torch.ops.aten


def _decompositions() -> dict[Any, Callable[..., Any]]:
    table = dict(core_aten_decompositions())
    # Kept whole: it becomes flash_attention(_fwd). (Its decomposition also hands the
    # attention weights to the fused backward in place of the log-sum-exp.)
    del table[aten._scaled_dot_product_flash_attention_for_cpu.default]
    # Kept whole: two slices and a concat per rolled dim (decomposed, it is an fmod of
    # an arange and an index_select, which stay in torch)
    del table[aten.roll.default]
    # Kept whole: its input gradient is one layernorm_bwd row kernel
    del table[aten.native_layer_norm_backward.default]
    # Kept whole: computed in f32 and rounded once, as torch's kernels (decomposed, a
    # 16-bit result is rounded after each of three ops)
    del table[aten.addcdiv.default]
    del table[aten.addcmul.default]
    # Batch norm with no running statistics (instance norm, NFNet's weight
    # standardization): torch's decomposition, a var_mean and elementwise ops
    table[aten._native_batch_norm_legit.no_stats] = decomposition_table[
        aten._native_batch_norm_legit.no_stats]
    table[aten._weight_norm_interface_backward.default] = _weight_norm_backward
    table.update(ATTENTION_BACKWARDS)
    # Dropout and Bernoulli masks: a uniform draw reading only sizes, and translated
    # elementwise ops (the draw depends on no partition, so it splits none)
    table.update(DROPOUT_DECOMPOSITIONS)
    return table


def _weight_norm_backward(grad_w: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                          norms: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of ``w = g * v / ||v||`` (norms over every dim but ``dim``, kept as
    size-1 dims; wav2vec2's positional convolution), torch's formula
    (``_weight_norm_interface_backward``): ``grad_g = sum(grad_w * v) / norms`` over those
    dims, ``grad_v = g / norms * (grad_w - v * grad_g / norms)``."""
    d = dim % v.dim()
    dims = [k for k in range(v.dim()) if k != d]
    shape = [v.shape[k] if k == d else 1 for k in range(v.dim())]
    n = norms.reshape(shape)
    grad_g = (grad_w * v).sum(dims, keepdim=True) / n
    grad_v = g.reshape(shape) / n * (grad_w - v * (grad_g / n))
    return grad_v, grad_g.reshape(g.shape)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = _decompositions()
"""The core ATen decompositions, with CPU flash attention, ``roll`` and the layer norm
backward kept whole, batch norm without statistics and the weight-norm backward
decomposed, the fused attention backwards replaced (:data:`tessera.torch.attention.ATTENTION_BACKWARDS`),
and dropout and Bernoulli masks as a draw and elementwise ops
(:data:`tessera.torch.dropout.DROPOUT_DECOMPOSITIONS`)."""

_GRAPH_IDS = itertools.count()


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Any, *, kind: str, name: str,
                  cuda_graphs: bool = False) -> Any:
    """Partition one AOTAutograd graph into Tessera partitions and eager torch; with
    ``cuda_graphs``, the partitions' host plans replay their launches as CUDA graphs
    (:mod:`tessera.runtime.cuda_graphs`)."""
    rep = _report.GraphReport(name=f"{name}_{kind}", kind=kind)
    fused = partition(gm, rep.name, rep)
    _report.record(rep)
    run = fused.forward
    if cuda_graphs:
        def run(*args: Any, _forward: Any = fused.forward) -> Any:
            with requested_here():
                return _forward(*args)
    return make_boxed_func(run)


MODES = ("default", "reduce-overhead")
"""``torch.compile`` modes the backend takes: ``"reduce-overhead"`` replays each
partition's launches as CUDA graphs (memory for launch overhead, as Inductor's mode)."""


def _check_mode(mode: str | None, options: Any) -> bool:
    """Whether ``mode`` asks for CUDA graphs; a mode or options the backend does not have
    is an error, not ignored."""
    if options:
        raise ValueError(
            f"torch.compile(backend='tessera'): options {sorted(options)} are not supported "
            "(Tessera's compile options come from TESSERA_* environment variables)")
    if mode is not None and mode not in MODES:
        raise ValueError(
            f"torch.compile(backend='tessera'): mode {mode!r} is not supported; the modes "
            f"are {', '.join(repr(m) for m in MODES)} (autotuning: TESSERA_AUTOTUNE=1)")
    return mode == "reduce-overhead"


VIEW_OPS = frozenset({
    aten.t.default, aten.permute.default, aten.transpose.int, aten.view.default,
    aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
    aten.expand.default,
})
"""Ops that only view their first operand (static other arguments): what
:func:`views_of_inputs_in_backward` replays."""


def _view_chain(node: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """``(primal, views)`` when ``node`` is a chain of :data:`VIEW_OPS` with static
    arguments applied to a forward input (a primal), first view first; else None."""
    chain = []
    n = node
    while n.op == "call_function" and n.target in VIEW_OPS:
        if any(isinstance(a, torch.fx.Node) for a in (*n.args[1:], *n.kwargs.values())):
            return None  # a symbolic size: not replayable from the input alone
        chain.append(n)
        n = n.args[0]
    return (n, chain[::-1]) if chain and _is_primal(n) else None


def views_of_inputs_in_backward(joint: torch.fx.GraphModule) -> int:
    """Give the backward its own copy of each view of a forward input that it reads (a
    linear layer's ``t(weight)``), made from the input: the forward then saves the input
    (alive anyway) instead of the view, which a Tessera partition would return as a
    copy (a transposed weight written out every step). Returns the views replaced."""
    nodes = list(joint.graph.nodes)
    last = max((i for i, n in enumerate(nodes) if _has_tag_is_forward(n) or _is_primal(n)),
               default=-1)
    forward = set(nodes[: last + 1])
    order = {n: i for i, n in enumerate(nodes)}
    replaced = 0
    for v in nodes[: last + 1]:
        found = _view_chain(v) if v.op == "call_function" else None
        later = [u for u in v.users if u not in forward]
        if found is None or not later:
            continue
        base, chain = found
        with joint.graph.inserting_before(min(later, key=order.__getitem__)):
            cur = base
            for c in chain:
                new = joint.graph.call_function(c.target, (cur, *c.args[1:]), dict(c.kwargs))
                new.meta = {k: m for k, m in c.meta.items() if k != "partitioner_tag"}
                cur = new
        for u in later:
            u.replace_input_with(v, cur)
        replaced += 1
    if replaced:
        joint.graph.lint()
        joint.recompile()
    return replaced


def partition_joint(joint: torch.fx.GraphModule, joint_inputs: Any, **kw: Any) -> Any:
    """AOTAutograd's default forward/backward split, after masked attention backwards
    whose mask is a constant that is no mask or the causal one became unmasked
    (:func:`tessera.torch.attention.static_masks`): the backward then needs no mask; and
    with the backward's views of forward inputs made in the backward
    (:func:`views_of_inputs_in_backward`)."""
    static_masks(joint)
    views_of_inputs_in_backward(joint)
    return default_partition(joint, joint_inputs, **kw)


def backend(gm: torch.fx.GraphModule, example_inputs: Any, mode: str | None = None,
            options: Any = None) -> Any:
    """``torch.compile`` backend ``"tessera"``; ``mode`` is one of :data:`MODES`
    (``torch.compile(..., mode=...)`` passes it). Cross-entropy calls become
    :func:`tessera.torch.cross_entropy.cross_entropy` and RMS norms
    :func:`tessera.torch.rms_norm.rms_norm` first."""
    graphs = _check_mode(mode, options)
    name = f"graph{next(_GRAPH_IDS)}"
    fuse_cross_entropy(gm)
    fuse_rms_norm(gm)
    compile_kind = functools.partial(compile_graph, name=name, cuda_graphs=graphs)
    aot = aot_autograd(
        fw_compiler=functools.partial(compile_kind, kind="forward"),
        bw_compiler=functools.partial(compile_kind, kind="backward"),
        inference_compiler=functools.partial(compile_kind, kind="inference"),
        decompositions=DECOMPOSITIONS,
        partition_fn=partition_joint,
    )
    return aot(gm, example_inputs)


def compile(model: Any, *, dynamic: bool | None = None, fullgraph: bool = False, **kw: Any) -> Any:  # noqa: A001
    """``torch.compile(model, backend=tessera.torch.backend)``; starts a new report."""
    _report.reset()
    return torch.compile(model, backend=backend, dynamic=dynamic, fullgraph=fullgraph, **kw)


__all__ = ["backend", "compile", "compile_graph", "DECOMPOSITIONS"]
