// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// tgraph.row_moments is one register row kernel: each 49-element plane (a warp per row,
// four rows a tile) is read once as vectors, then two warp reductions (the sum for the
// mean, then the squared deviations from it); both results come from the row's first lane.

// CHECK:       ttile.kernel @planes_row_moments_0(%{{.*}}: memref<4x8xf32>, %{{.*}}: memref<4x8xf32>, %{{.*}}: memref<32x49xbf16>) group_size = 128 {
// CHECK-COUNT-1: ttile.load_vector
// CHECK:         ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK:         ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK-NOT:     ttile.load_vector
// CHECK:       func.func @planes
// CHECK:         ttile.launch @planes_row_moments_0(%{{.*}}, %{{.*}}, %{{.*}}) grid = [8, 1, 1]
func.func @planes(%x: tensor<4x8x7x7xbf16>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %m, %q = tgraph.row_moments %x dims = 2 : tensor<4x8x7x7xbf16> -> (tensor<4x8xf32>, tensor<4x8xf32>)
  func.return %m, %q : tensor<4x8xf32>, tensor<4x8xf32>
}

// Rows past the registers (2^16 elements and up) take the strided kernel: a tile per row,
// two passes over it (a group-wide sum for the mean, then for the squared deviations).
// CHECK:       ttile.kernel @long_row_moments_0(%{{.*}}: memref<2xf32>, %{{.*}}: memref<2xf32>, %{{.*}}: memref<2x65537xbf16>) group_size = 128 {
// CHECK:         scf.for
// CHECK:         ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:         scf.for
// CHECK:         ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:       func.func @long
// CHECK:         ttile.launch @long_row_moments_0(%{{.*}}, %{{.*}}, %{{.*}}) grid = [2, 1, 1]
func.func @long(%x: tensor<2x65537xbf16>) -> (tensor<2xf32>, tensor<2xf32>) {
  %m, %q = tgraph.row_moments %x dims = 1 : tensor<2x65537xbf16> -> (tensor<2xf32>, tensor<2xf32>)
  func.return %m, %q : tensor<2xf32>, tensor<2xf32>
}
