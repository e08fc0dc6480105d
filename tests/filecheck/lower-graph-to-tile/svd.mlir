// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// svd of small matrices (min(m, n) <= 32, working copies within 40 KB): one tile per
// matrix with W^T and V^T (f64) in shared memory; a sweep is K - 1 round-robin steps,
// one warp per pair (three warp reductions, the rotation in f64), a barrier per step,
// a tile-wide max of the "rotated" flags per sweep (at most 30 sweeps); then norms,
// ranks and the outputs. Wide matrices work on A^T. Larger k (33..48 here) keep the
// one-tile kernel in global memory: pairs in row-cyclic order, three tile-wide
// reductions per pair (128 lanes).

func.func @f(%b: tensor<6x4xf64>, %c: tensor<3x40xf32>, %d: tensor<40x36xf32>) -> (tensor<6x4xf64>, tensor<4xf64>, tensor<4x4xf64>, tensor<3x3xf32>, tensor<3xf32>, tensor<3x40xf32>, tensor<40x36xf32>, tensor<36xf32>, tensor<36x36xf32>) {
  %1, %2, %3 = tgraph.svd %b : (tensor<6x4xf64>) -> (tensor<6x4xf64>, tensor<4xf64>, tensor<4x4xf64>)
  %4, %5, %6 = tgraph.svd %c : (tensor<3x40xf32>) -> (tensor<3x3xf32>, tensor<3xf32>, tensor<3x40xf32>)
  %7, %8, %9 = tgraph.svd %d : (tensor<40x36xf32>) -> (tensor<40x36xf32>, tensor<36xf32>, tensor<36x36xf32>)
  func.return %1, %2, %3, %4, %5, %6, %7, %8, %9 : tensor<6x4xf64>, tensor<4xf64>, tensor<4x4xf64>, tensor<3x3xf32>, tensor<3xf32>, tensor<3x40xf32>, tensor<40x36xf32>, tensor<36xf32>, tensor<36x36xf32>
}
// CHECK:      ttile.kernel @f_svd_0(%{{.*}}: memref<6x4xf64>, %{{.*}}: memref<4xf64>, %{{.*}}: memref<4x4xf64>, %{{.*}}: memref<6x4xf64>) group_size = 64 {
// CHECK:        ttile.alloc_shared : memref<4x6xf64, #tessera.smem>
// CHECK-NEXT:   ttile.alloc_shared : memref<4x4xf64, #tessera.smem>
// CHECK:        ttile.barrier
// CHECK:        scf.if %{{.*}} -> (i1) {
// CHECK:          ttile.reduce %{{.*}} kind = sum scope = warp : f64
// CHECK-NEXT:     ttile.reduce %{{.*}} kind = sum scope = warp : f64
// CHECK-NEXT:     ttile.reduce %{{.*}} kind = sum scope = warp : f64
// CHECK:          ttile.barrier
// CHECK:        ttile.reduce %{{.*}} kind = max scope = group : f32
// CHECK:      ttile.kernel @f_svd_1(%{{.*}}: memref<3x3xf32>, %{{.*}}: memref<3xf32>, %{{.*}}: memref<3x40xf32>, %{{.*}}: memref<3x40xf32>) group_size = 64 {
// CHECK:        ttile.alloc_shared : memref<4x40xf32, #tessera.smem>
// CHECK-NEXT:   ttile.alloc_shared : memref<4x4xf64, #tessera.smem>
// CHECK:          ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK:      ttile.kernel @f_svd_2(%{{.*}}: memref<40x36xf32>, %{{.*}}: memref<36xf32>, %{{.*}}: memref<36x36xf32>, %{{.*}}: memref<40x36xf32>, %{{.*}}: memref<40x36xf32>, %{{.*}}: memref<36x36xf32>, %{{.*}}: memref<36xf32>) group_size = 128 {
// CHECK:        scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (i1) {
// CHECK:          scf.if %{{.*}} -> (i1) {
// CHECK:            ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK-NEXT:       ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK-NEXT:       ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:      func.func @f(
// CHECK:        %[[U:.*]] = memref.alloc() : memref<6x4xf64>
// CHECK-NEXT:   %[[S:.*]] = memref.alloc() : memref<4xf64>
// CHECK-NEXT:   %[[VH:.*]] = memref.alloc() : memref<4x4xf64>
// CHECK-NEXT:   ttile.launch @f_svd_0(%[[U]], %[[S]], %[[VH]], %b) grid = [1, 1, 1]
// CHECK:        ttile.launch @f_svd_1({{.*}}, %c) grid = [1, 1, 1]
// CHECK:        memref.alloc() : memref<40x36xf32>
// CHECK:        ttile.launch @f_svd_2({{.*}}) grid = [1, 1, 1]
