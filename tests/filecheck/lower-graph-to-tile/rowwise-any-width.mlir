// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// Rows of any width. A ragged row (1001 bf16: not a multiple of 8) keeps 16-byte
// chunks from its first aligned element, (-row * n) mod 8, and reads the head and
// tail one element per lane. Rows past the registers stream: with few rows (2 x
// 50257) each row is split over tiles, a statistics kernel writing per-segment
// (max, sum) to a [rows, segments, 2] scratch buffer and a second kernel combining
// them (ttile.reduce, fixed order) before writing; with enough rows (300 x 40000)
// one tile per row loops over the row twice (1024 lanes: a row of 160 KB).

func.func @f(%x: tensor<6x1001xbf16>, %y: tensor<2x50257xbf16>, %z: tensor<300x40000xf32>, %w: tensor<40000xf32>) -> (tensor<6x1001xbf16>, tensor<2x50257xbf16>, tensor<300x40000xf32>) {
  %0 = tgraph.softmax %x axis = -1 : (tensor<6x1001xbf16>) -> tensor<6x1001xbf16>
  %1 = tgraph.softmax %y axis = -1 : (tensor<2x50257xbf16>) -> tensor<2x50257xbf16>
  %2 = tgraph.rmsnorm %z weight %w : tensor<40000xf32> eps = 1.000000e-06 : tensor<300x40000xf32> -> tensor<300x40000xf32>
  func.return %0, %1, %2 : tensor<6x1001xbf16>, tensor<2x50257xbf16>, tensor<300x40000xf32>
}
// CHECK:      ttile.kernel @f_softmax_0(%{{.*}}: memref<6x1001xbf16>, %{{.*}}: memref<6x1001xbf16>) group_size = 128 {
// CHECK:        arith.andi
// CHECK:        ttile.load_vector %{{.*}} mask %{{.*}} : memref<6x1001xbf16> -> vector<8xbf16>
// CHECK:        ttile.load %{{.*}} mask %{{.*}} : memref<6x1001xbf16> -> bf16
// CHECK:        ttile.reduce %{{.*}} kind = max scope = warp : f32
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK:        ttile.store_vector %{{.*}} : vector<8xbf16>, memref<6x1001xbf16>
// CHECK:        ttile.store %{{.*}} : bf16, memref<6x1001xbf16>
// CHECK:      ttile.kernel @f_softmax_stats_0(%{{.*}}: memref<2x2x2xf32>, %{{.*}}: memref<2x50257xbf16>) group_size = 512 {
// CHECK:        scf.for
// CHECK-COUNT-4: ttile.load_vector %{{.*}} : memref<2x50257xbf16> -> vector<8xbf16>
// CHECK:        ttile.reduce %{{.*}} kind = max scope = group : f32
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:        ttile.store %{{.*}} : f32, memref<2x2x2xf32>
// CHECK:      ttile.kernel @f_softmax_1(%{{.*}}: memref<2x2x2xf32>, %{{.*}}: memref<2x50257xbf16>, %{{.*}}: memref<2x50257xbf16>) group_size = 512 {
// CHECK:        ttile.load %{{.*}} other %{{.*}} : memref<2x2x2xf32> -> f32
// CHECK:        ttile.reduce %{{.*}} kind = max scope = group : f32
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:        scf.for
// CHECK:        ttile.store_vector %{{.*}} : vector<8xbf16>, memref<2x50257xbf16>
// CHECK:      ttile.kernel @f_rmsnorm_0(%{{.*}}: memref<300x40000xf32>, %{{.*}}: memref<300x40000xf32>, %{{.*}}: memref<40000xf32>) group_size = 1024 {
// CHECK:        scf.for
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:        math.rsqrt
// CHECK:        scf.for
// CHECK:        ttile.load_vector %{{.*}} mask %{{.*}} : memref<40000xf32> -> vector<4xf32>
// CHECK:        ttile.store_vector %{{.*}} : vector<4xf32>, memref<300x40000xf32>
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_softmax_0(%{{.*}}, %x) grid = [2, 1, 1]
// CHECK:        %[[P:.*]] = memref.alloc() : memref<2x2x2xf32>
// CHECK:        ttile.launch @f_softmax_stats_0(%[[P]], %y) grid = [4, 1, 1]
// CHECK-NEXT:   ttile.launch @f_softmax_1(%[[P]], %{{.*}}, %y) grid = [4, 1, 1]
// CHECK:        ttile.launch @f_rmsnorm_0(%{{.*}}, %z, %w) grid = [300, 1, 1]
