"""CSR sparse products through ``ts.jit`` against cuSPARSE (torch), f32:

* spmm: an 8192 x 8192 CSR matrix (uniform random pattern) at densities 0.1%, 1% and 10%
  times a dense 8192 x N matrix, N in {32, 256, 512}; peer ``torch.sparse.mm`` on a
  ``torch.sparse_csr_tensor`` (cuSPARSE SpMM);
* sddmm: the 1% pattern sampled from ``lhs [8192, 256] @ rhsᵀ`` (rhs [8192, 256]); peer
  ``torch.sparse.sampled_addmm`` (cuSPARSE SDDMM);
* spmm_transpose (``Aᵀ @ D``) at 1%, N = 256, against ``torch.sparse.mm`` of the
  transposed matrix given as CSR (cuSPARSE, without the transposition: torch's own
  transposition of a CSR matrix is not timed).

Every row first checks Tessera's and torch's results against a float64 product on the
GPU (the largest error relative to the largest reference magnitude; free GPU memory is
filled with NaN first, so an unwritten output element fails), then times both in
this process (CUDA events around one call, median of ``--reps``); ``ratio`` = torch time
/ Tessera time (> 1: Tessera is faster). Indices are int32 for both. The table is
printed last.

    python bench/sparse.py [--reps 50] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

import tessera as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.models import _time_ms as time_ms  # noqa: E402  (CUDA events, median)

M = K = 8192


def csr(density: float, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    mask = torch.rand(M, K, device="cuda", generator=gen) < density
    a = mask.float().to_sparse_csr()
    ip, ix = a.crow_indices().int(), a.col_indices().int()
    v = torch.randn(ix.numel(), device="cuda", generator=gen)
    return ip, ix, v


def poison() -> None:
    """Fill 1 GiB of the caching allocator's free memory with NaN, so that an output
    element a kernel leaves unwritten fails the check."""
    blocks = [torch.full((1 << 26,), float("nan"), device="cuda") for _ in range(4)]
    del blocks


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).abs().max() / want.abs().max().clamp(min=1e-30))


def spmm_row(density: float, n: int, reps: int) -> dict:
    ip, ix, v = csr(density, seed=int(density * 1e4))
    d = torch.randn(K, n, device="cuda")
    a = torch.sparse_csr_tensor(ip, ix, v, (M, K))
    f = ts.jit(lambda p, i, x, y: ts.spmm(p, i, x, y, sparse_shape=(M, K)))
    want = torch.sparse_csr_tensor(ip.long(), ix.long(), v.double(), (M, K)) @ d.double()
    poison()
    got, peer = f(ip, ix, v, d), torch.sparse.mm(a, d)
    return dict(case=f"spmm {density:.1%} N={n}", nnz=ix.numel(), err=rel_err(got, want),
                peer_err=rel_err(peer, want),
                tessera=time_ms(lambda: f(ip, ix, v, d), reps),
                torch=time_ms(lambda: torch.sparse.mm(a, d), reps))


def transpose_row(density: float, n: int, reps: int) -> dict:
    ip, ix, v = csr(density, seed=7)
    d = torch.randn(M, n, device="cuda")
    rows = torch.repeat_interleave(torch.arange(M, device="cuda"), ip.diff().long())
    coo = torch.sparse_coo_tensor(torch.stack([ix.long(), rows]), v, (K, M)).coalesce()
    at = coo.to_sparse_csr()
    at = torch.sparse_csr_tensor(at.crow_indices().int(), at.col_indices().int(), at.values(),
                                 (K, M))
    f = ts.jit(lambda p, i, x, y: ts.spmm_transpose(p, i, x, y, sparse_shape=(M, K)))
    want = torch.sparse.mm(coo.double(), d.double())
    poison()
    got, peer = f(ip, ix, v, d), torch.sparse.mm(at, d)
    return dict(case=f"spmm_transpose {density:.1%} N={n}", nnz=ix.numel(),
                err=rel_err(got, want), peer_err=rel_err(peer, want),
                tessera=time_ms(lambda: f(ip, ix, v, d), reps),
                torch=time_ms(lambda: torch.sparse.mm(at, d), reps))


def sddmm_row(density: float, kd: int, reps: int) -> dict:
    ip, ix, v = csr(density, seed=3)
    lhs, rhs = torch.randn(M, kd, device="cuda"), torch.randn(K, kd, device="cuda")
    rhs_t = rhs.t()
    pat = torch.sparse_csr_tensor(ip, ix, torch.zeros_like(v), (M, K))
    f = ts.jit(lambda p, i, x, y: ts.sddmm(p, i, x, y, sparse_shape=(M, K)))
    rows = torch.repeat_interleave(torch.arange(M, device="cuda"), ip.diff().long())
    want = (lhs.double()[rows] * rhs.double()[ix.long()]).sum(1)

    try:  # rhsᵀ as a column-major view (cuSPARSE reads it in place) ...
        torch.sparse.sampled_addmm(pat, lhs, rhs_t, beta=0.0)
    except RuntimeError:  # ... or a row-major copy made before timing
        rhs_t = rhs_t.contiguous()

    def peer():
        return torch.sparse.sampled_addmm(pat, lhs, rhs_t, beta=0.0)

    poison()
    got = f(ip, ix, lhs, rhs)
    return dict(case=f"sddmm {density:.1%} K={kd}", nnz=ix.numel(), err=rel_err(got, want),
                peer_err=rel_err(peer().values(), want),
                tessera=time_ms(lambda: f(ip, ix, lhs, rhs), reps),
                torch=time_ms(peer, reps))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="1%% and N = 256 only")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/sparse.py needs a CUDA device")
    t0 = time.time()
    densities = [0.01] if args.quick else [0.001, 0.01, 0.1]
    widths = [256] if args.quick else [32, 256, 512]
    jobs = [(spmm_row, dn, n) for dn in densities for n in widths]
    jobs += [(sddmm_row, 0.01, 256), (transpose_row, 0.01, 256)]
    rows = []
    for fn, a, b in jobs:
        r = fn(a, b, args.reps)
        ok = r["err"] <= max(1e-5, 4 * r["peer_err"])
        r["ok"] = "ok" if ok else "WRONG"
        rows.append(r)
        print(f"{r['case']}: nnz {r['nnz']}, error {r['err']:.1e} (torch {r['peer_err']:.1e}) "
              f"{r['ok']}, tessera {r['tessera']:.3f} ms, torch {r['torch']:.3f} ms",
              flush=True)
        torch.cuda.empty_cache()
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{time.time() - t0:.0f} s; ratio = torch / tessera (median of {args.reps})")
    print(f"{'case':<28} {'nnz':>9} {'check':>6} {'tessera ms':>11} {'torch ms':>9} {'ratio':>6}")
    for r in rows:
        print(f"{r['case']:<28} {r['nnz']:>9} {r['ok']:>6} {r['tessera']:>11.3f} "
              f"{r['torch']:>9.3f} {r['torch'] / r['tessera']:>6.2f}")


if __name__ == "__main__":
    main()
