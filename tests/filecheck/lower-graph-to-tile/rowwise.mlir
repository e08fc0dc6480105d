// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// Last-axis softmax, rmsnorm and layernorm keep each lane's share of a row in
// registers: 16-byte vector loads and stores, one warp per row for rows of <= 1024
// elements (4 rows per tile), one tile per row otherwise. Softmax over another axis
// keeps the strided kernel.

func.func @f(%x: tensor<6x8192xbf16>, %w: tensor<8192xbf16>, %y: tensor<9x256xf32>, %z: tensor<4x6xf32>) -> (tensor<6x8192xbf16>, tensor<6x8192xbf16>, tensor<9x256xf32>, tensor<4x6xf32>) {
  %0 = tgraph.softmax %x axis = -1 : (tensor<6x8192xbf16>) -> tensor<6x8192xbf16>
  %1 = tgraph.rmsnorm %x weight %w : tensor<8192xbf16> eps = 1.000000e-06 : tensor<6x8192xbf16> -> tensor<6x8192xbf16>
  %2 = tgraph.layernorm %y eps = 1.000000e-05 : tensor<9x256xf32> -> tensor<9x256xf32>
  %3 = tgraph.softmax %z axis = 0 : (tensor<4x6xf32>) -> tensor<4x6xf32>
  func.return %0, %1, %2, %3 : tensor<6x8192xbf16>, tensor<6x8192xbf16>, tensor<9x256xf32>, tensor<4x6xf32>
}
// CHECK:      ttile.kernel @f_softmax_0(%{{.*}}: memref<6x8192xbf16>, %{{.*}}: memref<6x8192xbf16>) group_size = 512 {
// CHECK:        ttile.load_vector %{{.*}} : memref<6x8192xbf16> -> vector<8xbf16>
// CHECK:        ttile.load_vector %{{.*}} : memref<6x8192xbf16> -> vector<8xbf16>
// CHECK-NOT:    ttile.load_vector
// CHECK:        ttile.reduce %{{.*}} kind = max scope = group : f32
// CHECK-NOT:    ttile.load
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK-NOT:    ttile.load
// CHECK:        ttile.store_vector %{{.*}} : vector<8xbf16>, memref<6x8192xbf16>
// CHECK:        ttile.store_vector %{{.*}} : vector<8xbf16>, memref<6x8192xbf16>
// CHECK-NEXT:   ttile.return
// CHECK:      ttile.kernel @f_rmsnorm_0(%{{.*}}: memref<6x8192xbf16>, %{{.*}}: memref<6x8192xbf16>, %{{.*}}: memref<8192xbf16>) group_size = 512 {
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:        math.rsqrt
// CHECK:        ttile.load_vector %{{.*}} : memref<8192xbf16> -> vector<8xbf16>
// CHECK:        ttile.store_vector %{{.*}} : vector<8xbf16>, memref<6x8192xbf16>
// CHECK:      ttile.kernel @f_layernorm_0(%{{.*}}: memref<9x256xf32>, %{{.*}}: memref<9x256xf32>) group_size = 128 {
// CHECK:        ttile.warp_id
// CHECK:        ttile.load_vector %{{.*}} mask %{{.*}} : memref<9x256xf32> -> vector<4xf32>
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK:      ttile.kernel @f_softmax_1(%{{.*}}: memref<4x6xf32>, %{{.*}}: memref<4x6xf32>) group_size = 32 {
// CHECK:        scf.for
// CHECK:        ttile.reduce %{{.*}} kind = max scope = warp : f32
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_softmax_0(%{{.*}}, %x) grid = [6, 1, 1]
// CHECK:        ttile.launch @f_rmsnorm_0(%{{.*}}, %x, %w) grid = [6, 1, 1]
// CHECK:        ttile.launch @f_layernorm_0(%{{.*}}, %y) grid = [3, 1, 1]
// CHECK:        ttile.launch @f_softmax_1(%{{.*}}, %z) grid = [6, 1, 1]
