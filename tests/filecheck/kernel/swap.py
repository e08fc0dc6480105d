# RUN: %python %s | filecheck %s
"""Shared buffers swapped in a loop (s0, s1 = s1, s0) become stages of one buffer:
the loop carries stage indices, not memrefs. f16 arithmetic is done in f32."""

import tessera as ts

k = ts.kernel.from_source("""
@kernel
def swap(X: f16[m], Y: mut f16[m], a: f16):
    s0 = tshared.alloc[f16](8)
    s1 = tshared.alloc[f16](8)
    s0[0] = a
    for t in tile.range(0, m, 8):
        cp_async.shared.global(s1, X[t:t+8])
        tbarrier()
        Y[t] = s0[0] * a
        s0, s1 = s1, s0
""")
print(k.inspect_ir("tile"))

# CHECK:      %[[A:.*]] = arith.truncf %a : f32 to f16
# CHECK:      %s0 = ttile.alloc_shared : memref<2x8xf16, #tessera.smem>
# CHECK:      ttile.store %[[A]], %s0[%{{.*}}, %{{.*}}] : f16, memref<2x8xf16, #tessera.smem>
# CHECK:      scf.for %{{.*}} iter_args(%[[S0:.*]] = %{{.*}}, %[[S1:.*]] = %{{.*}}) -> (index, index) {
# CHECK:        ttile.copy_async %s0[%[[S1]], %{{.*}}], %X[%{{.*}}] elems = 8
# CHECK:        ttile.commit_group
# CHECK-NEXT:   ttile.wait_group 0
# CHECK-NEXT:   ttile.barrier
# CHECK:        %[[V:.*]] = ttile.load %s0[%[[S0]], %{{.*}}] : memref<2x8xf16, #tessera.smem> -> f16
# CHECK:        %[[VF:.*]] = arith.extf %[[V]] : f16 to f32
# CHECK:        %[[AF:.*]] = arith.extf %[[A]] : f16 to f32
# CHECK-NEXT:   %[[P:.*]] = arith.mulf %[[VF]], %[[AF]] : f32
# CHECK-NEXT:   %[[PH:.*]] = arith.truncf %[[P]] : f32 to f16
# CHECK-NEXT:   ttile.store %[[PH]], %Y[%{{.*}}] : f16, memref<?xf16>
# CHECK:        scf.yield %[[S1]], %[[S0]] : index, index
