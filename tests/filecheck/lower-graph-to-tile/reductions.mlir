// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// Reductions over the last axis of bf16/f16/f32 rows take the row kernels
// (tile_rowreduce): 16-byte vector loads (scalar edges on ragged rows), one warp per
// row for rows of <= 1024 elements, combined with ttile.reduce, accumulated in f32.
// Reductions over consecutive axes followed by a kept axis (here axis 0 of 300x5)
// take the column kernels (tile_colreduce): a warp's lanes read adjacent columns of
// one row, the 8 warps' partials combine through shared memory in warp order, and
// with several splits of the rows (2 here) a second kernel adds the splits' f32
// partials in split order. Other reductions (axes 0 and 2 of 4x5x6) keep the strided
// kernel: one tile per output element, lanes stride over the reduced elements and
// combine with ttile.reduce.

func.func @f(%x: tensor<5x300xbf16>, %y: tensor<4x7xf32>, %z: tensor<300x5xbf16>, %w: tensor<4x5x6xf32>) -> (tensor<5xbf16>, tensor<4x1xf32>, tensor<5x300xbf16>, tensor<5xbf16>, tensor<5xf32>) {
  %0 = tgraph.sum %x axes = [1] : (tensor<5x300xbf16>) -> tensor<5xbf16>
  %1 = tgraph.max %y axes = [-1] keepdims : (tensor<4x7xf32>) -> tensor<4x1xf32>
  %2 = tgraph.softmax %x axis = -1 : (tensor<5x300xbf16>) -> tensor<5x300xbf16>
  %3 = tgraph.sum %z axes = [0] : (tensor<300x5xbf16>) -> tensor<5xbf16>
  %4 = tgraph.sum %w axes = [0, 2] : (tensor<4x5x6xf32>) -> tensor<5xf32>
  func.return %0, %1, %2, %3, %4 : tensor<5xbf16>, tensor<4x1xf32>, tensor<5x300xbf16>, tensor<5xbf16>, tensor<5xf32>
}
// CHECK:      ttile.kernel @f_sum_0(%{{.*}}: memref<5xbf16>, %{{.*}}: memref<5x300xbf16>) group_size = 128 {
// CHECK:        ttile.load_vector %{{.*}} mask %{{.*}} : memref<5x300xbf16> -> vector<8xbf16>
// CHECK:        ttile.load %{{.*}} mask %{{.*}} : memref<5x300xbf16> -> bf16
// CHECK:        %[[T:.*]] = ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK:        %[[B:.*]] = arith.truncf %[[T]] : f32 to bf16
// CHECK:        ttile.store %[[B]], %{{.*}}[%{{.*}}] mask %{{.*}} : bf16, memref<5xbf16>
// CHECK:      ttile.kernel @f_max_0(%{{.*}}: memref<4x1xf32>, %{{.*}}: memref<4x7xf32>) group_size = 128 {
// CHECK:        ttile.load_vector %{{.*}} : memref<4x7xf32> -> vector<1xf32>
// CHECK:        arith.constant 0xff800000 : f32
// CHECK:        ttile.reduce %{{.*}} kind = max scope = warp : f32
// CHECK:        ttile.store %{{.*}} : f32, memref<4x1xf32>
// CHECK:      ttile.kernel @f_softmax_0(%{{.*}}: memref<5x300xbf16>, %{{.*}}: memref<5x300xbf16>) group_size = 128 {
// CHECK:        ttile.load_vector %{{.*}} : memref<5x300xbf16> -> vector<8xbf16>
// CHECK:        ttile.reduce %{{.*}} kind = max scope = warp : f32
// CHECK:        math.exp2
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK:        ttile.store_vector
// CHECK:      ttile.kernel @f_sum_part_0(%{{.*}}: memref<1x2x5xf32>, %{{.*}}: memref<300x5xbf16>) group_size = 256 {
// CHECK:        %[[ACC:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// CHECK:          ttile.load %{{.*}}[%{{.*}}, %{{.*}}] mask %{{.*}} : memref<300x5xbf16> -> bf16
// CHECK:          arith.addf
// CHECK:        %[[SM:.*]] = ttile.alloc_shared alignment = 16 : memref<8x32xf32, #tessera.smem>
// CHECK:        ttile.store %[[ACC]], %[[SM]]
// CHECK:        ttile.barrier
// CHECK:        scf.if
// CHECK-COUNT-8:  ttile.load %[[SM]]
// CHECK:          ttile.store %{{.*}} : f32, memref<1x2x5xf32>
// CHECK:      ttile.kernel @f_sum_1(%{{.*}}: memref<5xbf16>, %{{.*}}: memref<1x2x5xf32>) group_size = 256 {
// CHECK-COUNT-2: ttile.load %{{.*}} mask %{{.*}} : memref<1x2x5xf32> -> f32
// CHECK:        arith.truncf %{{.*}} : f32 to bf16
// CHECK:      ttile.kernel @f_sum_2(%{{.*}}: memref<5xf32>, %{{.*}}: memref<4x5x6xf32>) group_size = 32 {
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_sum_0(%{{.*}}, %x) grid = [2, 1, 1]
// CHECK:        ttile.launch @f_max_0(%{{.*}}, %y) grid = [1, 1, 1]
// CHECK:        ttile.launch @f_softmax_0(%{{.*}}, %x) grid = [2, 1, 1]
// CHECK:        ttile.launch @f_sum_part_0(%{{.*}}, %z) grid = [1, 2, 1]
// CHECK:        ttile.launch @f_sum_1(%{{.*}}, %{{.*}}) grid = [1, 1, 1]
// CHECK:        ttile.launch @f_sum_2(%{{.*}}, %w) grid = [5, 1, 1]

// Few reduced rows (grouped-query attention's head groups: 4): tile_colreduce's thin
// kernel, a lane per output element folding its 4 rows in order; grid [columns/256, A].
func.func @heads(%g: tensor<2x8x4x64x32xbf16>) -> tensor<2x8x64x32xbf16> {
  %0 = tgraph.sum %g axes = [2] : (tensor<2x8x4x64x32xbf16>) -> tensor<2x8x64x32xbf16>
  func.return %0 : tensor<2x8x64x32xbf16>
}
// CHECK:      ttile.kernel @heads_sum_0(%{{.*}}: memref<2x8x64x32xbf16>, %{{.*}}: memref<2x8x4x64x32xbf16>) group_size = 256 {
// CHECK-NOT:    ttile.barrier
// CHECK-COUNT-4: ttile.load %{{.*}} : memref<2x8x4x64x32xbf16> -> bf16
// CHECK:        ttile.store
// CHECK:      ttile.launch @heads_sum_0(%{{.*}}, %g) grid = [8, 16, 1]

// A plain column reduction whose kept columns are a multiple of a 16-byte vector takes
// tile_colreduce's vector kernel: the input viewed as [A, R, C], a lane reads 8 bf16
// columns of a row, 8 f32 partials per lane through shared memory.
func.func @cols(%x: tensor<300x64xbf16>) -> tensor<64xbf16> {
  %0 = tgraph.sum %x axes = [0] : (tensor<300x64xbf16>) -> tensor<64xbf16>
  func.return %0 : tensor<64xbf16>
}
// CHECK:      ttile.kernel @cols_sum_0(%{{.*}}: memref<1x64xbf16>, %{{.*}}: memref<1x300x64xbf16>) group_size = 256 {
// CHECK:        ttile.load_vector %{{.*}} mask %{{.*}} : memref<1x300x64xbf16> -> vector<8xbf16>
// CHECK:        ttile.alloc_shared alignment = 16 : memref<8x256xf32, #tessera.smem>
// CHECK:        ttile.barrier
// CHECK-COUNT-8: ttile.store %{{.*}} : bf16, memref<1x64xbf16>
// CHECK:      func.func @cols(
// CHECK:        memref.expand_shape
// CHECK:        ttile.launch @cols_sum_0(%{{.*}}, %{{.*}}) grid = [1, 1, 1]
