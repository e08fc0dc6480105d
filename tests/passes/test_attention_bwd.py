"""Attention backward (tessera/passes/tile_attention_bwd.py, the ``flash_attention_fwd``
log-sum-exp of tessera/passes/tile_attention.py, expand-attention-grad): the Tile IR
interpreter's results on ragged shapes against torch float64 autograd, the ops'
verifiers, the autodiff pass's output, and ptxas on the kernels."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from tessera.ir import tile as tt
from tessera.passes.autodiff import vjp_function
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.passes.pipelines import default_context, lower_to_target, to_ptx
from tessera.runtime import ptxas
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host

NP = {"bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.float16, "f32": np.float32,
      "f64": np.float64}
RNG = np.random.default_rng(11)


def ty(shape, elem) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{elem}>"


def grad_text(qs, ks, elem, causal, scale=None) -> str:
    """q, k, v, do -> (o, lse, dq, dk, dv) through the two attention gradient ops."""
    lse = ty(qs[:-1], "f64" if elem == "f64" else "f32")
    tq, tk = ty(qs, elem), ty(ks, elem)
    extra = (f" scale = {scale:e}" if scale is not None else "") + (" causal" if causal else "")
    return f"""func.func @f(%q: {tq}, %k: {tk}, %v: {tk}, %do: {tq}) -> ({tq}, {lse}, {tq}, {tk}, {tk}) {{
      %o, %lse = tgraph.flash_attention_fwd %q, %k, %v{extra} : ({tq}, {tk}, {tk}) -> ({tq}, {lse})
      %dq, %dk, %dv = tgraph.flash_attention_bwd %q, %k, %v, %o, %do, %lse{extra} : ({tq}, {tk}, {tk}, {tq}, {tq}, {lse}) -> ({tq}, {tk}, {tk})
      func.return %o, %lse, %dq, %dk, %dv : {tq}, {lse}, {tq}, {tk}, {tk} }}"""


def parse(text: str) -> ModuleOp:
    m = Parser(default_context(), text).parse_module()
    m.verify()
    return m


def lower(text: str) -> ModuleOp:
    m = parse(text)
    LowerGraphToTile().apply(default_context(), m)
    m.verify()
    return m


def reference(q, k, v, do, scale, causal):
    """torch float64 autograd: o, lse, dq, dk, dv."""
    q, k, v = (torch.tensor(np.asarray(x, np.float64), requires_grad=True) for x in (q, k, v))
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        sq, sk = s.shape[-2:]
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool).triu(1), -math.inf)
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1) @ v
    grads = torch.autograd.grad(o, (q, k, v), torch.tensor(np.asarray(do, np.float64)))
    return [x.detach().numpy() for x in (o, lse, *grads)]


def rel_err(got, want) -> float:
    got = np.asarray(got).astype(np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def inputs(qs, ks, elem, rng=RNG):
    return [rng.normal(size=s).astype(NP[elem]) for s in (qs, ks, ks, qs)]


@pytest.mark.parametrize(
    "qs,sk,elem,causal",
    [
        ((1, 2, 67, 64), 67, "bf16", True),
        ((1, 67, 64), 130, "f16", False),
        ((1, 45, 128), 70, "f16", True),
    ],
)
def test_fused_kernels_match_float64(qs, sk, elem, causal):
    ks = (*qs[:-2], sk, qs[-1])
    args = inputs(qs, ks, elem)
    m = lower(grad_text(qs, ks, elem, causal))
    names = [k.sym_name.data for k in m.body.block.ops if isinstance(k, tt.KernelOp)]
    assert names == ["f_flash_attention_fwd_0", "f_attention_bwd_dot_0",
                     "f_attention_bwd_dkdv_0", "f_attention_bwd_dq_0"]
    got = run_host(m, "f", args)
    want = reference(*args, 1 / math.sqrt(qs[-1]), causal)
    tol = 2e-2 if elem == "bf16" else 4e-3
    for name, x, w in zip(("o", "lse", "dq", "dk", "dv"), got, want):
        assert rel_err(x, w) < (1e-5 if name == "lse" else tol), name


def test_scale_and_interpreter_in_float64():
    qs, ks = (2, 9, 8), (2, 13, 8)
    args = inputs(qs, ks, "f64")
    want = reference(*args, 0.3, True)
    got = run_function(parse(grad_text(qs, ks, "f64", True, 0.3)), "f", args)
    for x, w in zip(got, want):
        assert rel_err(x, w) < 1e-12


def test_without_kernel_the_lowering_expands():
    """f32 and head sizes 8, 16 and 32: expanded into matmuls and rowwise ops, still
    correct; with 16-bit operands the log-sum-exp is that of their f32 scores and the
    backward's products are kept in f32, as the fused kernels compute them (16-bit
    products would round the scores, dP and the gradients first)."""
    cases = (((1, 20, 32), (1, 24, 32), "bf16"), ((4, 4, 3, 8), (4, 4, 6, 8), "bf16"),
             ((1, 20, 16), (1, 9, 16), "f32"))
    rng = np.random.default_rng(5)  # the test's own draws, whatever ran before it
    for qs, ks, elem in cases:
        args = inputs(qs, ks, elem, rng)
        args[0] = (args[0].astype(np.float64) * 4).astype(NP[elem])  # scores of a few units
        m = lower(grad_text(qs, ks, elem, True))
        names = [k.sym_name.data for k in m.body.block.ops if isinstance(k, tt.KernelOp)]
        assert not any("attention_bwd" in n for n in names)
        got = run_host(m, "f", args)
        want = reference(*args, 1 / math.sqrt(qs[-1]), True)
        for name, x, w in zip(("o", "lse", "dq", "dk", "dv"), got, want):
            # bf16: the products accumulated in f32, P and dS rounded only as operands;
            # over 20 draws dq and dk were at most 0.016 and 0.024 (0.039 and 0.048 with
            # every product in bf16)
            tol = 1e-5 if name == "lse" else 3e-2 if elem == "bf16" else 1e-4
            assert rel_err(x, w) < tol, (qs, elem, name, rel_err(x, w))


@pytest.mark.parametrize("qs,ks,elem", [((2, 37, 24), (2, 29, 24), "f16"),
                                         ((1, 3, 21, 40), (1, 3, 50, 40), "bf16")])
def test_expansion_without_a_mask(qs, ks, elem):
    """The expansion's numerics without the causal mask, in f16 and with two batch
    dims (odd lengths, head sizes 24 and 40)."""
    args = inputs(qs, ks, elem, np.random.default_rng(7))
    args[0] = (args[0].astype(np.float64) * 4).astype(NP[elem])
    got = run_host(lower(grad_text(qs, ks, elem, False)), "f", args)
    want = reference(*args, 1 / math.sqrt(qs[-1]), False)
    for name, x, w in zip(("o", "lse", "dq", "dk", "dv"), got, want):
        # over 20 draws: bf16 gradients at most 0.0088, f16 0.00097
        tol = 1e-5 if name == "lse" else 2e-2 if elem == "bf16" else 2e-3
        assert rel_err(x, w) < tol, (name, rel_err(x, w))


def test_autodiff_emits_the_fused_ops():
    qs = (2, 16, 64)
    t = ty(qs, "bf16")
    m = parse(f"""func.func @loss(%q: {t}, %k: {t}, %v: {t}) -> {t} {{
      %0 = tgraph.flash_attention %q, %k, %v causal : ({t}, {t}, {t}) -> {t}
      func.return %0 : {t} }}""")
    (f,) = m.body.block.ops
    gf = vjp_function(f, return_value=True)
    names = [op.name for op in gf.body.block.ops]
    assert names.count("tgraph.flash_attention_fwd") == 1
    assert names.count("tgraph.flash_attention_bwd") == 1
    assert "tgraph.flash_attention" not in names and "tgraph.softmax" not in names
    # the forward-mode function and the unfused adjoint still materialize
    unfused = vjp_function(f, fused_attention=False)
    assert "tgraph.softmax" in [op.name for op in unfused.body.block.ops]


@pytest.mark.parametrize(
    "body,msg",
    [
        ("%o, %x = tgraph.flash_attention_fwd %q, %k, %k : ({t}, {t}, {t}) -> ({t}, tensor<2x5xf32>)",
         "lse has shape"),
        ("%o, %x = tgraph.flash_attention_fwd %q, %k, %k : ({t}, {t}, {t}) -> ({t}, tensor<2x4xbf16>)",
         "lse must be f32 or f64"),
        ("%a, %b, %c = tgraph.flash_attention_bwd %q, %k, %k, %q, %k, %l : ({t}, {t}, {t}, {t}, {t}, "
         "tensor<2x4xf32>) -> ({t}, {t}, {t})", None),
    ],
)
def test_invalid_ops(body, msg):
    t = ty((2, 4, 8), "bf16")
    text = (f"func.func @f(%q: {t}, %k: {t}, %l: tensor<2x4xf32>) {{\n"
            f"  {body.format(t=t)}\n  func.return }}")
    if msg is None:  # a valid op parses (round trip of the generic form)
        m = parse(text)
        again = parse(str(m))
        assert str(again) == str(m)
        return
    with pytest.raises(VerifyException, match=msg):
        parse(text)


def test_bwd_shape_errors():
    t, t2 = ty((2, 4, 8), "bf16"), ty((2, 4, 16), "bf16")
    text = (f"func.func @f(%q: {t}, %k: {t}, %d: {t2}, %l: tensor<2x4xf32>) {{\n"
            f"  %a, %b, %c = tgraph.flash_attention_bwd %q, %k, %k, %q, %d, %l : ({t}, {t}, {t}, "
            f"{t}, {t2}, tensor<2x4xf32>) -> ({t}, {t}, {t})\n  func.return }}")
    with pytest.raises(VerifyException, match="tgraph.flash_attention_bwd: element|do has shape"):
        parse(text)


def test_ptxas_bench_shape():
    """The kernels at the bench's structure (D 128, causal, mma.sync forward) assemble for
    sm_90a; only the dK/dV kernel (255 registers) spills, a few hundred bytes."""
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found")
    qs = (1, 2, 256, 128)
    m = lower(grad_text(qs, qs, "bf16", True))
    ptx = to_ptx(lower_to_target(m), verify=False)
    spills = {k: r.spill_stores for k, r in ptxas.resources(ptx).items()}
    assert set(spills) == {"f_flash_attention_fwd_0", "f_attention_bwd_dot_0",
                           "f_attention_bwd_dkdv_0", "f_attention_bwd_dq_0"}
    assert spills["f_attention_bwd_dkdv_0"] < 512
    assert all(v == 0 for k, v in spills.items() if k != "f_attention_bwd_dkdv_0"), spills


def test_sm90_forward_stores_the_lse():
    """On sm90 ``flash_attention_fwd`` is the wgmma kernel with one more pointer (lse)."""
    t, tl = ty((1, 2, 200, 128), "bf16"), ty((1, 2, 200), "f32")
    m = parse(f"""func.func @f(%q: {t}) -> ({t}, {tl}) {{
      %o, %lse = tgraph.flash_attention_fwd %q, %q, %q causal : ({t}, {t}, {t}) -> ({t}, {tl})
      func.return %o, %lse : {t}, {tl} }}""")
    LowerGraphToTile(sm90=True).apply(default_context(), m)
    ptx = to_ptx(lower_to_target(m), verify=False)
    entry = ptx[ptx.index(".entry f_attention_0"):]
    entry = entry[:entry.index(")")]
    assert entry.count(".param .u64") == 2
    assert "lg2.approx.ftz.f32" in ptx and "st.global.f32" in ptx
    if ptxas.find_ptxas() is not None:
        ptxas.check(ptx)


def test_second_derivative_through_the_expansion():
    """grad of grad: the adjoints of flash_attention_fwd (with an lse cotangent) and of
    flash_attention_bwd go through their Graph IR expansions; float64 against torch."""
    qs, ks = (1, 5, 4), (1, 6, 4)
    t, tk = ty(qs, "f64"), ty(ks, "f64")
    m = parse(f"""func.func @f(%q: {t}, %k: {tk}, %v: {tk}) -> {t} {{
      %0 = tgraph.flash_attention %q, %k, %v causal : ({t}, {tk}, {tk}) -> {t}
      func.return %0 : {t} }}""")
    (f,) = m.body.block.ops
    gf = vjp_function(f, cotangent_args=True)  # (q, k, v, ct) -> (dq, dk, dv)
    assert "tgraph.flash_attention_bwd" in [op.name for op in gf.body.block.ops]
    hf = vjp_function(gf, wrt=[0, 1, 2, 3], cotangent_args=True, name="h")
    args = [RNG.normal(size=s) for s in (qs, ks, ks, qs)]
    us = [RNG.normal(size=s) for s in (qs, ks, ks)]
    got = run_function(ModuleOp([hf]), "h", [*args, *us])
    q, k, v, ct = (torch.tensor(a, requires_grad=True) for a in args)
    s = (q @ k.transpose(-1, -2) / 2.0).masked_fill(torch.ones(5, 6, dtype=torch.bool).triu(1),
                                                    -math.inf)
    o = torch.softmax(s, -1) @ v
    g1 = torch.autograd.grad(o, (q, k, v), ct, create_graph=True)
    want = torch.autograd.grad(g1, (q, k, v, ct), [torch.tensor(u) for u in us])
    for x, w in zip(got, want):
        assert rel_err(x, w.detach().numpy()) < 1e-10
