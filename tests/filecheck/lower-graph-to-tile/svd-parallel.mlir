// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// svd with min(m, n) > 48: one-sided Jacobi with many tiles per matrix (V in f64). The host
// function is a fixed sequence of launches: init (W^T, V^T = I, flags), then per sweep
// the round-robin steps (the step index a host constant, made once) and a check that
// marks a converged matrix done (its later steps skip the work), then norms and placement.

// f32: a tile per pair of 8-column blocks, the 50 columns padded to 64 (8 blocks): 7 steps
// a sweep of 4 tiles. A tile stages the pair's rows in f64, forms their 16 x 16 Gram matrix
// and its rotation (both double-buffered) in shared memory.
func.func @f(%a: tensor<60x50xf32>) -> (tensor<60x50xf32>, tensor<50xf32>, tensor<50x50xf32>) {
  %0, %1, %2 = tgraph.svd %a : (tensor<60x50xf32>) -> (tensor<60x50xf32>, tensor<50xf32>, tensor<50x50xf32>)
  func.return %0, %1, %2 : tensor<60x50xf32>, tensor<50xf32>, tensor<50x50xf32>
}
// CHECK:      ttile.kernel @f_svd_init_0(%{{.*}}: memref<1x64x60xf32>, %{{.*}}: memref<1x64x64xf64>, %{{.*}}: memref<1x4xf32>, %{{.*}}: memref<1xf32>, %{{.*}}: memref<60x50xf32>) group_size = 64 {
// CHECK:      ttile.kernel @f_svd_block_step_0(%{{.*}}: memref<1x64x60xf32>, %{{.*}}: memref<1x64x64xf64>, %{{.*}}: memref<1x4xf32>, %{{.*}}: memref<1xf32>, %{{.*}}: index) group_size = 256 {
// CHECK:        scf.if
// CHECK:          ttile.alloc_shared : memref<16x65xf64, #tessera.smem>
// CHECK-NEXT:     ttile.alloc_shared : memref<2x16x16xf64, #tessera.smem>
// CHECK-NEXT:     ttile.alloc_shared : memref<2x16x16xf64, #tessera.smem>
// CHECK:          ttile.barrier
// CHECK:          math.fma %{{.*}}, %{{.*}}, %{{.*}} : f64
// CHECK:          ttile.reduce %{{.*}} kind = max scope = group : f32
// CHECK:      ttile.kernel @f_svd_check_0(%{{.*}}: memref<1x4xf32>, %{{.*}}: memref<1xf32>) group_size = 64 {
// CHECK:      ttile.kernel @f_svd_norm_0(
// CHECK:      ttile.kernel @f_svd_place_0(
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_svd_init_0({{.*}}) grid = [64, 1, 1]
// CHECK:        %[[S0:.*]] = arith.constant 0 : index
// CHECK-NEXT:   ttile.launch @f_svd_block_step_0(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[S0]]) grid = [4, 1, 1]
// CHECK-COUNT-6: ttile.launch @f_svd_block_step_0(
// CHECK-NEXT:   ttile.launch @f_svd_check_0({{.*}}) grid = [1, 1, 1]
// CHECK-NEXT:   ttile.launch @f_svd_block_step_0(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[S0]]) grid = [4, 1, 1]
// CHECK:        ttile.launch @f_svd_check_0(
// CHECK:        ttile.launch @f_svd_norm_0({{.*}}) grid = [64, 1, 1]
// CHECK-NEXT:   ttile.launch @f_svd_place_0({{.*}}) grid = [50, 1, 1]
// CHECK-NEXT:   func.return

// f64: a tile per column pair (a Gram matrix in f64 would square the condition number of
// f64 data): 49 steps a sweep of 25 tiles.
func.func @d(%a: tensor<60x50xf64>) -> (tensor<60x50xf64>, tensor<50xf64>, tensor<50x50xf64>) {
  %0, %1, %2 = tgraph.svd %a : (tensor<60x50xf64>) -> (tensor<60x50xf64>, tensor<50xf64>, tensor<50x50xf64>)
  func.return %0, %1, %2 : tensor<60x50xf64>, tensor<50xf64>, tensor<50x50xf64>
}
// CHECK:      ttile.kernel @d_svd_init_0(%{{.*}}: memref<1x50x60xf64>, %{{.*}}: memref<1x50x50xf64>, %{{.*}}: memref<1x25xf32>, %{{.*}}: memref<1xf32>, %{{.*}}: memref<60x50xf64>) group_size = 64 {
// CHECK:      ttile.kernel @d_svd_step_0(%{{.*}}: memref<1x50x60xf64>, %{{.*}}: memref<1x50x50xf64>, %{{.*}}: memref<1x25xf32>, %{{.*}}: memref<1xf32>, %{{.*}}: index) group_size = 64 {
// CHECK:        scf.if
// CHECK:          ttile.reduce %{{.*}} kind = sum scope = group : f64
// CHECK-NEXT:     ttile.reduce %{{.*}} kind = sum scope = group : f64
// CHECK-NEXT:     ttile.reduce %{{.*}} kind = sum scope = group : f64
// CHECK:          scf.if
// CHECK:      ttile.kernel @d_svd_check_0(%{{.*}}: memref<1x25xf32>, %{{.*}}: memref<1xf32>) group_size = 64 {
// CHECK:        ttile.reduce %{{.*}} kind = max scope = group : f32
// CHECK:      func.func @d(
// CHECK:        ttile.launch @d_svd_init_0({{.*}}) grid = [50, 1, 1]
// CHECK:        %[[D0:.*]] = arith.constant 0 : index
// CHECK-NEXT:   ttile.launch @d_svd_step_0(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[D0]]) grid = [25, 1, 1]
// CHECK-COUNT-48: ttile.launch @d_svd_step_0(
// CHECK-NEXT:   ttile.launch @d_svd_check_0({{.*}}) grid = [1, 1, 1]
// CHECK-NEXT:   ttile.launch @d_svd_step_0(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[D0]]) grid = [25, 1, 1]
// CHECK:        ttile.launch @d_svd_norm_0({{.*}}) grid = [50, 1, 1]
// CHECK-NEXT:   ttile.launch @d_svd_place_0({{.*}}) grid = [50, 1, 1]
// CHECK-NEXT:   func.return
