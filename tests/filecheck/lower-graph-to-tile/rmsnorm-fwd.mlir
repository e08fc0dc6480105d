// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// tgraph.rmsnorm_fwd is one kernel: the register row kernel (a group of 128 threads
// per row of 2048 bf16, 16-byte vectors, no masks) writes the normalized row and, from
// the row's first lane, its rstd (one reduction: no mean); rows too long for the
// registers (40000 f32) take the strided kernel, which stores rstd the same way.

func.func @f(%x: tensor<6x2048xbf16>, %w: tensor<2048xbf16>, %z: tensor<3x40000xf32>) -> (tensor<6x2048xbf16>, tensor<6x1xf32>, tensor<3x40000xf32>, tensor<3x1xf32>) {
  %y, %r = tgraph.rmsnorm_fwd %x weight %w : tensor<2048xbf16> eps = 1.000000e-06 : tensor<6x2048xbf16> -> (tensor<6x2048xbf16>, tensor<6x1xf32>)
  %y2, %r2 = tgraph.rmsnorm_fwd %z eps = 1.000000e-05 : tensor<3x40000xf32> -> (tensor<3x40000xf32>, tensor<3x1xf32>)
  func.return %y, %r, %y2, %r2 : tensor<6x2048xbf16>, tensor<6x1xf32>, tensor<3x40000xf32>, tensor<3x1xf32>
}
// CHECK:      ttile.kernel @f_rmsnorm_fwd_0(%{{.*}}: memref<6x2048xbf16>, %{{.*}}: memref<6x2048xbf16>, %{{.*}}: memref<2048xbf16>, %[[RSTD:.*]]: memref<6x1xf32>) group_size = {{[0-9]+}} {
// CHECK:        ttile.load_vector %{{.*}} : memref<6x2048xbf16> -> vector<8xbf16>
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = {{warp|group}} : f32
// CHECK-NOT:    ttile.reduce
// CHECK:        ttile.store_vector %{{.*}} : vector<8xbf16>, memref<6x2048xbf16>
// CHECK:        ttile.store %{{.*}}, %[[RSTD]][%{{.*}}, %{{.*}}] mask %{{.*}} : f32, memref<6x1xf32>
// CHECK:      ttile.kernel @f_rmsnorm_fwd_1(%{{.*}}: memref<3x40000xf32>, %{{.*}}: memref<3x40000xf32>, %[[RSTD2:.*]]: memref<3x1xf32>) group_size = 128 {
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK-NOT:    ttile.reduce
// CHECK:        ttile.store %{{.*}}, %[[RSTD2]]{{.*}} : f32, memref<3x1xf32>
// CHECK:      func.func @f(
// CHECK-COUNT-2: ttile.launch
