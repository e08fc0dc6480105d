"""The sm90 (TMA + wgmma) matmul on a Hopper GPU against torch.matmul in float64.

Outputs are poisoned with NaN first, so unwritten elements fail. Shapes include
sizes that are not multiples of the tile (ragged M, N and K), a single tile, and
one K block. Skipped without a compute capability 9.0 device.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs a compute capability 9.0 (Hopper) GPU",
    ),
]

import tessera as ts  # noqa: E402
from tessera.passes import matmul_config as mc  # noqa: E402
from tessera.passes.sm90.lower_matmul_sm90 import Sm90Gemm  # noqa: E402
from tessera.tuning import sm90  # noqa: E402

SHAPES = [
    (128, 128, 64),
    (256, 512, 128),
    (1000, 136, 72),
    (200, 264, 1000),
    (40, 64, 16),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
]

TYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def _check(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, tol: float = 1e-2) -> None:
    ref = a.double() @ b.double()
    assert torch.isfinite(c).all(), "unwritten (NaN) elements in the result"
    err = float((c.double() - ref).norm() / ref.norm())
    assert err < tol, err


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_kernel_heuristic_config(m: int, n: int, k: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    sm90.gemm_runner(Sm90Gemm(m, n, k, "bf16", "bf16", mc.heuristic(m, n, k)))(c, a, b)
    torch.cuda.synchronize()
    _check(c, a, b)


@pytest.mark.parametrize("cfg", mc.search_space(520, 392, 328))
def test_every_tuning_config(cfg: mc.Sm90Config) -> None:
    m, n, k = 520, 392, 328
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    sm90.gemm_runner(Sm90Gemm(m, n, k, "bf16", "bf16", cfg))(c, a, b)
    torch.cuda.synchronize()
    _check(c, a, b)


@pytest.mark.parametrize(("in_t", "out_t"), [("f16", "f16"), ("bf16", "f32"), ("f16", "f32")])
def test_types(in_t: str, out_t: str) -> None:
    m, n, k = 192, 200, 136
    a = torch.randn(m, k, device="cuda", dtype=TYPES[in_t])
    b = torch.randn(k, n, device="cuda", dtype=TYPES[in_t])
    c = torch.full((m, n), float("nan"), device="cuda", dtype=TYPES[out_t])
    sm90.gemm_runner(Sm90Gemm(m, n, k, in_t, out_t, mc.heuristic(m, n, k)))(c, a, b)
    torch.cuda.synchronize()
    _check(c, a, b)


@pytest.mark.parametrize(("m", "n", "k"), [(1000, 136, 72), (512, 512, 512)])
def test_jit_dispatches_to_wgmma(m: int, n: int, k: int) -> None:
    @ts.jit
    def mm(x, y):
        return ts.matmul(x, y)

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = mm(a, b)
    torch.cuda.synchronize()
    assert "wgmma.mma_async" in mm.inspect_ir("ptx")
    _check(c, a, b)


def test_autotune_records_a_winner(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    cfg = sm90.autotune(512, 512, 512, reps=3)
    assert cfg.valid()
    key = sm90.cache_key(torch.cuda.get_device_name(), 512, 512, 512, "bf16", "bf16")
    assert sm90.cached(key) == cfg


@pytest.mark.parametrize(("m", "n", "k", "sms"), [(1000, 520, 392, 3), (2048, 2048, 2048, 7)])
def test_persistent_grid_smaller_than_tiles(m: int, n: int, k: int, sms: int) -> None:
    """Each CTA loops over many tiles (the stage ring and barrier phases run on across
    tiles); any grid size gives the same result."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemm = Sm90Gemm(m, n, k, "bf16", "bf16", mc.heuristic(m, n, k), sms)
    assert gemm.tiles > 2 * sms
    sm90.gemm_runner(gemm)(c, a, b)
    torch.cuda.synchronize()
    _check(c, a, b)
    full = torch.full_like(c, float("nan"))
    sm90.gemm_runner(Sm90Gemm(m, n, k, "bf16", "bf16", mc.heuristic(m, n, k)))(full, a, b)
    torch.cuda.synchronize()
    assert torch.equal(c, full)


CLUSTERED = [
    mc.Sm90Config(bn=256, stages=3, cluster=2),
    mc.Sm90Config(bn=128, stages=5, cluster=2),
]


@pytest.mark.parametrize("cfg", CLUSTERED, ids=["128x256c2", "128x128c2"])
@pytest.mark.parametrize(
    ("m", "n", "k", "sms"),
    [(1000, 520, 392, 132), (2048, 2048, 2048, 7), (256, 136, 40, 132), (4096, 1024, 512, 132)],
)
def test_cluster_multicast(cfg: mc.Sm90Config, m: int, n: int, k: int, sms: int) -> None:
    """CTA pairs that share B through TMA multicast give the result of the unclustered
    kernel bit for bit (same accumulation order), on ragged shapes and small grids."""
    gen = torch.Generator(device="cuda").manual_seed(m + 3 * n + 5 * k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    gemm = Sm90Gemm(m, n, k, "bf16", "bf16", cfg, sms)
    assert gemm.cluster == 2 and gemm.grid()[0] % 2 == 0
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    sm90.gemm_runner(gemm)(c, a, b)
    torch.cuda.synchronize()
    _check(c, a, b)
    single = torch.full_like(c, float("nan"))
    plain = mc.Sm90Config(bn=cfg.bn, stages=cfg.stages, consumers=cfg.consumers)
    sm90.gemm_runner(Sm90Gemm(m, n, k, "bf16", "bf16", plain, sms))(single, a, b)
    torch.cuda.synchronize()
    assert torch.equal(c, single)


def test_cluster_grid_is_resident() -> None:
    """The persistent clustered grid fits on the device at once (no cluster waits for
    another to finish)."""
    gemm = Sm90Gemm(4096, 4096, 4096, "bf16", "bf16", CLUSTERED[0])
    plan = sm90.gemm_runner(gemm).plan  # type: ignore[attr-defined]
    assert plan.cluster == 2
    assert gemm.grid()[0] <= plan.resident_ctas()


LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]


@pytest.mark.parametrize(("a_t", "b_t"), LAYOUTS)
@pytest.mark.parametrize(("m", "n", "k"), [(1000, 136, 72), (200, 264, 1000), (40, 64, 16),
                                           (1024, 1024, 1024)])
@pytest.mark.parametrize("out_t", ["bf16", "f32"])
def test_layouts(a_t: bool, b_t: bool, m: int, n: int, k: int, out_t: str) -> None:
    """A stored K x M / B stored N x K, read through TMA in that layout (no copy)."""
    gen = torch.Generator(device="cuda").manual_seed(m + 3 * n + 7 * k + 11 * a_t + 13 * b_t)
    a = torch.randn(*((k, m) if a_t else (m, k)), device="cuda", dtype=torch.bfloat16,
                    generator=gen)
    b = torch.randn(*((n, k) if b_t else (k, n)), device="cuda", dtype=torch.bfloat16,
                    generator=gen)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=TYPES[out_t])
    gemm = Sm90Gemm(m, n, k, "bf16", out_t, mc.heuristic(m, n, k), a_t=a_t, b_t=b_t)
    sm90.gemm_runner(gemm)(c, a, b)
    torch.cuda.synchronize()
    _check(c, a.T if a_t else a, b.T if b_t else b)


@pytest.mark.parametrize("cfg", [c for c in mc.search_space(520, 392, 328) if c.cluster == 2][:2])
@pytest.mark.parametrize(("a_t", "b_t"), LAYOUTS[1:])
def test_layouts_with_cluster_multicast(cfg: mc.Sm90Config, a_t: bool, b_t: bool) -> None:
    m, n, k = 520, 392, 328
    a = torch.randn(*((k, m) if a_t else (m, k)), device="cuda", dtype=torch.bfloat16)
    b = torch.randn(*((n, k) if b_t else (k, n)), device="cuda", dtype=torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    sm90.gemm_runner(Sm90Gemm(m, n, k, "bf16", "bf16", cfg, a_t=a_t, b_t=b_t))(c, a, b)
    torch.cuda.synchronize()
    _check(c, a.T if a_t else a, b.T if b_t else b)


@pytest.mark.parametrize(
    ("expr", "ash", "bsh"),
    [
        ("a @ b.T", (1000, 264), (136, 264)),
        ("ts.matmul(a, b, transpose_b=True)", (256, 512), (384, 512)),
        ("ts.transpose(a) @ b", (264, 200), (264, 136)),
        ("a.T @ b.T", (264, 200), (136, 264)),
        ("a @ b.T", (3, 100, 264), (136, 264)),
        ("a @ b", (2, 7, 96), (96, 64)),
    ],
)
def test_jit_layouts_on_wgmma(expr: str, ash, bsh) -> None:
    fn = ts.jit(eval(f"lambda a, b: {expr}", {"ts": ts}))
    a = torch.randn(ash, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(bsh, device="cuda", dtype=torch.bfloat16)
    c = fn(a, b)
    torch.cuda.synchronize()
    assert "wgmma.mma_async" in fn.inspect_ir("ptx")
    torch_expr = expr.replace("ts.matmul(a, b, transpose_b=True)", "a @ b.T").replace(
        "ts.transpose(a)", "a.T")
    ref = eval(f"lambda a, b: {torch_expr}")(a.double(), b.double())
    assert c.shape == ref.shape
    assert torch.isfinite(c).all()
    assert float((c.double() - ref).norm() / ref.norm()) < 1e-2


@pytest.mark.parametrize("act", ["relu", "gelu", "silu", None])
@pytest.mark.parametrize("bias_shape", [(136,), (1000, 136), (1000, 1)])
def test_jit_linear_epilogue_on_wgmma(act, bias_shape) -> None:
    """nn.Linear's form with a bias (row vector or a full residual) and an activation."""
    x = torch.randn(1000, 264, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(136, 264, device="cuda", dtype=torch.bfloat16) / 16
    bias = torch.randn(bias_shape, device="cuda", dtype=torch.bfloat16)

    def linear(x, w, bias):
        y = x @ w.T + bias
        return getattr(ts, act)(y) if act else y

    fn = ts.jit(linear)
    out = fn(x, w, bias)
    torch.cuda.synchronize()
    assert "wgmma.mma_async" in fn.inspect_ir("ptx")
    y = x.double() @ w.double().T + bias.double()
    ref = {"relu": torch.relu, "silu": torch.nn.functional.silu,
           "gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
           None: lambda t: t}[act](y)
    assert torch.isfinite(out).all()
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-2


@pytest.mark.parametrize("act", ["gelu", None])
def test_jit_f32_product_epilogue_cast_to_bf16(act) -> None:
    """An f32 product, f32 bias and activation, then a cast to bf16 (mixed precision's
    usual form), ragged in M and N."""
    x = torch.randn(1000, 264, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(136, 264, device="cuda", dtype=torch.bfloat16) / 16
    bias = torch.randn(136, device="cuda", dtype=torch.float32)

    def linear(x, w, bias):
        y = ts.matmul(x, w, transpose_b=True, out_dtype=ts.f32) + bias
        return ts.cast(ts.gelu(y) if act else y, ts.bf16)

    fn = ts.jit(linear)
    out = fn(x, w, bias)
    torch.cuda.synchronize()
    assert out.dtype == torch.bfloat16
    y = x.double() @ w.double().T + bias.double()
    ref = torch.nn.functional.gelu(y, approximate="tanh") if act else y
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-2


@pytest.mark.parametrize(
    ("expr", "ash", "bsh"),
    [
        ("a @ b", (4, 128, 64), (4, 64, 72)),
        ("a @ b", (32, 512, 128), (32, 128, 512)),
        ("a @ b.T", (2, 3, 192, 64), (2, 3, 200, 64)),
        ("a.T @ b", (5, 128, 64), (5, 128, 136)),
        ("a.T @ b.T", (3, 64, 192), (3, 136, 64)),
        ("a @ b", (128, 64), (5, 64, 72)),
        ("a.T @ b", (3, 64, 128), (64, 72)),
        ("a @ b", (3, 100, 64), (3, 64, 72)),
    ],
)
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_jit_batched(expr: str, ash, bsh, dtype: str) -> None:
    """Batched products (equal batch dims, or one operand broadcast) on the wgmma kernel,
    each batch checked; the last shape (M = 100) takes the generic kernel."""
    fn = ts.jit(eval(f"lambda a, b: {expr}", {"ts": ts}))
    a = torch.randn(ash, device="cuda", dtype=TYPES[dtype])
    b = torch.randn(bsh, device="cuda", dtype=TYPES[dtype])
    c = fn(a, b)
    torch.cuda.synchronize()
    ref = eval(f"lambda a, b: {expr}".replace(".T", ".mT"))(a.double(), b.double())
    assert c.shape == ref.shape
    assert torch.isfinite(c).all()
    for i in range(ref.shape[0]):
        assert float((c[i].double() - ref[i]).norm() / ref[i].norm()) < 1e-2
    if ash[-2] % 64 == 0:
        assert "wgmma.mma_async" in fn.inspect_ir("ptx")


def test_jit_batched_epilogue() -> None:
    """A batched product with a row bias and gelu in the fused epilogue."""
    fn = ts.jit(lambda a, b, bias: ts.gelu(a @ b + bias))
    a = torch.randn(4, 128, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4, 64, 136, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(136, device="cuda", dtype=torch.bfloat16)
    out = fn(a, b, bias)
    torch.cuda.synchronize()
    ref = torch.nn.functional.gelu(a.double() @ b.double() + bias.double(), approximate="tanh")
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-2


@pytest.mark.parametrize(("fmt", "out"), [("e4m3", "f32"), ("e5m2", "f32"), ("e4m3", "bf16")])
@pytest.mark.parametrize(("m", "n", "k"), [(1000, 136, 272), (256, 512, 1024), (40, 64, 16)])
@pytest.mark.parametrize("expr", ["a @ b.T", "a @ b", "a.T @ b"])
def test_jit_fp8(fmt: str, out: str, m: int, n: int, k: int, expr: str) -> None:
    """fp8 products on k32 wgmmas, against float64 of the same fp8 inputs. The tensor cores
    align each MMA's fp8 products to about 13 bits before adding them (relative error
    ~1.2e-4, the same as ``torch._scaled_mm``'s); each 128-element K stage is then added
    into f32 totals, so the error does not grow with K. B row-major (``a @ b``) or A
    stored transposed are copied K-major first."""
    tdt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt]
    odt = {"f32": ts.f32, "bf16": ts.bf16}[out]
    a = torch.randn(*((k, m) if expr.startswith("a.T") else (m, k)), device="cuda").to(tdt)
    b = torch.randn(*((n, k) if expr.endswith("b.T") else (k, n)), device="cuda").to(tdt)
    ta, tb = expr.startswith("a.T"), expr.endswith("b.T")
    fn = ts.jit(lambda a, b: ts.matmul(a, b, transpose_a=ta, transpose_b=tb, out_dtype=odt))
    c = fn(a, b)
    torch.cuda.synchronize()
    assert f"k32.f32.{fmt}.{fmt}" in fn.inspect_ir("ptx")
    ref = eval(f"lambda a, b: {expr}")(a.double(), b.double())
    assert torch.isfinite(c).all()
    err = float((c.double() - ref).norm() / ref.norm())
    assert err < (3e-4 if out == "f32" else 1e-2), err


# --------------------------------------------------------------------------- split-K


def _split_jit(fn, split_k: str):
    from tessera.options import CompileOptions

    return ts.jit(fn, options=CompileOptions.from_env(split_k=split_k))


def _poisoned(fn, *args: torch.Tensor) -> torch.Tensor:
    """One call with every buffer (result, split-K workspace) NaN-filled first."""
    from tessera.runtime import cuda

    spec = fn.specialize(*args)
    return cuda.run_host(spec.ir("target"), spec.name, list(args), poison=True,
                         ptx=spec.ir("ptx"))[0]


SPLIT_CASES = [
    # (expr, A shape, B shape, split_k): auto picks 8, 2, 3 and 3 ranges on the first four
    ("a @ b", (512, 8192), (8192, 512), "auto"),
    ("a @ b.T", (1024, 8192), (1024, 8192), "auto"),
    ("a.T @ b", (16384, 768), (16384, 768), "auto"),
    ("a @ b.T", (16, 4096), (4096, 4096), "auto"),
    ("a.T @ b.T", (4096, 520), (392, 4096), "3"),
    ("a @ b", (40, 1000), (1000, 72), "5"),
    ("a @ b", (2, 96, 4096), (4096, 264), "4"),
]


@pytest.mark.parametrize(("expr", "ash", "bsh", "split_k"), SPLIT_CASES)
def test_split_k(expr: str, ash, bsh, split_k: str) -> None:
    """Split-K against float64 on fresh inputs, with the result and the partial workspace
    NaN-filled first; two calls give the same bits (partials added in a fixed order)."""
    fn = _split_jit(eval(f"lambda a, b: {expr}"), split_k)
    gen = torch.Generator(device="cuda").manual_seed(sum(ash) + 3 * sum(bsh))
    a = torch.randn(ash, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(bsh, device="cuda", dtype=torch.bfloat16, generator=gen)
    c = _poisoned(fn, a, b)
    torch.cuda.synchronize()
    assert "split_k_reduce" in fn.inspect_ir("ptx")
    ref = eval(f"lambda a, b: {expr}".replace(".T", ".mT"))(a.double(), b.double())
    assert c.shape == ref.shape
    assert torch.isfinite(c).all(), "unwritten (NaN) elements in the result"
    err = float((c.double() - ref).norm() / ref.norm())
    assert err < 1e-2, err
    again = fn(a, b)
    torch.cuda.synchronize()
    assert torch.equal(c, again)


ACTS = {
    "relu": (ts.relu, torch.relu),
    "gelu": (ts.gelu, lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
    "none": (lambda t: t, lambda t: t),
}


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("bias_shape", [(512,), (512, 512), (512, 1)])
def test_split_k_epilogue(act: str, bias_shape) -> None:
    """nn.Linear's form with split-K: the reduction applies the bias (any broadcast) and
    the activation."""
    ts_act, torch_act = ACTS[act]
    fn = _split_jit(lambda x, w, bias: ts_act(x @ w.T + bias), "auto")
    x = torch.randn(512, 8192, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, 8192, device="cuda", dtype=torch.bfloat16) / 64
    bias = torch.randn(bias_shape, device="cuda", dtype=torch.bfloat16)
    out = _poisoned(fn, x, w, bias)
    torch.cuda.synchronize()
    assert "split_k_reduce" in fn.inspect_ir("ptx")
    ref = torch_act(x.double() @ w.double().T + bias.double())
    assert torch.isfinite(out).all()
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-2


@pytest.mark.parametrize("out", ["f32", "bf16"])
def test_split_k_fp8(out: str) -> None:
    odt = {"f32": ts.f32, "bf16": ts.bf16}[out]
    fn = _split_jit(lambda a, b: ts.matmul(a, b, transpose_b=True, out_dtype=odt), "auto")
    a = torch.randn(512, 8192, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(512, 8192, device="cuda").to(torch.float8_e4m3fn)
    c = _poisoned(fn, a, b)
    torch.cuda.synchronize()
    ptx = fn.inspect_ir("ptx")
    assert "split_k_reduce" in ptx and "k32.f32.e4m3.e4m3" in ptx
    assert c.dtype == {"f32": torch.float32, "bf16": torch.bfloat16}[out]
    ref = a.double() @ b.double().T
    assert torch.isfinite(c).all()
    err = float((c.double() - ref).norm() / ref.norm())
    assert err < (3e-4 if out == "f32" else 1e-2), err


@pytest.mark.parametrize(("in_t", "out_t"), [("e4m3", "bf16"), ("e4m3", "f32"), ("e5m2", "f32"),
                                             ("3xtf32", "f32")])
@pytest.mark.parametrize(("m", "n", "k", "splits"), [(1000, 520, 1008, 1), (256, 136, 48, 1),
                                                     (512, 384, 4096, 3)])
def test_overlapped_promotion(in_t: str, out_t: str, m: int, n: int, k: int, splits: int) -> None:
    """Two accumulator sets by turns (a stage's wgmmas run while the previous stage is added
    into the f32 totals) give the bits of the kernel that waits for each stage."""
    tdt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "3xtf32": None}[in_t]
    gen = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", generator=gen)
    b = torch.randn(n, k, device="cuda", generator=gen)
    if tdt is not None:
        a, b = a.to(tdt), b.to(tdt)
        args = (a, b)
    else:  # the [2, rows, K] hi/lo copies the kernel reads
        def split(x: torch.Tensor) -> torch.Tensor:
            hi = (x.view(torch.int32) + 0x1000 & -0x2000).view(torch.float32)
            lo = ((x - hi).view(torch.int32) + 0x1000 & -0x2000).view(torch.float32)
            return torch.stack([hi, lo]).contiguous()
        args = (split(a), split(b))
    cfg = mc.Sm90Config(bn=128, stages=4 if in_t != "3xtf32" else 2)
    if splits > 1:
        out_t = "f32"
    rows = splits * m
    outs = []
    for overlap in (False, True):
        c = torch.full((rows, n), float("nan"), device="cuda", dtype=TYPES[out_t])
        gemm = Sm90Gemm(m, n, k, in_t, out_t, cfg, b_t=True, overlap=overlap, splits=splits)
        sm90.gemm_runner(gemm)(c, *args)
        torch.cuda.synchronize()
        outs.append(c)
    total = outs[1].view(splits, m, n).double().sum(0)
    ref = a.double() @ b.double().T
    assert torch.isfinite(outs[1]).all()
    err = float((total - ref).norm() / ref.norm())
    assert err < (1e-2 if out_t == "bf16" else 3e-4 if in_t != "3xtf32" else 2e-6), err
    assert torch.equal(outs[0], outs[1])
