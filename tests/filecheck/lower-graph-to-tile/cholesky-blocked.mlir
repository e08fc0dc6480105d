// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// cholesky with n > 64: blocked right-looking. A copy of the lower triangle, then per
// block column of 32 (the block index a host constant): the diagonal block factored
// in shared memory (rows padded by one) by one tile per matrix, the panel below by forward substitution
// (one lane per row), and the trailing lower triangle updated by an FMA GEMM of
// 64x64 output blocks (4x4 micro-tiles from panels staged in shared memory; tiles
// above the block diagonal skip the work). The last block column has no panel or
// update.

func.func @f(%a: tensor<2x100x100xf32>) -> tensor<2x100x100xf32> {
  %0 = tgraph.cholesky %a : (tensor<2x100x100xf32>) -> tensor<2x100x100xf32>
  func.return %0 : tensor<2x100x100xf32>
}
// CHECK:      ttile.kernel @f_cholesky_copy_0(%{{.*}}: memref<2x100x100xf32>, %{{.*}}: memref<2x100x100xf32>) group_size = 256 {
// CHECK:      ttile.kernel @f_cholesky_diag_0(%{{.*}}: memref<2x100x100xf32>, %{{.*}}: index, %{{.*}}: index) group_size = 256 {
// CHECK:        ttile.alloc_shared : memref<32x33xf32, #tessera.smem>
// CHECK:        scf.for
// CHECK:          math.sqrt
// CHECK:          ttile.barrier
// CHECK:      ttile.kernel @f_cholesky_panel_0(%{{.*}}: memref<2x100x100xf32>, %{{.*}}: index, %{{.*}}: index) group_size = 128 {
// CHECK:        ttile.alloc_shared : memref<32x32xf32, #tessera.smem>
// CHECK:        ttile.barrier
// CHECK:        arith.divf
// CHECK:      ttile.kernel @f_cholesky_update_0(%{{.*}}: memref<2x100x100xf32>, %{{.*}}: index, %{{.*}}: index) group_size = 256 {
// CHECK:        ttile.alloc_shared : memref<32x65xf32, #tessera.smem>
// CHECK:        scf.if
// CHECK:          ttile.barrier
// CHECK:          scf.for {{.*}} -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
// CHECK-COUNT-16:   math.fma
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_cholesky_copy_0({{.*}}) grid = [10, 1, 1]
// CHECK:        ttile.launch @f_cholesky_diag_0({{.*}}) grid = [2, 1, 1]
// CHECK:        ttile.launch @f_cholesky_panel_0({{.*}}) grid = [2, 1, 1]
// CHECK:        ttile.launch @f_cholesky_update_0({{.*}}) grid = [8, 1, 1]
// CHECK:        ttile.launch @f_cholesky_diag_0(
// CHECK:        ttile.launch @f_cholesky_panel_0(
// CHECK:        ttile.launch @f_cholesky_update_0({{.*}}) grid = [2, 1, 1]
// CHECK:        ttile.launch @f_cholesky_diag_0(
// CHECK:        ttile.launch @f_cholesky_panel_0(
// CHECK:        ttile.launch @f_cholesky_update_0({{.*}}) grid = [2, 1, 1]
// CHECK:        ttile.launch @f_cholesky_diag_0(
// CHECK-NEXT:   func.return
