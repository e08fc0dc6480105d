// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// tgraph.layernorm_fwd is one kernel: the register row kernel (a warp per row of 768
// bf16, 16-byte vectors) writes the normalized row and, from the row's first lane,
// its mean and rstd; rows too long for the registers (40000 f32) take the strided
// kernel, which stores the statistics the same way.

func.func @f(%x: tensor<6x768xbf16>, %w: tensor<768xbf16>, %b: tensor<768xbf16>, %z: tensor<3x40000xf32>) -> (tensor<6x768xbf16>, tensor<6x1xf32>, tensor<6x1xf32>, tensor<3x40000xf32>, tensor<3x1xf32>, tensor<3x1xf32>) {
  %y, %m, %r = tgraph.layernorm_fwd %x weight %w : tensor<768xbf16> bias %b : tensor<768xbf16> eps = 1.000000e-05 : tensor<6x768xbf16> -> (tensor<6x768xbf16>, tensor<6x1xf32>, tensor<6x1xf32>)
  %y2, %m2, %r2 = tgraph.layernorm_fwd %z eps = 1.000000e-05 : tensor<3x40000xf32> -> (tensor<3x40000xf32>, tensor<3x1xf32>, tensor<3x1xf32>)
  func.return %y, %m, %r, %y2, %m2, %r2 : tensor<6x768xbf16>, tensor<6x1xf32>, tensor<6x1xf32>, tensor<3x40000xf32>, tensor<3x1xf32>, tensor<3x1xf32>
}
// CHECK:      ttile.kernel @f_layernorm_fwd_0(%{{.*}}: memref<6x768xbf16>, %{{.*}}: memref<6x768xbf16>, %{{.*}}: memref<768xbf16>, %{{.*}}: memref<768xbf16>, %[[MEAN:.*]]: memref<6x1xf32>, %[[RSTD:.*]]: memref<6x1xf32>) group_size = 128 {
// CHECK-COUNT-3: ttile.load_vector %{{.*}} mask %{{.*}} : memref<6x768xbf16> -> vector<8xbf16>
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK-COUNT-3: ttile.store_vector %{{.*}} : vector<8xbf16>, memref<6x768xbf16>
// CHECK:        ttile.store %{{.*}}, %[[MEAN]][%{{.*}}, %{{.*}}] mask %{{.*}} : f32, memref<6x1xf32>
// CHECK:        ttile.store %{{.*}}, %[[RSTD]][%{{.*}}, %{{.*}}] mask %{{.*}} : f32, memref<6x1xf32>
// CHECK:      ttile.kernel @f_layernorm_fwd_1(%{{.*}}: memref<3x40000xf32>, %{{.*}}: memref<3x40000xf32>, %{{.*}}: memref<3x1xf32>, %{{.*}}: memref<3x1xf32>) group_size = 128 {
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:        ttile.store %{{.*}} : f32, memref<3x1xf32>
// CHECK:        ttile.store %{{.*}} : f32, memref<3x1xf32>
// CHECK:      func.func @f(
// CHECK-COUNT-2: ttile.launch
