"""The training row kernels of the norms: ``tgraph.layernorm_fwd`` / ``rmsnorm_fwd`` (a
norm that also returns each row's statistics: mean and rstd, or rstd) and ``tgraph.layernorm_bwd`` /
``tgraph.rmsnorm_bwd`` (the input gradient from those statistics): their kernels on the
Tile IR interpreter, the Graph IR interpreter, ``ts.grad`` and the torch rules for
``native_layer_norm`` and its backward in a training step, each against float64."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from torch import nn
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

import tessera as ts
import tessera.torch as tt
from tessera.frontend.ops.nn import layernorm_bwd, layernorm_fwd, rmsnorm_bwd, rmsnorm_fwd
from tessera.ir import tile as tile_ir
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.passes.pipelines import default_context
from tessera.runtime.tile_interpreter import run_host

NP = {"f32": np.float32, "bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.float16,
      "f64": np.float64}
TOL = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2, "f64": 1e-12}
RNG = np.random.default_rng(11)


def ty(shape, elem) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{elem}>"


def reference(x, w, b, eps, kind: str = "layer"):
    """y, mean, rstd in float64 (mean None for an RMS norm)."""
    X = np.asarray(x).astype(np.float64)
    mu = X.mean(-1, keepdims=True) if kind == "layer" else None
    c = X - mu if mu is not None else X
    rstd = 1 / np.sqrt((c**2).mean(-1, keepdims=True) + eps)
    y = c * rstd
    if w is not None:
        y = y * np.asarray(w).astype(np.float64)
    if b is not None:
        y = y + np.asarray(b).astype(np.float64)
    return y, mu, rstd


def lowered(shape, elem, affine: bool, kind: str = "layer") -> ModuleOp:
    t, tw = ty(shape, elem), ty((shape[-1],), elem)
    ts_ = ty((*shape[:-1], 1), "f64" if elem == "f64" else "f32")
    ctx = default_context()
    if kind == "layer":
        params = f", %w: {tw}, %b: {tw}" if affine else ""
        wb = f" weight %w : {tw} bias %b : {tw}" if affine else ""
        body = f"""%y, %m, %r = tgraph.layernorm_fwd %x{wb} eps = 1.000000e-05 : {t} -> ({t}, {ts_}, {ts_})
      func.return %y, %m, %r : {t}, {ts_}, {ts_}"""
        results = f"{t}, {ts_}, {ts_}"
    else:
        params = f", %w: {tw}" if affine else ""
        wb = f" weight %w : {tw}" if affine else ""
        body = f"""%y, %r = tgraph.rmsnorm_fwd %x{wb} eps = 1.000000e-05 : {t} -> ({t}, {ts_})
      func.return %y, %r : {t}, {ts_}"""
        results = f"{t}, {ts_}"
    m = Parser(ctx, f"""func.func @f(%x: {t}{params}) -> ({results}) {{
      {body} }}""").parse_module()
    LowerGraphToTile().apply(ctx, m)
    m.verify()
    return m


@pytest.mark.parametrize(
    "shape,elem,vector",
    [
        ((5, 768), "bf16", True),  # a warp per row, a partial last tile of rows
        ((3, 1001), "bf16", True),  # ragged rows: 16-byte chunks and scalar edges
        ((2, 3, 4099), "f16", True),  # one tile per row
        ((3, 40000), "f32", False),  # past the registers: the strided kernel
        ((4, 6), "f64", False),  # f64: the strided kernel, f64 statistics
        ((7,), "bf16", True),  # one row, narrower than a vector: 1-element "vectors"
        ((2, 3), "f32", True),
    ],
)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_kernels_match_float64(shape, elem, vector, affine, kind):
    """``layernorm_fwd`` / ``rmsnorm_fwd``: the normalized rows and the statistics."""
    n = shape[-1]
    x = (RNG.normal(0.5, 2.0, size=shape) + 3.0).astype(NP[elem])
    w, b = ((RNG.normal(1.0, 0.5, size=(n,)).astype(NP[elem]) for _ in range(2))
            if affine else (None, None))
    if kind == "rms":
        b = None
    m = lowered(shape, elem, affine, kind)
    (k,) = [o for o in m.body.block.ops if isinstance(o, tile_ir.KernelOp)]
    assert any(isinstance(o, tile_ir.LoadVectorOp) for o in k.walk()) == vector
    params = [p for p in (w, b) if p is not None]
    got = run_host(m, "f", [x, *params])
    y, rstd = got[0], got[-1]
    want_y, want_mean, want_rstd = reference(x, w, b, 1e-5, kind)
    stats_t = np.float64 if elem == "f64" else np.float32
    assert rstd.dtype == stats_t and rstd.shape == (*shape[:-1], 1)
    tol = TOL[elem]
    assert np.max(np.abs(y.astype(np.float64) - want_y)) <= tol * np.max(np.abs(want_y))
    stat_tol = 1e-12 if elem == "f64" else 1e-5
    assert np.max(np.abs(rstd - want_rstd) / want_rstd) <= stat_tol
    if kind == "layer":
        mean = got[1]
        assert mean.dtype == stats_t and mean.shape == rstd.shape
        assert np.max(np.abs(mean - want_mean) / np.abs(want_mean)) <= stat_tol
    else:
        assert len(got) == 2


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_graph_interpreter_matches_float64(kind):
    @ts.jit
    def f(x, w, b):
        if kind == "rms":
            return rmsnorm_fwd(x, w, eps=1e-3)
        return layernorm_fwd(x, w, b, eps=1e-3)

    x = RNG.normal(size=(3, 4, 10)).astype(np.float32)
    w, b = RNG.normal(size=(10,)).astype(np.float32), RNG.normal(size=(10,)).astype(np.float32)
    got = [np.asarray(r) for r in f(x, w, b)]
    want = reference(x, w, b if kind == "layer" else None, 1e-3, kind)
    want = [v for v in want if v is not None]
    assert len(got) == len(want)
    assert got[-1].shape == (3, 4, 1) and got[-1].dtype == np.float32
    for g_, ref in zip(got, want):
        np.testing.assert_allclose(g_, ref, rtol=1e-5, atol=1e-5)


def test_layernorm_fwd_names_a_bad_weight():
    @ts.jit
    def f(x, w):
        return layernorm_fwd(x, w)

    from tessera.errors import ShapeError

    with pytest.raises(ShapeError, match=r"layernorm_fwd weight has shape \[4\], expected \[8\]"):
        f(np.ones((2, 8), np.float32), np.ones((4,), np.float32))


@pytest.fixture
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()



def _matches_eager(model, x, tol, loss=lambda o: o.pow(2).sum(), compiled=None):
    """One step through ``tessera.torch`` against eager: the output and the gradients
    of ``loss`` (the parameters', then ``x``'s when it needs one) within ``tol``, with
    no op or partition left to torch."""
    out = (compiled if compiled is not None else tt.compile(model))(x)
    loss(out).backward()
    got = [p.grad.clone() for p in model.parameters()]
    got += [x.grad.clone()] if x.requires_grad else []
    for p in model.parameters():
        p.grad = None
    x.grad = None
    ref = model(x)
    loss(ref).backward()
    want = [p.grad for p in model.parameters()] + ([x.grad] if x.requires_grad else [])
    for p in model.parameters():
        p.grad = None
    x.grad = None
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    rep = tt.last_report()
    assert not rep.fallback_ops and not rep.runtime_fallbacks, str(rep)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_native_layer_norm_in_a_training_step(_fresh_dynamo, monkeypatch, dtype):
    """A training forward's ``native_layer_norm`` (its mean and rstd saved for the
    backward) becomes one ``layernorm_fwd``; the step matches eager."""
    from tessera.torch import rules_nn

    calls = []
    real = rules_nn.layernorm_fwd

    def spy(*a, **kw):
        calls.append(kw)
        return real(*a, **kw)

    monkeypatch.setattr(rules_nn, "layernorm_fwd", spy)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.LayerNorm(12), nn.Tanh(), nn.Linear(12, 3))
    model = model.to(dtype)
    x = torch.randn(4, 5, 6, dtype=dtype, requires_grad=True)
    _matches_eager(model, x, 1e-11 if dtype == torch.float64 else 2e-5)
    assert len(calls) == 1 and calls[0]["eps"] == 1e-5


def reference_bwd(dy, x, w, kind, eps):
    """dx of layernorm / rmsnorm in float64, and the statistics it reads."""
    X, DY = (np.asarray(a).astype(np.float64) for a in (x, dy))
    mu = X.mean(-1, keepdims=True) if kind == "ln" else np.zeros_like(X[..., :1])
    rstd = 1 / np.sqrt(((X - mu) ** 2).mean(-1, keepdims=True) + eps)
    xhat = (X - mu) * rstd
    gy = DY * np.asarray(w).astype(np.float64) if w is not None else DY
    inner = gy - xhat * (gy * xhat).mean(-1, keepdims=True)
    if kind == "ln":
        inner = inner - gy.mean(-1, keepdims=True)
    return rstd * inner, mu, rstd


@pytest.mark.parametrize(
    "shape,elem,vector",
    [((5, 768), "bf16", True), ((3, 1001), "bf16", True), ((2, 3, 4099), "f16", True),
     ((3, 40000), "f32", False), ((4, 6), "f64", False), ((7,), "bf16", True),
     ((2, 3), "f32", True), ((1, 5), "f16", True)],
)
@pytest.mark.parametrize("kind", ["ln", "rms"])
@pytest.mark.parametrize("affine", [True, False])
def test_bwd_kernels_match_float64(shape, elem, vector, kind, affine):
    """One kernel reads dy and x once each (16-byte vectors on register rows) and writes
    dx; rows past the registers take the strided kernel."""
    n = shape[-1]
    t, tw = ty(shape, elem), ty((n,), elem)
    st = ty((*shape[:-1], 1), "f64" if elem == "f64" else "f32")
    w_arg, w_use = (f", %w: {tw}", f" weight %w : {tw}") if affine else ("", "")
    if kind == "ln":
        body = f"tgraph.layernorm_bwd %dy, %x, %m, %r{w_use} : ({t}, {t}, {st}, {st}) -> {t}"
    else:
        body = f"tgraph.rmsnorm_bwd %dy, %x, %r{w_use} : ({t}, {t}, {st}) -> {t}"
    ctx = default_context()
    m = Parser(ctx, f"""func.func @f(%dy: {t}, %x: {t}, %m: {st}, %r: {st}{w_arg}) -> {t} {{
      %0 = {body}
      func.return %0 : {t} }}""").parse_module()
    LowerGraphToTile().apply(ctx, m)
    m.verify()
    (k,) = [o for o in m.body.block.ops if isinstance(o, tile_ir.KernelOp)]
    assert any(isinstance(o, tile_ir.LoadVectorOp) for o in k.walk()) == vector
    x = (RNG.normal(0.5, 2.0, size=shape) + 1.0).astype(NP[elem])
    dy = RNG.normal(size=shape).astype(NP[elem])
    w = RNG.normal(1.0, 0.5, size=(n,)).astype(NP[elem]) if affine else None
    eps = 1e-5
    want, mu, rstd = reference_bwd(dy, x, w, kind, eps)
    stats_t = np.float64 if elem == "f64" else np.float32
    (got,) = run_host(m, "f", [dy, x, mu.astype(stats_t), rstd.astype(stats_t),
                               *((w,) if affine else ())])
    assert got.dtype == NP[elem]
    err = np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want))
    assert err <= TOL[elem], err


def test_bwd_graph_interpreter_matches_float64():
    @ts.jit
    def f(dy, x, w):
        _, mean, rstd = layernorm_fwd(x, w, eps=1e-5)
        rms = 1 / ts.sqrt(ts.mean(x * x, -1, keepdims=True) + 1e-5)
        return layernorm_bwd(dy, x, mean, rstd, w), rmsnorm_bwd(dy, x, rms, w)

    x = RNG.normal(size=(3, 4, 10)).astype(np.float32)
    dy = RNG.normal(size=(3, 4, 10)).astype(np.float32)
    w = RNG.normal(size=(10,)).astype(np.float32)
    ln, rms = (np.asarray(r) for r in f(dy, x, w))
    np.testing.assert_allclose(ln, reference_bwd(dy, x, w, "ln", 1e-5)[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rms, reference_bwd(dy, x, w, "rms", 1e-5)[0], rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_grad_of_a_norm_is_one_row_kernel_for_the_input(norm):
    """``ts.grad``: the input gradient of a layer/RMS norm is one ``*_bwd`` kernel, and
    every gradient matches float64 (second derivatives go through its expansion: the
    autodiff tests' JVP cases)."""
    op = getattr(ts, norm)
    g_ = ts.grad(lambda x, w: ts.sum(op(x, w) * ts.sin(x)), argnums=(0, 1))
    x = RNG.normal(size=(6, 33)).astype(np.float32)
    w = RNG.normal(1.0, 0.3, size=(33,)).astype(np.float32)
    gx, gw = (np.asarray(r) for r in g_(x, w))
    X, W = x.astype(np.float64), w.astype(np.float64)
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (X, W))
    if norm == "layernorm":
        y = torch.nn.functional.layer_norm(tx, (33,), tw, eps=1e-5)
    else:
        y = tx / torch.sqrt((tx * tx).mean(-1, keepdim=True) + 1e-6) * tw
    (y * torch.sin(tx)).sum().backward()
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=2e-4, atol=2e-5)
    assert str(g_.inspect_ir("graph")).count(f"tgraph.{norm}_bwd") == 1


@pytest.mark.parametrize("shape,normalized,affine", [
    ((4, 5, 12), (12,), True), ((3, 4, 6), (4, 6), True), ((5, 9), (9,), False)])
def test_native_layer_norm_backward(_fresh_dynamo, monkeypatch, shape, normalized, affine):
    """``native_layer_norm_backward`` (kept whole): the input gradient is one
    ``layernorm_bwd`` (rows of the normalized dims), the weight and bias gradients are
    column sums; every gradient matches eager in float64."""
    from tessera.torch import rules_nn

    calls = []
    real = rules_nn.layernorm_bwd

    def spy(*a, **kw):
        calls.append(a[1].shape)
        return real(*a, **kw)

    monkeypatch.setattr(rules_nn, "layernorm_bwd", spy)
    torch.manual_seed(1)
    model = nn.LayerNorm(normalized, elementwise_affine=affine).double()
    if affine:
        with torch.no_grad():
            model.weight.normal_(1.0, 0.5)
            model.bias.normal_()
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    _matches_eager(model, x, 1e-10, loss=lambda o: (o * torch.cos(o)).sum())
    n = int(np.prod(normalized))
    assert calls == [(*shape[: len(shape) - len(normalized)], n)]


@pytest.mark.parametrize("shape,elem", [((5, 768), "bf16"), ((3, 40000), "f32"),
                                        ((4, 1001), "f16")])
@pytest.mark.parametrize("kind", ["ln", "rms"])
def test_residual_fold_is_bitwise_the_add(shape, elem, kind):
    """``fuse-elementwise`` folds ``add(*norm_bwd, r)`` into the gradient's kernel; the
    result is bitwise the one of the separate add (the gradient rounded first)."""
    from tessera.passes.fuse_elementwise import FuseElementwisePass

    n = shape[-1]
    t, tw = ty(shape, elem), ty((n,), elem)
    st = ty((*shape[:-1], 1), "f32")
    if kind == "ln":
        bwd = f"tgraph.layernorm_bwd %dy, %x, %m, %r weight %w : {tw} : ({t}, {t}, {st}, {st}) -> {t}"
    else:
        bwd = f"tgraph.rmsnorm_bwd %dy, %x, %r weight %w : {tw} : ({t}, {t}, {st}) -> {t}"
    text = f"""func.func @f(%dy: {t}, %x: {t}, %m: {st}, %r: {st}, %w: {tw}, %res: {t}) -> {t} {{
      %0 = {bwd}
      %1 = tgraph.add %0, %res : ({t}, {t}) -> {t}
      func.return %1 : {t} }}"""
    outs = []
    for fold in (True, False):
        ctx = default_context()
        m = Parser(ctx, text).parse_module()
        FuseElementwisePass(fold_norm_add=fold).apply(ctx, m)
        assert ("residual" in str(m)) == fold
        LowerGraphToTile().apply(ctx, m)
        m.verify()
        rng = np.random.default_rng(5)
        x = (rng.normal(0.5, 2.0, size=shape)).astype(NP[elem])
        dy, res = (rng.normal(size=shape).astype(NP[elem]) for _ in range(2))
        w = rng.normal(1.0, 0.5, size=(n,)).astype(NP[elem])
        _, mu, rstd = reference_bwd(dy, x, w, kind, 1e-5)
        (got,) = run_host(m, "f", [dy, x, mu.astype(np.float32), rstd.astype(np.float32),
                                   w, res])
        outs.append(got)
    assert np.array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8))


class _PreNormBlock(nn.Module):
    """``x + mlp(ln(x))`` twice: each norm's input gradient joins a residual stream."""

    def __init__(self, d: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.f1, self.f2 = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        x = x + self.f1(self.ln1(x))
        return x + self.f2(torch.tanh(self.ln2(x)))


def test_residual_stream_training_step(_fresh_dynamo, monkeypatch):
    """A pre-norm residual block through ``torch.compile``: the norms' input gradients are
    added to the stream's by their own kernels (``fold-norm-add``); every gradient matches
    eager in float64."""
    from tessera.passes import fuse_elementwise as fe

    folded = []
    real = fe.FoldAddIntoNormBwd.match_and_rewrite

    def spy(self, op, rewriter):
        real(self, op, rewriter)
        if op.parent is None:  # replaced by the gradient op with a residual
            folded.append(op)

    monkeypatch.setattr(fe.FoldAddIntoNormBwd, "match_and_rewrite", spy)
    torch.manual_seed(2)
    model = _PreNormBlock(16).double()
    x = torch.randn(3, 7, 16, dtype=torch.float64, requires_grad=True)
    _matches_eager(model, x, 1e-10)
    assert len(folded) == 2


def test_dynamic_lengths_training_step(_fresh_dynamo):
    """Symbolic sequence lengths: the norms' forward and backward rules take the traced
    shapes (one graph for every length), every gradient matches eager."""
    torch.manual_seed(4)
    model = _PreNormBlock(8).double()
    compiled = tt.compile(model, dynamic=True)
    for s in (5, 9, 12):
        x = torch.randn(2, s, 8, dtype=torch.float64, requires_grad=True)
        _matches_eager(model, x, 1e-10, compiled=compiled)
    rep = tt.last_report()
    assert len([g_ for g_ in rep.graphs if g_.kind == "forward"]) == 1, str(rep)


@pytest.mark.parametrize("case", ["no_input_grad", "no_bias"])
def test_native_layer_norm_backward_output_masks(_fresh_dynamo, case):
    """The backward's output mask: a norm of data that needs no gradient (no input
    gradient), a norm without a bias (no bias gradient)."""
    torch.manual_seed(5)
    if case == "no_input_grad":
        model = nn.Sequential(nn.LayerNorm(12), nn.Linear(12, 4)).double()
        x = torch.randn(3, 5, 12, dtype=torch.float64)
    else:
        model = nn.Sequential(nn.Linear(6, 12), nn.LayerNorm(12, bias=False), nn.Tanh()).double()
        x = torch.randn(3, 5, 6, dtype=torch.float64, requires_grad=True)
    _matches_eager(model, x, 1e-10)
