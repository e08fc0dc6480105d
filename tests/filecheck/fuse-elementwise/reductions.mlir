// RUN: tessera-opt %s -p fuse-elementwise | filecheck %s
// RUN: tessera-opt %s -p 'fuse-elementwise{merge-reductions=false}' | filecheck %s --check-prefix=OFF

// A reduction of a reduction of the same kind over a trailing (row) or leading (column)
// block of dims is one reduction over both sets of axes.
func.func @rows(%x: tensor<4x8x5x6xf32>) -> tensor<4xf32> {
  %0 = tgraph.sum %x axes = [2, 3] : (tensor<4x8x5x6xf32>) -> tensor<4x8xf32>
  %1 = tgraph.sum %0 axes = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
// CHECK-LABEL: func.func @rows
// CHECK-NEXT:    %[[S:.*]] = tgraph.sum %x axes = [1, 2, 3] : (tensor<4x8x5x6xf32>) -> tensor<4xf32>
// CHECK-NEXT:    func.return %[[S]]
// OFF-LABEL:   func.func @rows
// OFF:           tgraph.sum %x axes = [2, 3]
// OFF:           tgraph.sum %{{.*}} axes = [1]

// Batch norm's statistics, sum over [2, 3] then [0], keep the channels in the middle:
// not merged (one reduction over [0, 2, 3] reads strided runs).
func.func @stats(%x: tensor<4x8x5x6xf32>) -> tensor<8xf32> {
  %0 = tgraph.sum %x axes = [2, 3] : (tensor<4x8x5x6xf32>) -> tensor<4x8xf32>
  %1 = tgraph.sum %0 axes = [0] : (tensor<4x8xf32>) -> tensor<8xf32>
  func.return %1 : tensor<8xf32>
}
// CHECK-LABEL: func.func @stats
// CHECK-NEXT:    %[[A:.*]] = tgraph.sum %x axes = [2, 3]
// CHECK-NEXT:    tgraph.sum %[[A]] axes = [0]

// The inner reduction may close a fused body, with keepdims on both: the merged sum
// keeps them.
func.func @fused_keepdims(%x: tensor<4x8x5x6xf32>, %m: tensor<4x8x1x1xf32>) -> tensor<1x1x1x1xf32> {
  %d = tgraph.sub %x, %m : (tensor<4x8x5x6xf32>, tensor<4x8x1x1xf32>) -> tensor<4x8x5x6xf32>
  %sq = tgraph.mul %d, %d : (tensor<4x8x5x6xf32>, tensor<4x8x5x6xf32>) -> tensor<4x8x5x6xf32>
  %0 = tgraph.sum %sq axes = [2, 3] keepdims : (tensor<4x8x5x6xf32>) -> tensor<4x8x1x1xf32>
  %1 = tgraph.sum %0 axes = [0, 1] keepdims : (tensor<4x8x1x1xf32>) -> tensor<1x1x1x1xf32>
  func.return %1 : tensor<1x1x1x1xf32>
}
// CHECK-LABEL: func.func @fused_keepdims
// CHECK-NEXT:    %[[F:.*]] = tgraph.fused %x, %m : (tensor<4x8x5x6xf32>, tensor<4x8x1x1xf32>) -> tensor<1x1x1x1xf32> {
// CHECK:           tgraph.sub
// CHECK:           tgraph.mul
// CHECK:           %[[S:.*]] = tgraph.sum %{{.*}} axes = [0, 1, 2, 3] keepdims : (tensor<4x8x5x6xf32>) -> tensor<1x1x1x1xf32>
// CHECK-NEXT:      tgraph.yield %[[S]]
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]]

// Different keepdims: the merged reduction is reshaped to the outer result's shape.
// max of max merges; the outer axes count the inner result's dims.
func.func @mixed(%x: tensor<4x8x6xf32>) -> (tensor<4x1xf32>, tensor<f32>) {
  %0 = tgraph.sum %x axes = [2] : (tensor<4x8x6xf32>) -> tensor<4x8xf32>
  %1 = tgraph.sum %0 axes = [1] keepdims : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %2 = tgraph.max %x axes = [1] keepdims : (tensor<4x8x6xf32>) -> tensor<4x1x6xf32>
  %3 = tgraph.max %2 axes = [] : (tensor<4x1x6xf32>) -> tensor<f32>
  func.return %1, %3 : tensor<4x1xf32>, tensor<f32>
}
// CHECK-LABEL: func.func @mixed
// CHECK-NEXT:    %[[S:.*]] = tgraph.sum %x axes = [1, 2] keepdims : (tensor<4x8x6xf32>) -> tensor<4x1x1xf32>
// CHECK-NEXT:    %[[R:.*]] = tgraph.reshape %[[S]] : (tensor<4x1x1xf32>) -> tensor<4x1xf32>
// CHECK-NEXT:    %[[M:.*]] = tgraph.max %x axes = [0, 1, 2] : (tensor<4x8x6xf32>) -> tensor<f32>
// CHECK-NEXT:    func.return %[[R]], %[[M]]

// Not merged: an inner result with another user, reductions of different kinds.
func.func @kept(%x: tensor<4x8xf32>) -> (tensor<f32>, tensor<4xf32>, tensor<f32>) {
  %0 = tgraph.sum %x axes = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
  %1 = tgraph.sum %0 axes = [0] : (tensor<4xf32>) -> tensor<f32>
  %2 = tgraph.max %x axes = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
  %3 = tgraph.sum %2 axes = [0] : (tensor<4xf32>) -> tensor<f32>
  func.return %1, %0, %3 : tensor<f32>, tensor<4xf32>, tensor<f32>
}
// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    %[[A:.*]] = tgraph.sum %x axes = [1]
// CHECK-NEXT:    tgraph.sum %[[A]] axes = [0]
// CHECK-NEXT:    %[[B:.*]] = tgraph.max %x axes = [1]
// CHECK-NEXT:    tgraph.sum %[[B]] axes = [0]
