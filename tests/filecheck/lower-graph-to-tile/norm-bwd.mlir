// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// The norm gradients are one kernel each: on register rows (768 bf16, a warp per row)
// dy and x are read once as 16-byte vectors, the row's mean and rstd once per row, the
// two row sums (one for rmsnorm) are warp reductions, and dx is written once; rows past
// the registers (40000 f32) take the strided kernel.

func.func @f(%dy: tensor<6x768xbf16>, %x: tensor<6x768xbf16>, %m: tensor<6x1xf32>, %r: tensor<6x1xf32>, %w: tensor<768xbf16>, %z: tensor<3x40000xf32>, %zr: tensor<3x1xf32>) -> (tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<3x40000xf32>) {
  %0 = tgraph.layernorm_bwd %dy, %x, %m, %r weight %w : tensor<768xbf16> : (tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x1xf32>, tensor<6x1xf32>) -> tensor<6x768xbf16>
  %1 = tgraph.rmsnorm_bwd %dy, %x, %r : (tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x1xf32>) -> tensor<6x768xbf16>
  %2 = tgraph.rmsnorm_bwd %z, %z, %zr : (tensor<3x40000xf32>, tensor<3x40000xf32>, tensor<3x1xf32>) -> tensor<3x40000xf32>
  func.return %0, %1, %2 : tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<3x40000xf32>
}
// CHECK:      ttile.kernel @f_layernorm_bwd_0(%{{.*}}: memref<6x768xbf16>, %[[DY:.*]]: memref<6x768xbf16>, %[[X:.*]]: memref<6x768xbf16>, %[[M:.*]]: memref<6x1xf32>, %[[R:.*]]: memref<6x1xf32>, %{{.*}}: memref<768xbf16>) group_size = 128 {
// CHECK-COUNT-3: ttile.load_vector %[[X]]
// CHECK-COUNT-3: ttile.load_vector %[[DY]]
// CHECK:        ttile.load %[[R]]
// CHECK:        ttile.load %[[M]]
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK-NOT:    ttile.reduce
// CHECK-COUNT-3: ttile.store_vector %{{.*}} : vector<8xbf16>, memref<6x768xbf16>
// CHECK:      ttile.kernel @f_rmsnorm_bwd_0(
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK-NOT:    ttile.reduce
// CHECK:        ttile.store_vector
// CHECK:      ttile.kernel @f_rmsnorm_bwd_1(%{{.*}}: memref<3x40000xf32>, %{{.*}}: memref<3x40000xf32>, %{{.*}}: memref<3x40000xf32>, %{{.*}}: memref<3x1xf32>) group_size = 128 {
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:        ttile.store %{{.*}} : f32, memref<3x40000xf32>
// CHECK:      func.func @f(
// CHECK-COUNT-3: ttile.launch
