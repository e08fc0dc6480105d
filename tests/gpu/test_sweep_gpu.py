"""Randomized shapes, layouts and dtypes through the public API on the GPU, each against
float64: the cases a user sends rather than the ones a benchmark names. The case list is
drawn once from a fixed seed (so a failure names a reproducible case), over odd and
aligned sizes, every matmul layout, batch dims with broadcasting, decode-sized M,
attention head sizes and causal masks of unequal lengths, row kernels of odd widths,
convolutions of random stride/padding/dilation/groups with their gradients, and
reductions over every axis. Skipped without a GPU."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

import tessera as ts  # noqa: E402
import tessera.torch  # noqa: E402,F401  (registers the "tessera" torch.compile backend)

TYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
TOL = {"bf16": 2e-2, "f16": 5e-3, "f32": 1e-4}


def _rand(shape, dtype, gen):
    return torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen).to(dtype)


def _check(out, ref, tol: float, what: str, floor: float = 1e-30) -> None:
    """Relative Frobenius error below ``tol``; ``floor`` bounds the reference norm from
    below for values that are zero in exact arithmetic (a bias before a batch norm)."""
    assert tuple(out.shape) == tuple(ref.shape), f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(out).all(), f"{what}: non-finite elements"
    err = float((out.double() - ref).norm() / max(float(ref.norm()), floor))
    assert err < tol, f"{what}: relative error {err:.3e} >= {tol}"


def _matmul_cases(n: int) -> list[tuple]:
    rng = random.Random(1234)
    sizes = [1, 3, 16, 17, 64, 100, 127, 128, 255, 320, 513, 1000, 1024, 2048]
    cases = []
    for _ in range(n):
        dt = rng.choice(["bf16", "bf16", "f16", "f32"])
        layout = rng.choice(["nn", "nt", "tn", "tt"])
        batch = rng.choice([(), (), (3,), (2, 3), "bcast"])
        m, k, nn = (rng.choice(sizes) for _ in range(3))
        cases.append((dt, layout, batch, m, k, nn))
    return cases


@pytest.mark.parametrize(("dt", "layout", "batch", "m", "k", "n"), _matmul_cases(40))
def test_matmul(dt, layout, batch, m, k, n) -> None:
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + k * 13 + n)
    ab = (2, 3) if batch == "bcast" else batch
    bb = (3,) if batch == "bcast" else batch  # b broadcast over a's leading dim
    ash = (*ab, k, m) if layout[0] == "t" else (*ab, m, k)
    bsh = (*bb, n, k) if layout[1] == "t" else (*bb, k, n)
    a, b = _rand(ash, TYPES[dt], gen), _rand(bsh, TYPES[dt], gen)
    src = "lambda a, b: " + ("a.mT" if layout[0] == "t" else "a") + " @ " + (
        "b.mT" if layout[1] == "t" else "b")
    fn = eval(src.replace(".mT", ".transpose(-1, -2)") if batch else src.replace(".mT", ".T"))
    ref = fn(a.double(), b.double())
    out = ts.jit(fn)(a, b)
    _check(out, ref, TOL[dt] if dt != "bf16" else 1e-2, f"{src} {dt} a{ash} b{bsh}")


def _attention_cases(n: int) -> list[tuple]:
    rng = random.Random(99)
    cases = []
    for _ in range(n):
        d = rng.choice([32, 64, 64, 80, 96, 128, 128, 256])
        sq = rng.choice([1, 7, 64, 100, 128, 257, 1000])
        sk = rng.choice([sq, sq, 1, 33, 128, 513])
        causal = rng.choice([False, True])
        h, hkv = rng.choice([(4, 4), (4, 4), (8, 2), (4, 1)])
        cases.append((rng.choice(["bf16", "f16"]), rng.choice([1, 2]), h, hkv, sq, sk, d, causal))
    return cases


def _sdpa64(q, k, v, causal: bool):
    rep = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(rep, 1), v.double().repeat_interleave(rep, 1)
    s = q.double() @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ v


@pytest.mark.parametrize(("dt", "b", "h", "hkv", "sq", "sk", "d", "causal"),
                         _attention_cases(24))
def test_attention(dt, b, h, hkv, sq, sk, d, causal) -> None:
    """Forward and ``ts.grad`` against float64, with torch SDPA's top-left causal mask."""
    gen = torch.Generator(device="cuda").manual_seed(sq * 31 + sk + d)
    q = _rand((b, h, sq, d), TYPES[dt], gen)
    k = _rand((b, hkv, sk, d), TYPES[dt], gen)
    v = _rand((b, hkv, sk, d), TYPES[dt], gen)
    do = _rand((b, h, sq, d), TYPES[dt], gen)
    what = f"attention {dt} b{b} h{h}/{hkv} sq{sq} sk{sk} d{d} causal={causal}"
    out = ts.jit(lambda q, k, v: ts.flash_attention(q, k, v, causal=causal))(q, k, v)
    ref = _sdpa64(q, k, v, causal)
    _check(out, ref, 2e-2, what)
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    (_sdpa64(qd, kd, vd, causal) * do.double()).sum().backward()
    grads = ts.grad(lambda q, k, v, do: ts.sum(ts.flash_attention(q, k, v, causal=causal) * do),
                    argnums=(0, 1, 2))(q, k, v, do)
    for name, got, want in zip("qkv", grads, (qd.grad, kd.grad, vd.grad)):
        if name in "qk" and sk == 1:
            # one key: dq and dk are zero in exact arithmetic (P = 1, so dS = dP - D = 0);
            # ours are the rounding of dP - rowsum(dO o) in f32 with a 16-bit o: about
            # eps(dtype) per row of dS, summed over the rows dk gathers (the query rows of
            # its group), as dv sums dO over the same rows
            rms = float(got.double().square().mean().sqrt())
            bound = 4 * torch.finfo(TYPES[dt]).eps * max(1.0, float(vd.grad.square().mean().sqrt()))
            assert rms < bound, (f"{what} d{name}: rms {rms:.2e} where the exact value is 0 "
                                 f"(rounding bound {bound:.2e})")
            continue
        _check(got, want, 3e-2, f"{what} d{name}")


def _row_cases() -> list[tuple]:
    widths = [1, 3, 17, 64, 100, 255, 768, 1000, 4097, 50257, 151936]
    rng = random.Random(7)
    return [(rng.choice(["bf16", "f16", "f32"]), rng.choice([1, 3, 129]), w,
             rng.choice(["softmax", "layernorm", "rmsnorm", "logsumexp", "sum", "max", "mean"]))
            for w in widths for _ in range(2)]


@pytest.mark.parametrize(("dt", "rows", "width", "op"), _row_cases())
def test_rows(dt, rows, width, op) -> None:
    gen = torch.Generator(device="cuda").manual_seed(rows * 1000 + width)
    x = _rand((rows, width), TYPES[dt], gen) * 3
    w = _rand((width,), TYPES[dt], gen)
    bias = _rand((width,), TYPES[dt], gen)
    xd, wd, bd = x.double(), w.double(), bias.double()
    if op == "softmax":
        fn, ref = (lambda x, w, b: ts.softmax(x, -1)), torch.softmax(xd, -1)
    elif op == "layernorm":
        fn = lambda x, w, b: ts.layernorm(x, w, b, eps=1e-5)  # noqa: E731
        ref = torch.nn.functional.layer_norm(xd, (width,), wd, bd, 1e-5)
    elif op == "rmsnorm":
        fn = lambda x, w, b: ts.rmsnorm(x, w, eps=1e-6)  # noqa: E731
        ref = xd * torch.rsqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * wd
    elif op == "logsumexp":
        fn, ref = (lambda x, w, b: ts.logsumexp(x, -1)), torch.logsumexp(xd, -1)
    elif op == "sum":
        fn, ref = (lambda x, w, b: ts.sum(x, -1)), xd.sum(-1)
    elif op == "max":
        fn, ref = (lambda x, w, b: ts.max(x, -1)), xd.max(-1).values
    else:
        fn, ref = (lambda x, w, b: ts.mean(x, -1)), xd.mean(-1)
    out = ts.jit(fn)(x, w, bias)
    tol = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}[dt]
    if op == "layernorm" and width == 1:
        tol = 1.0  # a single element normalizes to its bias: compare absolutely below
        assert torch.allclose(out.double(), ref, atol=1e-2)
    if op == "sum" and dt != "f32":
        tol *= 2
    _check(out, ref, tol, f"{op} {dt} {rows}x{width}")


def _axis_cases() -> list[tuple]:
    rng = random.Random(11)
    shapes = [(5, 7, 9), (2, 64, 33), (128, 3, 1000), (4, 257, 2, 8)]
    out = []
    for shape in shapes:
        for axis in [*range(len(shape)), (0, len(shape) - 1)]:
            out.append((rng.choice(["bf16", "f32"]), shape, axis, rng.choice([True, False])))
    return out


@pytest.mark.parametrize(("dt", "shape", "axis", "keep"), _axis_cases())
def test_reduce_axes(dt, shape, axis, keep) -> None:
    gen = torch.Generator(device="cuda").manual_seed(len(shape) * 10 + hash(str(axis)) % 97)
    x = _rand(shape, TYPES[dt], gen)
    s = ts.jit(lambda x: ts.sum(x, axis, keepdims=keep))(x)
    m = ts.jit(lambda x: ts.max(x, axis, keepdims=keep))(x)
    ax = axis if isinstance(axis, tuple) else (axis,)
    _check(s, x.double().sum(ax, keepdim=keep), 1e-2 if dt == "bf16" else 1e-5,
           f"sum {dt} {shape} axis={axis}")
    want = x.double().amax(ax, keepdim=keep)
    _check(m, want, 1e-12, f"max {dt} {shape} axis={axis}")


def _conv_cases(n: int) -> list[tuple]:
    rng = random.Random(2024)
    cases = []
    for _ in range(n):
        groups = rng.choice([1, 1, 1, 2, "dw"])
        c = rng.choice([3, 8, 16, 24, 64]) if groups != 2 else rng.choice([8, 16, 64])
        o = c if groups == "dw" else rng.choice([8, 16, 32, 64]) if groups != 2 else 2 * rng.choice([4, 16])
        k = rng.choice([1, 3, 3, 5, 7])
        cases.append((rng.choice(["bf16", "f32"]), rng.choice([1, 2, 3]), c, o,
                      rng.choice([5, 13, 28, 31]), rng.choice([7, 14, 33]), k,
                      rng.choice([1, 2, 3]), rng.choice([0, 1, k // 2]),
                      rng.choice([1, 1, 2]), c if groups == "dw" else groups))
    return cases


@pytest.mark.parametrize(("dt", "n", "c", "o", "h", "w", "k", "stride", "pad", "dil", "groups"),
                         _conv_cases(24))
def test_conv2d_and_grads(dt, n, c, o, h, w, k, stride, pad, dil, groups) -> None:
    if (h + 2 * pad - dil * (k - 1) - 1) < 0 or (w + 2 * pad - dil * (k - 1) - 1) < 0:
        pytest.skip("kernel larger than the padded image")
    gen = torch.Generator(device="cuda").manual_seed(n * 100 + c + o + h + k)
    x = _rand((n, c, h, w), TYPES[dt], gen)
    wt = _rand((o, c // groups, k, k), TYPES[dt], gen) / k
    what = f"conv2d {dt} x{tuple(x.shape)} w{tuple(wt.shape)} s{stride} p{pad} d{dil} g{groups}"
    kw = dict(stride=stride, padding=pad, dilation=dil, groups=groups)
    out = ts.jit(lambda x, w: ts.conv2d(x, w, **kw))(x, wt)
    xd, wd = x.double().requires_grad_(), wt.double().requires_grad_()
    ref = torch.nn.functional.conv2d(xd, wd, **kw)
    tol = 2e-2 if dt == "bf16" else 1e-4
    _check(out, ref.detach(), tol, what)
    dy = _rand(tuple(ref.shape), TYPES[dt], gen)
    (ref * dy.double()).sum().backward()
    gx, gw = ts.grad(lambda x, w, dy: ts.sum(ts.conv2d(x, w, **kw) * dy), argnums=(0, 1))(x, wt, dy)
    _check(gx, xd.grad, tol, what + " dx")
    _check(gw, wd.grad, tol, what + " dw")


class _Block(torch.nn.Module):
    """A small network of the usual layers, at sizes no tile divides."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(5, 24, 3, stride=2, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(24)
        self.dw = torch.nn.Conv2d(24, 24, 5, padding=2, groups=24)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.norm = torch.nn.LayerNorm(24)
        self.fc1 = torch.nn.Linear(24, 100)
        self.fc2 = torch.nn.Linear(100, 7)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = y + torch.nn.functional.silu(self.dw(y))
        y = self.pool(y).flatten(1)
        return self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(y))))


@pytest.mark.parametrize("batch", [3, 17])
def test_torch_compile_block(batch) -> None:
    """A conv/bn/depthwise/pool/layernorm/MLP block through ``torch.compile`` (forward and
    every parameter's gradient) against float64 eager."""
    torch.manual_seed(batch)
    model = _Block().cuda()
    ref = _Block().cuda().double()
    ref.load_state_dict({k: v.double() if v.is_floating_point() else v
                         for k, v in model.state_dict().items()})
    x = torch.randn(batch, 5, 29, 31, device="cuda")
    out = torch.compile(model, backend="tessera")(x)
    want = ref(x.double())
    _check(out.detach(), want.detach(), 1e-4, "block forward")
    out.square().sum().backward()
    want.square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        _check(p.grad, q.grad, 1e-3, f"block grad {name}", floor=1e-3)
