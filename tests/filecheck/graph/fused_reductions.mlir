// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s

// Batch norm's two backward statistics of one body: the reductions share the operands.
// CHECK-LABEL: func.func @bn_backward_sums
// CHECK:       %{{.*}}, %{{.*}} = tgraph.fused_reductions %dy, %x, %m : (tensor<4x8x7x7xf32>, tensor<4x8x7x7xbf16>, tensor<1x8x1x1xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
// CHECK:         tgraph.sum %{{.*}} axes = [2, 3] : (tensor<4x8x7x7xf32>) -> tensor<4x8xf32>
// CHECK:         tgraph.yield %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32>
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

// Different kinds over the same rows, kept dims.
// CHECK-LABEL: func.func @max_and_mean
// CHECK:       tgraph.fused_reductions %a : (tensor<6x10xf32>) -> (tensor<6x1xf32>, tensor<6x1xf32>)
// CHECK:         tgraph.max %{{.*}} axes = [1] keepdims
// CHECK:         tgraph.mean %{{.*}} axes = [1] keepdims
func.func @max_and_mean(%a: tensor<6x10xf32>) -> (tensor<6x1xf32>, tensor<6x1xf32>) {
  %mx, %mn = tgraph.fused_reductions %a : (tensor<6x10xf32>) -> (tensor<6x1xf32>, tensor<6x1xf32>) {
  ^bb0(%0: tensor<6x10xf32>):
    %1 = tgraph.max %0 axes = [1] keepdims : (tensor<6x10xf32>) -> tensor<6x1xf32>
    %2 = tgraph.mean %0 axes = [1] keepdims : (tensor<6x10xf32>) -> tensor<6x1xf32>
    tgraph.yield %1, %2 : tensor<6x1xf32>, tensor<6x1xf32>
  }
  func.return %mx, %mn : tensor<6x1xf32>, tensor<6x1xf32>
}
