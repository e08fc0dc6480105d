// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// One tile per row; lanes stride over the row, accumulate in f32 and combine with
// ttile.reduce (warp scope for rows of <= 32 elements, group scope otherwise).

func.func @f(%x: tensor<5x300xbf16>, %y: tensor<4x7xf32>) -> (tensor<5xbf16>, tensor<4x1xf32>, tensor<5x300xbf16>) {
  %0 = tgraph.sum %x axes = [1] : (tensor<5x300xbf16>) -> tensor<5xbf16>
  %1 = tgraph.max %y axes = [-1] keepdims : (tensor<4x7xf32>) -> tensor<4x1xf32>
  %2 = tgraph.softmax %x axis = -1 : (tensor<5x300xbf16>) -> tensor<5x300xbf16>
  func.return %0, %1, %2 : tensor<5xbf16>, tensor<4x1xf32>, tensor<5x300xbf16>
}
// CHECK:      ttile.kernel @f_sum_0(%{{.*}}: memref<5xbf16>, %{{.*}}: memref<5x300xbf16>) group_size = 128 {
// CHECK:        %[[ACC:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// CHECK:          ttile.load %{{.*}}[%{{.*}}, %{{.*}}] mask %{{.*}} : memref<5x300xbf16> -> bf16
// CHECK:          arith.addf
// CHECK:        %[[T:.*]] = ttile.reduce %[[ACC]] kind = sum scope = group : f32
// CHECK:        %[[B:.*]] = arith.truncf %[[T]] : f32 to bf16
// CHECK:        ttile.store %[[B]], %{{.*}}[%{{.*}}] mask %{{.*}} : bf16, memref<5xbf16>
// CHECK:      ttile.kernel @f_max_0(%{{.*}}: memref<4x1xf32>, %{{.*}}: memref<4x7xf32>) group_size = 32 {
// CHECK:        arith.constant 0xff800000 : f32
// CHECK:        arith.maximumf
// CHECK:        ttile.reduce %{{.*}} kind = max scope = warp : f32
// CHECK:      ttile.kernel @f_softmax_0(%{{.*}}: memref<5x300xbf16>, %{{.*}}: memref<5x300xbf16>) group_size = 128 {
// CHECK:        ttile.load_vector %{{.*}} : memref<5x300xbf16> -> vector<4xbf16>
// CHECK:        ttile.reduce %{{.*}} kind = max scope = warp : f32
// CHECK:        math.exp2
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = warp : f32
// CHECK:        ttile.store_vector
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_sum_0(%{{.*}}, %x) grid = [5, 1, 1]
// CHECK:        ttile.launch @f_max_0(%{{.*}}, %y) grid = [4, 1, 1]
// CHECK:        ttile.launch @f_softmax_0(%{{.*}}, %x) grid = [2, 1, 1]
