// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// triangular_solve with n > 64: blocked, block rows of 32 in panels of 256. B is copied
// into X; then one panel launch per panel, a tile per 64 columns of X: for each block
// row K of the panel (a loop), T's 32 x 32 block staged in shared memory (rows padded by
// one), forward substitution on the tile's columns (one lane each), a barrier, then the
// update of the panel's rows below K (K = 32) in 64-row blocks, each the FMA GEMM tile of
// tile_fma_gemm (64x64 outputs, operands staged in rows of 68 and read as vectors of 4),
// and a barrier. After each panel but the last, a trailing update of every row below it.
// An upper T is taken from the bottom row up (row i of the kernels is row n - 1 - i).

func.func @f(%a: tensor<2x100x100xf32>, %b: tensor<2x100x70xf32>) -> tensor<2x100x70xf32> {
  %0 = tgraph.triangular_solve %a, %b upper : (tensor<2x100x100xf32>, tensor<2x100x70xf32>) -> tensor<2x100x70xf32>
  func.return %0 : tensor<2x100x70xf32>
}
// CHECK:      ttile.kernel @f_trsm_copy_0(%{{.*}}: memref<2x100x70xf32>, %{{.*}}: memref<2x100x70xf32>) group_size = 256 {
// CHECK:      ttile.kernel @f_trsm_panel_0(%{{.*}}: memref<2x100x70xf32>, %{{.*}}: memref<2x100x100xf32>, %{{.*}}: index, %{{.*}}: index) group_size = 256 {
// CHECK:        ttile.alloc_shared : memref<32x33xf32, #tessera.smem>
// CHECK:        scf.for
// CHECK:          %[[LAST:.*]] = arith.constant 99 : index
// CHECK-NEXT:     arith.subi %[[LAST]]
// CHECK:          ttile.barrier
// CHECK:          arith.divf
// CHECK:          ttile.barrier
// CHECK:          scf.for
// CHECK:            ttile.alloc_shared : memref<32x68xf32, #tessera.smem>
// CHECK:            scf.for {{.*}} -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
// CHECK:              ttile.load_vector {{.*}} -> vector<4xf32>
// CHECK-COUNT-16:     math.fma
// CHECK:          ttile.barrier
// CHECK-NOT:  ttile.kernel @f_trsm_update_0
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_trsm_copy_0({{.*}}) grid = [8, 1, 1]
// CHECK:        ttile.launch @f_trsm_panel_0({{.*}}) grid = [4, 1, 1]
// CHECK-NEXT:   func.return

// Two panels: the trailing update of rows 256..299 reads X's first 256 rows (8 chunks).
func.func @g(%a: tensor<300x300xf64>, %b: tensor<300x5xf64>) -> tensor<300x5xf64> {
  %0 = tgraph.triangular_solve %a, %b transpose_a : (tensor<300x300xf64>, tensor<300x5xf64>) -> tensor<300x5xf64>
  func.return %0 : tensor<300x5xf64>
}
// CHECK:      ttile.kernel @g_trsm_panel_0(
// CHECK:      ttile.kernel @g_trsm_update_0(
// CHECK:        ttile.alloc_shared : memref<32x66xf64, #tessera.smem>
// CHECK:            ttile.load_vector {{.*}} -> vector<2xf64>
// CHECK:      func.func @g(
// CHECK:        %[[B0:.*]] = arith.constant 0 : index
// CHECK-NEXT:   %[[E0:.*]] = arith.constant 256 : index
// CHECK-NEXT:   ttile.launch @g_trsm_panel_0(%{{.*}}, %{{.*}}, %[[B0]], %[[E0]]) grid = [1, 1, 1]
// CHECK:        %[[CH:.*]] = arith.constant 8 : index
// CHECK-NEXT:   %[[PE:.*]] = arith.constant 256 : index
// CHECK-NEXT:   %[[N:.*]] = arith.constant 300 : index
// CHECK-NEXT:   %[[T:.*]] = arith.constant 1 : index
// CHECK-NEXT:   ttile.launch @g_trsm_update_0(%{{.*}}, %{{.*}}, %{{.*}}, %[[CH]], %[[PE]], %[[N]], %[[T]]) grid = [1, 1, 1]
// CHECK-NEXT:   %[[B1:.*]] = arith.constant 8 : index
// CHECK-NEXT:   %[[E1:.*]] = arith.constant 300 : index
// CHECK-NEXT:   ttile.launch @g_trsm_panel_0(%{{.*}}, %{{.*}}, %[[B1]], %[[E1]]) grid = [1, 1, 1]
// CHECK-NEXT:   func.return
