# RUN: %python %s | filecheck %s
"""cp_async of a window: 16-byte chunks shared by the lanes, zero-filled past the end,
element copies when the rows are not aligned; a list of equal shared buffers is one
buffer with a stage dim; C += tile.mma(a, b) on bf16 windows uses m16n8k16 ttile.mma."""

import tessera as ts

k = ts.kernel.from_source("""
@kernel
def mem(A: ts.Tensor["M", "K", ts.bf16], C: ts.Tensor["M", "M", ts.f32], s: int):
    bufs = [tile.alloc_shared((32, 16), bf16), tile.alloc_shared((32, 16), bf16)]
    tile.cp_async(bufs[s], A[0:32, 16:32])
    tile.barrier()
    C += tile.mma(bufs[s], bufs[1 - s][0:16, 0:16])
""")
print(k.inspect_ir("tile"))

# CHECK:      %[[W:.*]] = ttile.warp_id
# CHECK:      %bufs = ttile.alloc_shared : memref<2x32x16xbf16, #tessera.smem>
# CHECK:      %[[OK:.*]] = arith.cmpi eq,
# CHECK:      scf.if %[[OK]] {
# CHECK:        scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
# CHECK:          ttile.copy_async %bufs[%{{.*}}, %{{.*}}, %{{.*}}], %A[%{{.*}}, %{{.*}}] elems = 8 valid %{{.*}} : memref<2x32x16xbf16, #tessera.smem>, memref<?x?xbf16>
# CHECK:      } else {
# CHECK:          %{{.*}} = ttile.load %A[%{{.*}}, %{{.*}}] mask %{{.*}} : memref<?x?xbf16> -> bf16
# CHECK:          ttile.store %{{.*}}, %bufs[%{{.*}}, %{{.*}}, %{{.*}}] mask %{{.*}} : bf16, memref<2x32x16xbf16, #tessera.smem>
# CHECK:      ttile.commit_group
# CHECK-NEXT: ttile.wait_group 0
# CHECK-NEXT: ttile.barrier
# CHECK:      scf.for %{{.*}} = %[[W]] to %{{.*}} step %{{.*}} {
# CHECK:        %{{.*}} = scf.for %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (vector<4xf32>) {
# CHECK:          vector.insert
# CHECK:          %{{.*}} = ttile.mma %{{.*}}, %{{.*}}, %[[ACC]] accum = f32 : vector<8xbf16>, vector<4xbf16>, vector<4xf32> -> vector<4xf32>
# CHECK:        vector.extract
# CHECK:        ttile.store %{{.*}}, %C[%{{.*}}, %{{.*}}] mask %{{.*}} : f32, memref<?x?xf32>
