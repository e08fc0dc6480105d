// RUN: tessera-opt %s -p merge-sibling-reductions | filecheck %s

// Batch norm's backward: the sum of the relu backward and the sum of its product with
// x - mean reduce the same planes of shared tensors: one op reading y, dy and x once,
// with the relu backward computed once.
// CHECK-LABEL: func.func @backward_p0
// CHECK:       %[[M:.*]] = tgraph.reshape
// CHECK-NEXT:  %[[S:.*]], %[[T:.*]] = tgraph.fused_reductions %0, %1, %2, %[[M]]
// CHECK-COUNT-1: tgraph.select
// CHECK:       tgraph.yield
// CHECK-NOT:   tgraph.fused {{.*}}
// CHECK:       tgraph.sum %[[S]] axes = [0] keepdims
// CHECK:       tgraph.sum %[[T]] axes = [0] keepdims
func.func @backward_p0(%0: tensor<4x8x7x7xbf16>, %1: tensor<4x8x7x7xbf16>, %2: tensor<4x8x7x7xbf16>, %4: tensor<8xf32>) -> (tensor<1x8x1x1xf32>, tensor<1x8x1x1xf32>) {
    %6 = tgraph.reshape %4 : (tensor<8xf32>) -> tensor<1x8x1x1xf32>
    %7 = tgraph.fused %0, %1 : (tensor<4x8x7x7xbf16>, tensor<4x8x7x7xbf16>) -> tensor<4x8x1x1xf32> {
    ^bb0(%8: tensor<4x8x7x7xbf16>, %9: tensor<4x8x7x7xbf16>):
      %10 = tgraph.constant dense<0.000000e+00> : tensor<f64> -> tensor<bf16>
      %11 = tgraph.le %8, %10 : (tensor<4x8x7x7xbf16>, tensor<bf16>) -> tensor<4x8x7x7xi1>
      %12 = tgraph.select %11, %10, %9 : (tensor<4x8x7x7xi1>, tensor<bf16>, tensor<4x8x7x7xbf16>) -> tensor<4x8x7x7xbf16>
      %13 = tgraph.cast %12 : (tensor<4x8x7x7xbf16>) -> tensor<4x8x7x7xf32>
      %14 = tgraph.sum %13 axes = [2, 3] keepdims : (tensor<4x8x7x7xf32>) -> tensor<4x8x1x1xf32>
      tgraph.yield %14 : tensor<4x8x1x1xf32>
    }
    %8 = tgraph.sum %7 axes = [0] keepdims : (tensor<4x8x1x1xf32>) -> tensor<1x8x1x1xf32>
    %10 = tgraph.fused %2, %6, %0, %1 : (tensor<4x8x7x7xbf16>, tensor<1x8x1x1xf32>, tensor<4x8x7x7xbf16>, tensor<4x8x7x7xbf16>) -> tensor<4x8x1x1xf32> {
    ^bb0(%11: tensor<4x8x7x7xbf16>, %12: tensor<1x8x1x1xf32>, %13: tensor<4x8x7x7xbf16>, %14: tensor<4x8x7x7xbf16>):
      %15 = tgraph.cast %11 : (tensor<4x8x7x7xbf16>) -> tensor<4x8x7x7xf32>
      %16 = tgraph.sub %15, %12 : (tensor<4x8x7x7xf32>, tensor<1x8x1x1xf32>) -> tensor<4x8x7x7xf32>
      %17 = tgraph.constant dense<0.000000e+00> : tensor<f64> -> tensor<bf16>
      %18 = tgraph.le %13, %17 : (tensor<4x8x7x7xbf16>, tensor<bf16>) -> tensor<4x8x7x7xi1>
      %19 = tgraph.select %18, %17, %14 : (tensor<4x8x7x7xi1>, tensor<bf16>, tensor<4x8x7x7xbf16>) -> tensor<4x8x7x7xbf16>
      %20 = tgraph.cast %19 : (tensor<4x8x7x7xbf16>) -> tensor<4x8x7x7xf32>
      %21 = tgraph.mul %20, %16 : (tensor<4x8x7x7xf32>, tensor<4x8x7x7xf32>) -> tensor<4x8x7x7xf32>
      %22 = tgraph.sum %21 axes = [2, 3] keepdims : (tensor<4x8x7x7xf32>) -> tensor<4x8x1x1xf32>
      tgraph.yield %22 : tensor<4x8x1x1xf32>
    }
    %11 = tgraph.sum %10 axes = [0] keepdims : (tensor<4x8x1x1xf32>) -> tensor<1x8x1x1xf32>
    func.return %8, %11 : tensor<1x8x1x1xf32>, tensor<1x8x1x1xf32>
}

// The variance reads the mean of the first sum: it depends on it and stays apart.
// CHECK-LABEL: func.func @dependent
// CHECK-NOT:   tgraph.fused_reductions
func.func @dependent(%x: tensor<4x8x7x7xf32>) -> tensor<4x8x1x1xf32> {
  %s = tgraph.sum %x axes = [2, 3] keepdims : (tensor<4x8x7x7xf32>) -> tensor<4x8x1x1xf32>
  %v = tgraph.fused %x, %s : (tensor<4x8x7x7xf32>, tensor<4x8x1x1xf32>) -> tensor<4x8x1x1xf32> {
  ^bb0(%a: tensor<4x8x7x7xf32>, %b: tensor<4x8x1x1xf32>):
    %d = tgraph.sub %a, %b : (tensor<4x8x7x7xf32>, tensor<4x8x1x1xf32>) -> tensor<4x8x7x7xf32>
    %q = tgraph.mul %d, %d : (tensor<4x8x7x7xf32>, tensor<4x8x7x7xf32>) -> tensor<4x8x7x7xf32>
    %r = tgraph.sum %q axes = [2, 3] keepdims : (tensor<4x8x7x7xf32>) -> tensor<4x8x1x1xf32>
    tgraph.yield %r : tensor<4x8x1x1xf32>
  }
  func.return %v : tensor<4x8x1x1xf32>
}

// A plain sum and a fused sum of squares of one tensor merge (kinds may differ too).
// CHECK-LABEL: func.func @moments
// CHECK:       %{{.*}}, %{{.*}}, %{{.*}} = tgraph.fused_reductions %x
// CHECK:         tgraph.sum
// CHECK:         tgraph.max
// CHECK:         tgraph.sum
func.func @moments(%x: tensor<6x100xbf16>) -> (tensor<6xbf16>, tensor<6xbf16>, tensor<6xf32>) {
  %s = tgraph.sum %x axes = [1] : (tensor<6x100xbf16>) -> tensor<6xbf16>
  %m = tgraph.max %x axes = [1] : (tensor<6x100xbf16>) -> tensor<6xbf16>
  %q = tgraph.fused %x : (tensor<6x100xbf16>) -> tensor<6xf32> {
  ^bb0(%a: tensor<6x100xbf16>):
    %c = tgraph.cast %a : (tensor<6x100xbf16>) -> tensor<6x100xf32>
    %p = tgraph.mul %c, %c : (tensor<6x100xf32>, tensor<6x100xf32>) -> tensor<6x100xf32>
    %r = tgraph.sum %p axes = [1] : (tensor<6x100xf32>) -> tensor<6xf32>
    tgraph.yield %r : tensor<6xf32>
  }
  func.return %s, %m, %q : tensor<6xbf16>, tensor<6xbf16>, tensor<6xf32>
}

// Not merged: other axes, no tensor in common, a leading-dim (column) reduction, f64
// (accumulated in f64: no row kernel), and a reduction that one long row would split.
// CHECK-LABEL: func.func @apart
// CHECK-NOT:   tgraph.fused_reductions
// CHECK:       func.return
func.func @apart(%x: tensor<6x100xf32>, %y: tensor<6x100xf32>, %z: tensor<6x100xf64>, %w: tensor<1x1048576xf32>) -> (tensor<6xf32>, tensor<100xf32>, tensor<6xf32>, tensor<100xf32>, tensor<100xf32>, tensor<6xf64>, tensor<6xf64>, tensor<1xf32>, tensor<1xf32>) {
  %a = tgraph.sum %x axes = [1] : (tensor<6x100xf32>) -> tensor<6xf32>
  %b = tgraph.sum %x axes = [0] : (tensor<6x100xf32>) -> tensor<100xf32>
  %c = tgraph.sum %y axes = [1] : (tensor<6x100xf32>) -> tensor<6xf32>
  %d = tgraph.max %y axes = [0] : (tensor<6x100xf32>) -> tensor<100xf32>
  %e = tgraph.min %y axes = [0] : (tensor<6x100xf32>) -> tensor<100xf32>
  %f = tgraph.sum %z axes = [1] : (tensor<6x100xf64>) -> tensor<6xf64>
  %g = tgraph.max %z axes = [1] : (tensor<6x100xf64>) -> tensor<6xf64>
  %h = tgraph.sum %w axes = [1] : (tensor<1x1048576xf32>) -> tensor<1xf32>
  %i = tgraph.max %w axes = [1] : (tensor<1x1048576xf32>) -> tensor<1xf32>
  func.return %a, %b, %c, %d, %e, %f, %g, %h, %i : tensor<6xf32>, tensor<100xf32>, tensor<6xf32>, tensor<100xf32>, tensor<100xf32>, tensor<6xf64>, tensor<6xf64>, tensor<1xf32>, tensor<1xf32>
}

// Two fused ops computing the same sum (left to cse) are not merged: the merged body
// would yield one value twice.
// CHECK-LABEL: func.func @same
// CHECK-NOT:   tgraph.fused_reductions
// CHECK:       func.return
func.func @same(%x: tensor<6x100xbf16>) -> (tensor<6xf32>, tensor<6xf32>) {
  %a = tgraph.fused %x : (tensor<6x100xbf16>) -> tensor<6xf32> {
  ^bb0(%p: tensor<6x100xbf16>):
    %c = tgraph.cast %p : (tensor<6x100xbf16>) -> tensor<6x100xf32>
    %r = tgraph.sum %c axes = [1] : (tensor<6x100xf32>) -> tensor<6xf32>
    tgraph.yield %r : tensor<6xf32>
  }
  %b = tgraph.fused %x : (tensor<6x100xbf16>) -> tensor<6xf32> {
  ^bb0(%q: tensor<6x100xbf16>):
    %d = tgraph.cast %q : (tensor<6x100xbf16>) -> tensor<6x100xf32>
    %s = tgraph.sum %d axes = [1] : (tensor<6x100xf32>) -> tensor<6xf32>
    tgraph.yield %s : tensor<6xf32>
  }
  func.return %a, %b : tensor<6xf32>, tensor<6xf32>
}
