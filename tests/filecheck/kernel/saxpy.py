# RUN: %python %s | filecheck %s
"""The guide's saxpy as Tile IR, before any call (symbolic n)."""

from __future__ import annotations

from tessera import f32, kernel, mut, tile


@kernel
def saxpy(x: f32[n], y: mut[f32[n]], alpha: f32):  # noqa: F821
    i = tile.linear_id()
    if i < n:  # noqa: F821
        y[i] = alpha * x[i] + y[i]


print(saxpy.inspect_ir("tile"))
print(saxpy.inspect_ir("tile", group_size=256, n=1000))

# CHECK:      ttile.kernel @saxpy(%x: memref<?xf32>, %y: memref<?xf32>, %alpha: f32, %n: index) group_size = 128 {
# CHECK-NEXT:   %i = ttile.linear_id
# CHECK-NEXT:   %0 = arith.cmpi slt, %i, %n : index
# CHECK-NEXT:   scf.if %0 {
# CHECK-NEXT:     %1 = ttile.load %x[%i] : memref<?xf32> -> f32
# CHECK-NEXT:     %2 = arith.mulf %alpha, %1 : f32
# CHECK-NEXT:     %3 = ttile.load %y[%i] : memref<?xf32> -> f32
# CHECK-NEXT:     %4 = arith.addf %2, %3 : f32
# CHECK-NEXT:     ttile.store %4, %y[%i] : f32, memref<?xf32>
# CHECK-NEXT:   }
# CHECK-NEXT:   ttile.return
# CHECK-NEXT: }

# CHECK:      ttile.kernel @saxpy(%x: memref<1000xf32>, %y: memref<1000xf32>, %alpha: f32, %n: index) group_size = 256 {
