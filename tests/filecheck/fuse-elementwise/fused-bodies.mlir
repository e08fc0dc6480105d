// RUN: tessera-opt %s -p fuse-elementwise | filecheck %s

// The body of a fusion op is one kernel already: a fused_reductions body (elementwise ops
// feeding its reductions) is left as it is, so every yielded value stays a reduction.
func.func @bn_backward_sums(%dy: tensor<4x8x7x7xf32>, %x: tensor<4x8x7x7xbf16>, %m: tensor<1x8x1x1xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %s, %t = tgraph.fused_reductions %dy, %x, %m : (tensor<4x8x7x7xf32>, tensor<4x8x7x7xbf16>, tensor<1x8x1x1xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  ^bb0(%0: tensor<4x8x7x7xf32>, %1: tensor<4x8x7x7xbf16>, %2: tensor<1x8x1x1xf32>):
    %3 = tgraph.sum %0 axes = [2, 3] : (tensor<4x8x7x7xf32>) -> tensor<4x8xf32>
    %4 = tgraph.cast %1 : (tensor<4x8x7x7xbf16>) -> tensor<4x8x7x7xf32>
    %5 = tgraph.sub %4, %2 : (tensor<4x8x7x7xf32>, tensor<1x8x1x1xf32>) -> tensor<4x8x7x7xf32>
    %6 = tgraph.mul %0, %5 : (tensor<4x8x7x7xf32>, tensor<4x8x7x7xf32>) -> tensor<4x8x7x7xf32>
    %7 = tgraph.sum %6 axes = [2, 3] : (tensor<4x8x7x7xf32>) -> tensor<4x8xf32>
    tgraph.yield %3, %7 : tensor<4x8xf32>, tensor<4x8xf32>
  }
  func.return %s, %t : tensor<4x8xf32>, tensor<4x8xf32>
}
// CHECK-LABEL: func.func @bn_backward_sums
// CHECK:         tgraph.fused_reductions
// CHECK-NOT:     tgraph.fused
// CHECK:         %[[S:.*]] = tgraph.sum %0
// CHECK-NEXT:    tgraph.cast %1
// CHECK-NEXT:    tgraph.sub
// CHECK-NEXT:    tgraph.mul
// CHECK-NEXT:    %[[T:.*]] = tgraph.sum
// CHECK-NEXT:    tgraph.yield %[[S]], %[[T]]
