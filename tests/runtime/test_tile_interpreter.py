"""The Tile IR reference interpreter: lockstep lanes, divergence masks, shared memory,
cross-lane ops and mma fragments, checked against numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.arith import Arith
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func
from xdsl.dialects.math import Math
from xdsl.dialects.memref import MemRef
from xdsl.dialects.scf import Scf
from xdsl.dialects.vector import Vector
from xdsl.parser import Parser
from xdsl.utils.exceptions import InterpretationError

from tessera.ir.attrs import Tessera
from tessera.ir.tile import Tile, mma_a_coords, mma_b_coords, mma_c_coords
from tessera.runtime.tile_interpreter import run_host, run_kernel

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(1)


def parse(text: str) -> ModuleOp:
    ctx = Context()
    for d in (Builtin, Func, Tessera, Tile, Arith, Math, Scf, MemRef, Vector):
        ctx.load_dialect(d)
    m = Parser(ctx, text).parse_module()
    m.verify()
    return m


def test_mma_fragments_match_ptx_layout():
    m = parse("""
    ttile.kernel @k(%a: memref<32x8xbf16>, %b: memref<32x4xbf16>, %c: memref<32x4xf32>, %d: memref<32x4xf32>) group_size = 32 {
      %l = ttile.local_id
      %z = arith.constant 0 : index
      %av = ttile.load_vector %a[%l, %z] : memref<32x8xbf16> -> vector<8xbf16>
      %bv = ttile.load_vector %b[%l, %z] : memref<32x4xbf16> -> vector<4xbf16>
      %cv = ttile.load_vector %c[%l, %z] : memref<32x4xf32> -> vector<4xf32>
      %dv = ttile.mma %av, %bv, %cv accum = f32 : vector<8xbf16>, vector<4xbf16>, vector<4xf32> -> vector<4xf32>
      ttile.store_vector %dv, %d[%l, %z] : vector<4xf32>, memref<32x4xf32>
      ttile.return
    }""")
    A = RNG.uniform(-1, 1, (16, 16)).astype(BF16)
    B = RNG.uniform(-1, 1, (16, 8)).astype(BF16)
    C = RNG.uniform(-1, 1, (16, 8)).astype(np.float32)
    af = np.array([[A[mma_a_coords(ln, i)] for i in range(8)] for ln in range(32)], BF16)
    bf = np.array([[B[mma_b_coords(ln, i)] for i in range(4)] for ln in range(32)], BF16)
    cf = np.array([[C[mma_c_coords(ln, i)] for i in range(4)] for ln in range(32)], np.float32)
    df = np.full((32, 4), np.nan, np.float32)
    run_kernel(m, "k", [af, bf, cf, df], grid=[1])
    D = np.zeros((16, 8))
    for ln in range(32):
        for i in range(4):
            D[mma_c_coords(ln, i)] = df[ln, i]
    want = A.astype(np.float64) @ B.astype(np.float64) + C
    np.testing.assert_allclose(D, want, rtol=1e-6, atol=1e-6)
    # every (row, col) of each operand is covered exactly once
    assert len({mma_a_coords(ln, i) for ln in range(32) for i in range(8)}) == 256
    assert len({mma_b_coords(ln, i) for ln in range(32) for i in range(4)}) == 128
    assert len({mma_c_coords(ln, i) for ln in range(32) for i in range(4)}) == 128


def test_tf32_mma_fragments_match_ptx_layout_and_read_tf32():
    m = parse("""
    ttile.kernel @k(%a: memref<32x4xf32>, %b: memref<32x2xf32>, %c: memref<32x4xf32>, %d: memref<32x4xf32>) group_size = 32 {
      %l = ttile.local_id
      %z = arith.constant 0 : index
      %av = ttile.load_vector %a[%l, %z] : memref<32x4xf32> -> vector<4xf32>
      %bv = ttile.load_vector %b[%l, %z] : memref<32x2xf32> -> vector<2xf32>
      %cv = ttile.load_vector %c[%l, %z] : memref<32x4xf32> -> vector<4xf32>
      %dv = ttile.mma %av, %bv, %cv accum = f32 : vector<4xf32>, vector<2xf32>, vector<4xf32> -> vector<4xf32>
      ttile.store_vector %dv, %d[%l, %z] : vector<4xf32>, memref<32x4xf32>
      ttile.return
    }""")
    A = RNG.uniform(-1, 1, (16, 8)).astype(np.float32)
    B = RNG.uniform(-1, 1, (8, 8)).astype(np.float32)
    C = RNG.uniform(-1, 1, (16, 8)).astype(np.float32)
    af = np.array([[A[mma_a_coords(ln, i, 8)] for i in range(4)] for ln in range(32)], np.float32)
    bf = np.array([[B[mma_b_coords(ln, i, 8)] for i in range(2)] for ln in range(32)], np.float32)
    cf = np.array([[C[mma_c_coords(ln, i)] for i in range(4)] for ln in range(32)], np.float32)
    df = np.full((32, 4), np.nan, np.float32)
    run_kernel(m, "k", [af, bf, cf, df], grid=[1])
    D = np.zeros((16, 8))
    for ln in range(32):
        for i in range(4):
            D[mma_c_coords(ln, i)] = df[ln, i]

    def tf32(x: np.ndarray) -> np.ndarray:
        return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)

    want = tf32(A) @ tf32(B) + C
    np.testing.assert_allclose(D, want, rtol=1e-6, atol=1e-6)
    # the operands' low mantissa bits are not read: f32 products differ by far more
    assert np.abs(D - (A.astype(np.float64) @ B + C)).max() > 1e-5
    assert len({mma_a_coords(ln, i, 8) for ln in range(32) for i in range(4)}) == 128
    assert len({mma_b_coords(ln, i, 8) for ln in range(32) for i in range(2)}) == 64


def test_reduce_and_shuffle():
    m = parse("""
    ttile.kernel @k(%x: memref<192xf32>, %s: memref<192xf32>, %w: memref<192xf32>, %h: memref<192xf32>, %n: memref<192xi32>) group_size = 64 grid = [3, 1, 1] {
      %i = ttile.linear_id
      %v = ttile.load %x[%i] : memref<192xf32> -> f32
      %g = ttile.reduce %v kind = sum scope = group : f32
      %m = ttile.reduce %v kind = max scope = warp : f32
      %f = ttile.shuffle_xor %v, 5 : f32
      %li = ttile.local_id
      %lw = arith.index_cast %li : index to i32
      %mn = ttile.reduce %lw kind = min scope = group : i32
      ttile.store %g, %s[%i] : f32, memref<192xf32>
      ttile.store %m, %w[%i] : f32, memref<192xf32>
      ttile.store %f, %h[%i] : f32, memref<192xf32>
      ttile.store %mn, %n[%i] : i32, memref<192xi32>
      ttile.return
    }""")
    x = RNG.uniform(-3, 3, 192).astype(np.float32)
    s, w, h = (np.zeros(192, np.float32) for _ in range(3))
    n = np.full(192, 7, np.int32)
    run_kernel(m, "k", [x, s, w, h, n])
    np.testing.assert_allclose(s, np.repeat(x.reshape(3, 64).astype(np.float64).sum(1), 64),
                               rtol=1e-5)
    np.testing.assert_array_equal(w, np.repeat(x.reshape(6, 32).max(1), 32))
    lanes = np.arange(192)
    np.testing.assert_array_equal(h, x[(lanes // 32) * 32 + ((lanes % 32) ^ 5)])
    np.testing.assert_array_equal(n, 0)


def test_divergent_control_flow():
    m = parse("""
    ttile.kernel @k(%o: memref<40xi32>, %p: memref<40xi32>, %q: memref<40xi32>) group_size = 32 grid = [2, 1, 1] {
      %i = ttile.linear_id
      %c40 = arith.constant 40 : index
      %in = arith.cmpi ult, %i, %c40 : index
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %z = arith.constant 0 : i32
      %two = arith.constant 2 : i32
      %c3 = arith.constant 3 : index
      %r = arith.remui %i, %c3 : index
      %odd = arith.cmpi eq, %r, %c0 : index
      %sel = scf.if %odd -> (i32) {
        %a = arith.index_cast %i : index to i32
        scf.yield %a : i32
      } else {
        %b = arith.constant -1 : i32
        scf.yield %b : i32
      }
      %sum = scf.for %k = %c0 to %i step %c1 iter_args(%acc = %z) -> (i32) {
        %kk = arith.index_cast %k : index to i32
        %nx = arith.addi %acc, %kk : i32
        scf.yield %nx : i32
      }
      %start = arith.index_cast %r : index to i32
      %one = arith.constant 1 : i32
      %lim = arith.constant 100 : i32
      %st = arith.addi %start, %one : i32
      %steps, %v = scf.while (%n = %z, %y = %st) : (i32, i32) -> (i32, i32) {
        %go = arith.cmpi slt, %y, %lim : i32
        scf.condition(%go) %n, %y : i32, i32
      } do {
      ^bb0(%n2: i32, %y2: i32):
        %n3 = arith.addi %n2, %one : i32
        %y3 = arith.muli %y2, %two : i32
        scf.yield %n3, %y3 : i32, i32
      }
      scf.if %in {
        ttile.store %sel, %o[%i] : i32, memref<40xi32>
        ttile.store %sum, %p[%i] : i32, memref<40xi32>
        ttile.store %steps, %q[%i] : i32, memref<40xi32>
      }
      ttile.return
    }""")
    o, p, q = (np.full(40, -7, np.int32) for _ in range(3))
    run_kernel(m, "k", [o, p, q])
    i = np.arange(40)
    np.testing.assert_array_equal(o, np.where(i % 3 == 0, i, -1))
    np.testing.assert_array_equal(p, i * (i - 1) // 2)
    steps = np.array([int(np.ceil(np.log2(100 / (k % 3 + 1)))) for k in i])
    np.testing.assert_array_equal(q, steps)


def test_shared_memory_is_per_tile_and_copy_async_zero_fills():
    m = parse("""
    ttile.kernel @k(%x: memref<3x12xf32>, %o: memref<3x12xf32>, %t: memref<3x32xi32>) group_size = 32 grid = [3, 1, 1] {
      %tile = ttile.tile_id x
      %l = ttile.local_id
      %s = ttile.alloc_shared : memref<12xf32, #tessera.smem>
      %ids = ttile.alloc_shared : memref<32xi32, #tessera.smem>
      %c4 = arith.constant 4 : index
      %c3 = arith.constant 3 : index
      %c10 = arith.constant 10 : index
      %c0 = arith.constant 0 : index
      %act = arith.cmpi ult, %l, %c3 : index
      scf.if %act {
        %off = arith.muli %l, %c4 : index
        %left = arith.subi %c10, %off : index
        %v = arith.minsi %left, %c4 : index
        ttile.copy_async %s[%off], %x[%tile, %off] elems = 4 valid %v : memref<12xf32, #tessera.smem>, memref<3x12xf32>
      }
      ttile.commit_group
      ttile.wait_group 0
      %ti = arith.index_cast %tile : index to i32
      ttile.store %ti, %ids[%l] : i32, memref<32xi32, #tessera.smem>
      ttile.barrier
      %c12 = arith.constant 12 : index
      %c1 = arith.constant 1 : index
      %c31 = arith.constant 31 : index
      %in = arith.cmpi ult, %l, %c12 : index
      %y = ttile.load %s[%l] mask %in : memref<12xf32, #tessera.smem> -> f32
      ttile.store %y, %o[%tile, %l] mask %in : f32, memref<3x12xf32>
      %nb = arith.addi %l, %c1 : index
      %nbr = arith.andi %nb, %c31 : index
      %other = ttile.load %ids[%nbr] : memref<32xi32, #tessera.smem> -> i32
      ttile.store %other, %t[%tile, %l] : i32, memref<3x32xi32>
      ttile.return
    }""")
    x = RNG.uniform(1, 2, (3, 12)).astype(np.float32)
    o = np.full((3, 12), np.nan, np.float32)
    t = np.zeros((3, 32), np.int32)
    run_kernel(m, "k", [x, o, t])
    np.testing.assert_array_equal(o, np.concatenate([x[:, :10], np.zeros((3, 2), np.float32)], 1))
    np.testing.assert_array_equal(t, np.repeat(np.arange(3)[:, None], 32, 1))


def test_host_runner_launches_in_order():
    m = parse("""
    ttile.kernel @inc(%x: memref<50xf32>, %n: index) group_size = 64 {
      %i = ttile.linear_id
      %ok = arith.cmpi ult, %i, %n : index
      %v = ttile.load %x[%i] mask %ok : memref<50xf32> -> f32
      %one = arith.constant 1.5 : f32
      %w = arith.addf %v, %one : f32
      ttile.store %w, %x[%i] mask %ok : f32, memref<50xf32>
      ttile.return
    }
    func.func @main(%x: memref<50xf32>) -> memref<50xf32> {
      %n = arith.constant 50 : index
      ttile.launch @inc(%x, %n) grid = [1, 1, 1] : (memref<50xf32>, index)
      ttile.launch @inc(%x, %n) grid = [1, 1, 1] : (memref<50xf32>, index)
      func.return %x : memref<50xf32>
    }""")
    x = RNG.uniform(-1, 1, 50).astype(np.float32)
    (r,) = run_host(m, "main", [x])
    np.testing.assert_array_equal(r, x + np.float32(1.5) + np.float32(1.5))


ERRORS = {
    "oob": ("""
      %i = ttile.linear_id
      %v = ttile.load %x[%i] : memref<40xf32> -> f32
    """, r"ttile.load: index 40 out of bounds for dimension 0 of size 40 \(tile \(1, 0, 0\) lane 8\)"),
    "barrier": ("""
      %l = ttile.local_id
      %c3 = arith.constant 3 : index
      %lo = arith.cmpi ult, %l, %c3 : index
      scf.if %lo {
        ttile.barrier
      }
    """, r"ttile.barrier: reached by only part of a tile"),
    "misaligned": ("""
      %l = ttile.local_id
      %s = ttile.alloc_shared : memref<64xf32, #tessera.smem>
      ttile.copy_async %s[%l], %x[%l] elems = 4 : memref<64xf32, #tessera.smem>, memref<40xf32>
    """, r"ttile.copy_async: access of elements 1..4 runs past|ttile.copy_async: access of 4 elements at element offset 1 is not aligned"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_name_the_op_and_lane(case):
    body, msg = ERRORS[case]
    m = parse(f"""
    ttile.kernel @k(%x: memref<40xf32>) group_size = 32 {{
      {body}
      ttile.return
    }}""")
    x = np.ones(40, np.float32)
    with pytest.raises((InterpretationError, ValueError), match=msg):
        run_kernel(m, "k", [x], grid=[2])


def test_bad_arguments_are_reported():
    m = parse("""
    ttile.kernel @k(%x: memref<40xf32>) group_size = 32 {
      ttile.return
    }""")
    with pytest.raises(TypeError, match=r"argument 0: array has dtype float64, expected float32"):
        run_kernel(m, "k", [np.ones(40)], grid=[1])
    with pytest.raises(ValueError, match="has no default grid"):
        run_kernel(m, "k", [np.ones(40, np.float32)])
