// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// svd: one-sided Jacobi, one tile per matrix. Scratch buffers W (A, or A^T for wide
// matrices), V and the column norms are allocated by the host. Sweeps are a uniform
// scf.for (at most 30) carrying a "converged" flag; a sweep visits the pairs p < q
// in row-cyclic order, three ttile.reduce per pair (warp scope for columns of <= 32
// elements, else the whole tile of 128 lanes), then norms, a barrier, and the columns
// written in order of descending singular value.

func.func @f(%b: tensor<6x4xf64>, %c: tensor<3x40xf32>) -> (tensor<6x4xf64>, tensor<4xf64>, tensor<4x4xf64>, tensor<3x3xf32>, tensor<3xf32>, tensor<3x40xf32>) {
  %1, %2, %3 = tgraph.svd %b : (tensor<6x4xf64>) -> (tensor<6x4xf64>, tensor<4xf64>, tensor<4x4xf64>)
  %4, %5, %6 = tgraph.svd %c : (tensor<3x40xf32>) -> (tensor<3x3xf32>, tensor<3xf32>, tensor<3x40xf32>)
  func.return %1, %2, %3, %4, %5, %6 : tensor<6x4xf64>, tensor<4xf64>, tensor<4x4xf64>, tensor<3x3xf32>, tensor<3xf32>, tensor<3x40xf32>
}
// CHECK:      ttile.kernel @f_svd_0(%{{.*}}: memref<6x4xf64>, %{{.*}}: memref<4xf64>, %{{.*}}: memref<4x4xf64>, %{{.*}}: memref<6x4xf64>, %{{.*}}: memref<6x4xf64>, %{{.*}}: memref<4x4xf64>, %{{.*}}: memref<4xf64>) group_size = 32 {
// CHECK:        scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (i1) {
// CHECK:          scf.if %{{.*}} -> (i1) {
// CHECK:            scf.for {{.*}} -> (i1) {
// CHECK:              scf.for {{.*}} -> (i1) {
// CHECK:                ttile.reduce %{{.*}} kind = sum scope = warp : f64
// CHECK-NEXT:           ttile.reduce %{{.*}} kind = sum scope = warp : f64
// CHECK-NEXT:           ttile.reduce %{{.*}} kind = sum scope = warp : f64
// CHECK:                math.absf
// CHECK:                math.sqrt
// CHECK:                arith.ori
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = warp : f64
// CHECK-NEXT:   math.sqrt
// CHECK:        ttile.barrier
// CHECK:        scf.for
// CHECK:          scf.for {{.*}} -> (index) {
// CHECK:        ttile.return
// CHECK:      ttile.kernel @f_svd_1(%{{.*}}: memref<3x3xf32>, %{{.*}}: memref<3xf32>, %{{.*}}: memref<3x40xf32>, %{{.*}}: memref<3x40xf32>, %{{.*}}: memref<40x3xf32>, %{{.*}}: memref<3x3xf32>, %{{.*}}: memref<3xf32>) group_size = 128 {
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:      func.func @f(
// CHECK:        %[[U:.*]] = memref.alloc() : memref<6x4xf64>
// CHECK-NEXT:   %[[S:.*]] = memref.alloc() : memref<4xf64>
// CHECK-NEXT:   %[[VH:.*]] = memref.alloc() : memref<4x4xf64>
// CHECK-NEXT:   %[[W:.*]] = memref.alloc() : memref<6x4xf64>
// CHECK-NEXT:   %[[V:.*]] = memref.alloc() : memref<4x4xf64>
// CHECK-NEXT:   %[[N:.*]] = memref.alloc() : memref<4xf64>
// CHECK-NEXT:   ttile.launch @f_svd_0(%[[U]], %[[S]], %[[VH]], %b, %[[W]], %[[V]], %[[N]]) grid = [1, 1, 1]
// CHECK:        memref.alloc() : memref<40x3xf32>
// CHECK:        ttile.launch @f_svd_1({{.*}}) grid = [1, 1, 1]
