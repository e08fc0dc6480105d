# RUN: %python %s | filecheck %s
"""The guide's saxpy as Tile IR and PTX, before any call (symbolic n), and with n fixed."""

from __future__ import annotations

from tessera import f32, kernel, mut, tile


@kernel
def saxpy(x: f32[n], y: mut[f32[n]], alpha: f32):  # noqa: F821
    i = tile.linear_id()
    if i < n:  # noqa: F821
        y[i] = alpha * x[i] + y[i]


print(saxpy.inspect_ir("tile"))
print(saxpy.inspect_ir("tile", group_size=256, n=1000))
print(saxpy.inspect_ir("ptx"))

# CHECK:      ttile.kernel @saxpy(%x: memref<?xf32>, %y: memref<?xf32>, %alpha: f32, %n: index) group_size = 128 sizes = [%n, %n] {
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

# One shape-generic kernel: n is a .u64 parameter, compared with the linear id.
# CHECK-LABEL: .visible .entry saxpy(
# CHECK-NEXT:    .param .u64 saxpy_param_0,
# CHECK-NEXT:    .param .u64 saxpy_param_1,
# CHECK-NEXT:    .param .f32 saxpy_param_2,
# CHECK-NEXT:    .param .u64 saxpy_param_3
# CHECK-NEXT:  )
# CHECK:         ld.param.u64 [[N:%rd[0-9]+]], [saxpy_param_3];
# CHECK:         setp.lt.s64 [[P:%p[0-9]+]], [[I:%rd[0-9]+]], [[N]];
# CHECK:         ld.global.f32
# CHECK:         st.global.f32
