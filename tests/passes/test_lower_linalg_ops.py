"""lower-graph-to-tile for tgraph.fft, tgraph.fft2d, tgraph.cholesky and tgraph.svd: the
lowered program, run by the Tile IR interpreter, equals the Graph IR interpreter and
numpy in float64 on random inputs (odd sizes, batches, lengths that are not powers of
two), and every generated kernel passes ptxas -arch=sm_90a."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import f32 as xf32
from xdsl.parser import Parser

from tessera.ir import tile as tt
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.pipelines import lower_to_target
from tessera.runtime import ptxas
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_graph_to_tile import context, lower

RNG = np.random.default_rng(7)
NP = {"f32": np.float32, "f64": np.float64}
EPS = {"f32": 2.0**-23, "f64": 2.0**-52}


def ty(shape, elem) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{elem}>"


def rand(shape, elem):
    x = RNG.uniform(-1.0, 1.0, size=shape)
    x = np.where(np.abs(x) < 0.05, 0.3, x)  # never zero
    return x.astype(NP[elem])


def as_complex(r: np.ndarray) -> np.ndarray:
    """A ``memref<... x 2 x fT>`` result (interleaved real, imaginary) as complex128."""
    assert r.shape[-1] == 2
    return r[..., 0].astype(np.float64) + 1j * r[..., 1].astype(np.float64)


def graph_reference(text: str, args: list[np.ndarray]) -> list[np.ndarray]:
    m = Parser(context(), text).parse_module()
    return run_function(m, "f", args)


def check_ptx(text: str) -> None:
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    # lower_to_target verified the module: emit_ptx need not verify each kernel again
    ptxas.check(emit_ptx(lower_to_target(lower(text)), verify=False))


# --------------------------------------------------------------------------- fft


def fft_text(op: str, shape, elem: str, inverse: bool, then_inverse: bool = False) -> str:
    c = f"complex<{elem}>"
    inv = " inverse" if inverse else ""
    body = f"%0 = tgraph.{op} %x{inv} : ({ty(shape, elem)}) -> {ty(shape, c)}"
    ret = f"func.return %0 : {ty(shape, c)}"
    res = ty(shape, c)
    if then_inverse:  # a complex input: transform the result back
        body += f"\n  %1 = tgraph.{op} %0 inverse : ({ty(shape, c)}) -> {ty(shape, c)}"
        ret = f"func.return %0, %1 : {ty(shape, c)}, {ty(shape, c)}"
        res = f"({ty(shape, c)}, {ty(shape, c)})"
    return f"func.func @f(%x: {ty(shape, elem)}) -> {res} {{\n  {body}\n  {ret} }}"


def fft_tol(elem: str, n: int) -> float:
    """Max abs error allowed relative to sum |x| along the transform (a bound on |X|)."""
    return 8 * EPS[elem] * max(1.0, np.log2(n) if n & (n - 1) == 0 else n)


FFT_CASES = [
    ("fft", (3, 8), "f32", False),
    ("fft", (2, 16), "f64", True),
    ("fft", (4, 1), "f64", False),
    ("fft", (2, 3, 5), "f64", False),
    ("fft", (7,), "f32", True),
    ("fft", (2, 12), "f64", True),
    ("fft", (1024,), "f32", False),  # 512 butterflies: two strided steps of 256 lanes
    ("fft", (300,), "f64", False),  # direct DFT, 300 outputs over 256 lanes
    ("fft2d", (2, 6, 8), "f64", False),
    ("fft2d", (4, 3), "f32", True),
    ("fft2d", (5, 7), "f64", True),
    ("fft2d", (16, 32), "f32", False),
]


@pytest.mark.parametrize("op,shape,elem,inverse", FFT_CASES)
def test_fft_matches_numpy_and_graph_interpreter(op, shape, elem, inverse):
    text = fft_text(op, shape, elem, inverse)
    x = rand(shape, elem)
    (got,) = run_host(lower(text), "f", [x])
    assert got.dtype == NP[elem] and got.shape == (*shape, 2)
    x64 = x.astype(np.float64)
    if op == "fft":
        want = np.fft.ifft(x64) if inverse else np.fft.fft(x64)
        n, scale = shape[-1], np.abs(x64).sum(axis=-1, keepdims=True)
    else:
        want = np.fft.ifft2(x64) if inverse else np.fft.fft2(x64)
        n, scale = shape[-1] * shape[-2], np.abs(x64).sum(axis=(-1, -2), keepdims=True)
    if inverse:
        scale = scale / n
    err = np.abs(as_complex(got) - want)
    assert np.all(err <= fft_tol(elem, n) * scale), err.max()
    (ref,) = graph_reference(text, [x])
    assert np.abs(as_complex(got) - ref).max() <= fft_tol(elem, n) * scale.max()


@pytest.mark.parametrize("op,shape,elem", [("fft", (3, 10), "f64"), ("fft", (2, 8), "f32"),
                                           ("fft2d", (3, 4, 6), "f64")])
def test_fft_of_complex_input_round_trips(op, shape, elem):
    text = fft_text(op, shape, elem, False, then_inverse=True)
    x = rand(shape, elem)
    fwd, back = run_host(lower(text), "f", [x])
    axes = (-1,) if op == "fft" else (-2, -1)
    want = np.fft.fftn(x.astype(np.float64), axes=axes)
    n = int(np.prod([shape[a] for a in axes]))
    tol = fft_tol(elem, n) * np.abs(x).sum()
    assert np.abs(as_complex(fwd) - want).max() <= tol
    assert np.abs(as_complex(back) - x).max() <= 2 * tol
    _, ref_back = graph_reference(text, [x])
    assert np.abs(as_complex(back) - ref_back).max() <= 2 * tol


def test_fft_kernel_shape():
    m = lower(fft_text("fft2d", (2, 6, 8), "f32", False))
    kernels = {k.sym_name.data: k for k in m.walk() if isinstance(k, tt.KernelOp)}
    assert list(kernels) == ["f_fft2d_0", "f_fft2d_1"]
    launches = [o.grid_value() for o in m.walk() if isinstance(o, tt.LaunchOp)]
    # rows: 12 lines of 8, 8 per tile; columns: 16 lines of 6, 16 per tile
    assert launches == [(2, 1, 1), (1, 1, 1)]
    shared = [o for o in m.walk() if isinstance(o, tt.AllocSharedOp)]
    assert len(shared) == 2  # one buffer per kernel


def test_fft_too_long_is_reported():
    with pytest.raises(NotImplementedError, match=r"tgraph.fft has no Tile IR lowering "
                                                  r"\(length 8388608 along axis 1"):
        lower(fft_text("fft", (1, 2**23), "f64", False))


def test_complex_transpose_is_reported():
    c = ty((4, 8), "complex<f32>")
    ct = ty((8, 4), "complex<f32>")
    text = f"""func.func @f(%x: {ty((4, 8), 'f32')}) -> {ct} {{
      %0 = tgraph.fft %x : ({ty((4, 8), 'f32')}) -> {c}
      %1 = tgraph.transpose %0 permutation = [1, 0] : ({c}) -> {ct}
      func.return %1 : {ct} }}"""
    with pytest.raises(NotImplementedError, match="tgraph.transpose has no Tile IR lowering "
                                                  r"\(complex tensors"):
        lower(text)


# --------------------------------------------------------------------------- cholesky


def chol_text(shape, elem) -> str:
    t = ty(shape, elem)
    return f"func.func @f(%x: {t}) -> {t} {{\n  %0 = tgraph.cholesky %x : ({t}) -> {t}\n" \
           f"  func.return %0 : {t} }}"


def spd(shape, elem):
    b = rand(shape, "f64")
    n = shape[-1]
    return (b @ np.swapaxes(b, -1, -2) + n * np.eye(n)).astype(NP[elem])


@pytest.mark.parametrize("shape,elem", [((1, 1), "f64"), ((5, 5), "f64"), ((2, 3, 7, 7), "f32"),
                                        ((19, 19), "f64"), ((3, 33, 33), "f32")])
def test_cholesky_matches_numpy(shape, elem):
    a = spd(shape, elem)
    # the upper triangle is not read: garbage there must not matter
    a_in = a + np.triu(rand(shape, elem), 1)
    (got,) = run_host(lower(chol_text(shape, elem)), "f", [a_in])
    want = np.linalg.cholesky(a.astype(np.float64))
    n = shape[-1]
    cond = np.linalg.cond(a.astype(np.float64)).max()
    tol = 4 * n * EPS[elem] * cond * np.abs(want).max()
    assert np.abs(got - want).max() <= tol
    assert np.all(np.triu(got, 1) == 0)
    (ref,) = graph_reference(chol_text(shape, elem), [a])
    assert np.abs(got - ref).max() <= tol


def test_cholesky_not_positive_definite_gives_nan():
    a = spd((6, 6), "f64")
    a[3, 3] = -50.0  # the pivot of column 3 is negative
    (got,) = run_host(lower(chol_text((6, 6), "f64")), "f", [a])
    want = np.linalg.cholesky(a[:3, :3])
    assert np.abs(got[:3, :3] - want).max() < 1e-13
    lower_tri = np.tril(np.ones((6, 6), dtype=bool))
    later = lower_tri & (np.arange(6)[None, :] >= 3)
    assert np.all(np.isnan(got[later]))  # column 3 and all later ones
    assert np.all(got[~lower_tri] == 0)
    assert np.all(np.isfinite(got[:, :3]))
    # the CPU reference gives the same NaN columns
    (ref,) = graph_reference(chol_text((6, 6), "f64"), [a])
    assert np.array_equal(np.isnan(ref), np.isnan(got))
    assert np.abs(ref[:, :3] - got[:, :3]).max() < 1e-13


@pytest.mark.parametrize("shape,elem,panel,tile,lanes,staging", [
    ((70, 70), "f64", 256, 64, 128, "async"), ((2, 100, 100), "f32", 256, 64, 128, "async"),
    ((129, 129), "f64", 256, 64, 128, "async"), ((150, 150), "f64", 64, 64, 128, "async"),
    ((2, 161, 161), "f32", 96, 64, 128, "async"), ((2, 161, 161), "f32", 64, 128, 256, "sync"),
    ((2, 161, 161), "f32", 64, 64, 256, "prefetch"), ((161, 161), "f32", 64, 128, 256, "async"),
    ((150, 150), "f64", 64, 128, 128, "sync"), ((2, 100, 100), "f32", 64, 64, 128, "sync"),
    ((164, 164), "f32", 64, 64, 128, "async"),
])
def test_cholesky_blocked_matches_numpy(shape, elem, panel, tile, lanes, staging, monkeypatch):
    """n > 64: the blocked kernels (factor, inner updates, trailing-update GEMMs over the
    panels, the diagonal blocks scattered last). The narrow panels give several trailing
    updates, with a partial last block and panel; ``tile`` 128 the update's 128-square
    blocks (two row and column blocks at 161). f32 updates run on the tensor cores
    (3xTF32) with ``lanes`` per tile, the panels staged by loads and stores ("sync"),
    with the next chunk's loads in registers ("prefetch") or by double-buffered 16-byte
    ``copy_async`` ops ("async", which odd ``n`` stage as "sync");
    f64 ones as FMA tiles."""
    from tessera.passes import tile_cholesky_blocked as cb

    monkeypatch.setattr(cb, "PANEL", panel)
    monkeypatch.setattr(cb, "UPDATE_TILE", tile)
    monkeypatch.setattr(cb, "MMA_TILE", tile)
    monkeypatch.setattr(cb, "MMA_LANES", lanes)
    monkeypatch.setattr(cb, "MMA_PREFETCH", staging == "prefetch")
    monkeypatch.setattr(cb, "MMA_ASYNC", staging == "async")
    m = lower(chol_text(shape, elem))
    names = {o.sym_name.data for o in m.walk() if isinstance(o, tt.KernelOp)}
    assert names == {f"f_cholesky_{x}_0" for x in ("copy", "factor", "update", "scatter")}
    n = shape[-1]
    nb, npanels = -(-n // cb.BLOCK), -(-n // panel)
    per_panel = panel // cb.BLOCK
    # an inner update after every block column of a panel but its last one
    inner = nb - npanels
    launches = [o for o in m.walk() if isinstance(o, tt.LaunchOp)]
    assert len(launches) == cb.launch_count(n) == 2 + nb + inner + (npanels - 1)
    assert sum(1 for o in launches if o.callee.root_reference.data.endswith("factor_0")) == nb
    assert per_panel >= 2
    a = spd(shape, elem)
    (got,) = run_host(m, "f", [a + np.triu(rand(shape, elem), 1)])
    want = np.linalg.cholesky(a.astype(np.float64))
    cond = np.linalg.cond(a.astype(np.float64)).max()
    assert np.abs(got - want).max() <= 4 * n * EPS[elem] * cond * np.abs(want).max()
    assert np.all(np.triu(got, 1) == 0)


@pytest.mark.parametrize("shape,elem", [((2, 100, 100), "f32"), ((150, 150), "f64"),
                                        ((77, 77), "f32")])
def test_cholesky_factor_pivot_by_every_lane_is_bitwise_lane_ks(shape, elem, monkeypatch):
    """Every lane of a factor tile taking column k's pivot from the block's row k in
    shared memory gives the same bits as lane k computing it and publishing it, also
    for a pivot that is not positive (NaN from that column on)."""
    from tessera.passes import tile_cholesky_blocked as cb

    a = spd(shape, elem)
    bad = a.copy()
    bad[..., 70, 70] = -1.0
    got = {}
    for every in (True, False):
        monkeypatch.setattr(cb, "FACTOR_EVERY_PIVOT", every)
        m = lower(chol_text(shape, elem))
        got[every] = [run_host(m, "f", [x])[0] for x in (a, bad)]
    for x, y in zip(got[True], got[False]):
        assert np.array_equal(x, y, equal_nan=True)
    assert np.isnan(got[True][1][..., 70:, 70]).all() and np.isfinite(got[True][0]).all()


def test_cholesky_block_past_static_shared_memory_is_refused(monkeypatch):
    """A block width whose factor tile needs more than 48 KiB of static shared memory is
    a located error at lowering, not a kernel that fails to load on the GPU."""
    from tessera.passes import tile_cholesky_blocked as cb

    monkeypatch.setattr(cb, "BLOCK", 64)
    with pytest.raises(ValueError, match=r"BLOCK 64 needs 117504 bytes of static shared"):
        lower(chol_text((100, 100), "f64"))


def test_cholesky_blocked_not_positive_definite_gives_nan():
    n, bad = 100, 40  # the pivot of column 40 (in the second block column) is negative
    a = spd((n, n), "f64")
    a[bad, bad] = -1e4
    (got,) = run_host(lower(chol_text((n, n), "f64")), "f", [a])
    want = np.linalg.cholesky(a[:bad, :bad])
    assert np.abs(got[:bad, :bad] - want).max() < 1e-12
    lower_tri = np.tril(np.ones((n, n), dtype=bool))
    later = lower_tri & (np.arange(n)[None, :] >= bad)
    assert np.all(np.isnan(got[later]))
    assert np.all(got[~lower_tri] == 0)
    assert np.all(np.isfinite(got[:, :bad]))


def test_cholesky_bf16_is_reported():
    with pytest.raises(NotImplementedError, match=r"tgraph.cholesky has no Tile IR lowering "
                                                  r"\(element type bf16"):
        lower(chol_text((4, 4), "bf16"))


# --------------------------------------------------------------------------- svd


def svd_text(shape, elem) -> str:
    *b, m, n = shape
    k = min(m, n)
    outs = [ty((*b, m, k), elem), ty((*b, k), elem), ty((*b, k, n), elem)]
    o = ", ".join(outs)
    return f"func.func @f(%x: {ty(shape, elem)}) -> ({o}) {{\n" \
           f"  %0, %1, %2 = tgraph.svd %x : ({ty(shape, elem)}) -> ({o})\n" \
           f"  func.return %0, %1, %2 : {o} }}"


@pytest.mark.parametrize("shape,elem", [((1, 1), "f64"), ((5, 3), "f64"), ((3, 5), "f64"),
                                        ((2, 6, 4), "f32"), ((2, 4, 4), "f64"),
                                        ((34, 3), "f64"), ((3, 37), "f32")])
def test_svd_invariants_and_numpy(shape, elem):
    a = rand(shape, elem)
    u, s, vh = run_host(lower(svd_text(shape, elem)), "f", [a])
    *_, m, n = shape
    k = min(m, n)
    a64 = a.astype(np.float64)
    un, sn, vhn = np.linalg.svd(a64, full_matrices=False)
    tol = 16 * max(m, n) * EPS[elem] * sn.max()
    # singular values: descending, as numpy's
    assert np.all(np.diff(s, axis=-1) <= 0)
    assert np.abs(s - sn).max() <= tol
    # reconstruction and orthonormal columns / rows
    u64, s64, vh64 = (x.astype(np.float64) for x in (u, s, vh))
    assert np.abs((u64 * s64[..., None, :]) @ vh64 - a64).max() <= tol
    eye = np.eye(k)
    ortho = 16 * max(m, n) * EPS[elem]
    assert np.abs(np.swapaxes(u64, -1, -2) @ u64 - eye).max() <= ortho
    assert np.abs(vh64 @ np.swapaxes(vh64, -1, -2) - eye).max() <= ortho
    # singular vectors equal numpy's up to one sign per pair (values are distinct here)
    gap = np.min(-np.diff(sn, axis=-1)) if k > 1 else sn.max()
    vec_tol = tol / gap * 4 + ortho
    sign = np.sign(np.sum(u64 * un, axis=-2))  # [..., k]
    assert np.abs(u64 * sign[..., None, :] - un).max() <= vec_tol
    assert np.abs(vh64 * sign[..., :, None] - vhn).max() <= vec_tol
    # the Graph IR interpreter gives the same singular values
    _, s_ref, _ = graph_reference(svd_text(shape, elem), [a])
    assert np.abs(s - s_ref).max() <= tol


@pytest.mark.parametrize("shape,elem", [((6, 4), "f64"), ((3, 5), "f64"), ((2, 9, 7), "f32"),
                                        ((40, 33), "f32"), ((2, 5, 12), "f32")])
def test_svd_parallel_kernels(shape, elem, monkeypatch):
    """The parallel kernels (tile_svd_parallel), taken here for small matrices: f64 rotates
    a column pair per tile, f32 a pair of column blocks (tile_svd_blocked)."""
    from tessera.passes import tile_svd_blocked, tile_svd_parallel, tile_svd_shared

    monkeypatch.setattr(tile_svd_parallel, "PARALLEL_MIN_K", 1)
    monkeypatch.setattr(tile_svd_shared, "SHARED_MAX_K", 0)
    m = lower(svd_text(shape, elem))
    names = {o.sym_name.data for o in m.walk() if isinstance(o, tt.KernelOp)}
    step = "block_step" if elem == "f32" else "step"
    assert names == {f"f_svd_{x}_0" for x in ("init", step, "check", "norm", "place")}
    k = min(shape[-2:])
    launches = [o for o in m.walk() if isinstance(o, tt.LaunchOp)]
    if elem == "f32":
        per_sweep = tile_svd_blocked.padded_cols(k) // tile_svd_blocked.block_cols(k) - 1
    else:
        per_sweep = k + k % 2 - 1
    steps = (per_sweep + 1) * tile_svd_parallel.PARALLEL_MAX_SWEEPS
    assert len(launches) == 3 + steps  # init, (steps + check) per sweep, norm, place
    _check_svd(shape, elem)


def test_svd_parallel_f32_keeps_w_equal_to_a_v():
    """f32, 60 columns (the parallel kernels): the rotations are computed in f64, so
    ``U S Vh`` stays within a few f32 ulps of ``A`` (rotations computed in f32 left
    4.5e-6 here and 1.2e-4 at 1024 x 1024 on an H100)."""
    a = rand((70, 60), "f32")
    u, s, vh = run_host(lower(svd_text((70, 60), "f32")), "f", [a])
    a64 = a.astype(np.float64)
    rec = (u.astype(np.float64) * s.astype(np.float64)) @ vh.astype(np.float64)
    assert np.linalg.norm(rec - a64) / np.linalg.norm(a64) < 1.5e-6
    sn = np.linalg.svd(a64, compute_uv=False)
    assert np.abs(s - sn).max() < 1.5e-6 * sn.max()


def _check_svd(shape, elem) -> None:
    a = rand(shape, elem)
    u, s, vh = run_host(lower(svd_text(shape, elem)), "f", [a])
    *_, m, n = shape
    k = min(m, n)
    a64 = a.astype(np.float64)
    sn = np.linalg.svd(a64, compute_uv=False)
    tol = 16 * max(m, n) * EPS[elem] * sn.max()
    assert np.all(np.diff(s, axis=-1) <= 0)
    assert np.abs(s - sn).max() <= tol
    u64, s64, vh64 = (x.astype(np.float64) for x in (u, s, vh))
    assert np.abs((u64 * s64[..., None, :]) @ vh64 - a64).max() <= tol
    ortho = 16 * max(m, n) * EPS[elem]
    assert np.abs(np.swapaxes(u64, -1, -2) @ u64 - np.eye(k)).max() <= ortho
    assert np.abs(vh64 @ np.swapaxes(vh64, -1, -2) - np.eye(k)).max() <= ortho


def test_svd_rank_deficient_keeps_invariants():
    a = rand((6, 4), "f64")
    a[:, 3] = a[:, 0] - 2 * a[:, 1]  # rank 3
    u, s, vh = run_host(lower(svd_text((6, 4), "f64")), "f", [a])
    assert s[3] < 1e-13 * s[0]
    assert np.abs((u * s) @ vh - a).max() < 1e-13
    assert np.abs(s - np.linalg.svd(a, compute_uv=False)).max() < 1e-13


@pytest.mark.parametrize("shape,elem", [((5, 3), "f64"), ((2, 9, 7), "f32"), ((34, 3), "f64")])
def test_svd_global_memory_kernel(shape, elem, monkeypatch):
    """The one-tile kernel in global memory (k <= 48 past the shared-memory budget)."""
    from tessera.passes import tile_svd_shared

    monkeypatch.setattr(tile_svd_shared, "SHARED_MAX_K", 0)
    (k,) = [o for o in lower(svd_text(shape, elem)).walk() if isinstance(o, tt.KernelOp)]
    assert not any(isinstance(o, tt.AllocSharedOp) for o in k.walk())
    _check_svd(shape, elem)


def test_svd_small_matrices_use_shared_memory():
    from tessera.passes import tile_svd_shared

    m = lower(svd_text((8, 32, 32), "f32"))
    (k,) = [o for o in m.walk() if isinstance(o, tt.KernelOp)]
    assert k.group_size.value.data == 32 * 16  # a warp per pair
    assert sum(isinstance(o, tt.AllocSharedOp) for o in k.walk()) == 4
    assert tile_svd_shared.fits(32, 32, xf32) and not tile_svd_shared.fits(3000, 3, xf32)
    assert not tile_svd_shared.fits(40, 36, xf32)  # k > 32
    _check_svd((8, 32, 32), "f32")


def test_svd_kernel_uses_group_reduce_for_long_columns(monkeypatch):
    from tessera.passes import tile_svd_shared

    monkeypatch.setattr(tile_svd_shared, "SHARED_MAX_K", 0)
    m = lower(svd_text((40, 3), "f32"))
    (k,) = [o for o in m.walk() if isinstance(o, tt.KernelOp)]
    assert k.group_size.value.data == 128
    scopes = {o.scope.data for o in k.walk() if isinstance(o, tt.ReduceOp)}
    assert scopes == {"group"}
    m = lower(svd_text((5, 3), "f32"))
    (k,) = [o for o in m.walk() if isinstance(o, tt.KernelOp)]
    assert k.group_size.value.data == 32


# --------------------------------------------------------------------------- ptxas


PTX_PROGRAMS = {
    "fft-pow2-f32": fft_text("fft", (3, 8), "f32", False),
    "ifft-mixed-radix-f64": fft_text("fft", (2, 12), "f64", True),
    "fft2d-complex-input-f32": fft_text("fft2d", (2, 16, 8), "f32", True, then_inverse=True),
    "fft2d-mixed-radix-f64": fft_text("fft2d", (5, 7), "f64", False),
    "cholesky-f32": chol_text((2, 9, 9), "f32"),
    "cholesky-f64": chol_text((40, 40), "f64"),
    "cholesky-blocked-f32": chol_text((3, 300, 300), "f32"),
    "cholesky-blocked-f64": chol_text((97, 97), "f64"),
    "svd-tall-group-f32": svd_text((34, 3), "f32"),
    "svd-wide-f64": svd_text((3, 5), "f64"),
    "svd-batched-f32": svd_text((2, 4, 4), "f32"),
    "svd-parallel-f32": svd_text((70, 50), "f32"),
    "svd-shared-f32": svd_text((4, 32, 32), "f32"),
    "svd-shared-f64": svd_text((3, 40, 20), "f64"),
    "svd-parallel-wide-f64": svd_text((2, 49, 300), "f64"),
}


@pytest.mark.parametrize("name", PTX_PROGRAMS)
def test_kernels_pass_ptxas(name):
    check_ptx(PTX_PROGRAMS[name])


# --------------------------------------------------------------------------- jit, host side


def test_jit_marks_complex_results_for_the_gpu_runtime():
    import tessera as ts
    from tessera import op
    from tessera.runtime.cuda import _complex_results

    @ts.jit
    def f(x):
        return op.fft(x), op.cholesky(x)

    x = spd((4, 4), "f32")
    spec = f.specialize(x)
    assert _complex_results(spec) == (True, False)
    tile = spec.ir("tile")
    host = [o for o in tile.walk() if o.name == "func.func"][0]
    outs = [str(t) for t in host.function_type.outputs.data]
    assert outs == ["memref<4x4x2xf32>", "memref<4x4xf32>"]
    # the CPU path still returns numpy complex results
    got_fft, got_chol = f(x)
    assert got_fft.dtype == np.complex64
    assert np.abs(got_fft - np.fft.fft(x.astype(np.float64))).max() < 1e-4
