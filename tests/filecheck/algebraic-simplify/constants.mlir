// RUN: tessera-opt %s -p algebraic-simplify | filecheck %s
// RUN: tessera-opt %s -p 'algebraic-simplify{fold-constants=false}' | filecheck %s --check-prefix=OFF
// RUN: tessera-opt %s -p 'algebraic-simplify{max-fold-elements=2}' | filecheck %s --check-prefix=SMALL

// Ops on constants are evaluated by the reference interpreter at compile time.
func.func @fold() -> (tensor<2x2xf32>, tensor<2xf32>, tensor<2x2xbf16>) {
  %a = tgraph.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32> -> tensor<2x2xf32>
  %b = tgraph.constant dense<0.5> : tensor<f32> -> tensor<2x2xf32>
  %0 = tgraph.mul %a, %b : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %1 = tgraph.transpose %0 permutation = [1, 0] : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %2 = tgraph.matmul %1, %a : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %3 = tgraph.sum %2 axes = [0] : (tensor<2x2xf32>) -> tensor<2xf32>
  %4 = tgraph.cast %b : (tensor<2x2xf32>) -> tensor<2x2xbf16>
  func.return %2, %3, %4 : tensor<2x2xf32>, tensor<2xf32>, tensor<2x2xbf16>
}
// 0.5*a = [[0.5, 1], [1.5, 2]]; its transpose times a = [[5, 7], [7, 10]]; column sums [12, 17].
// CHECK-LABEL: func.func @fold
// CHECK-NEXT:    %{{.*}} = tgraph.constant dense<{{\[}}[5.000000e+00, 7.000000e+00], [7.000000e+00, 1.000000e+01]]> : tensor<2x2xf32> -> tensor<2x2xf32>
// CHECK-NEXT:    %{{.*}} = tgraph.constant dense<[1.200000e+01, 1.700000e+01]> : tensor<2xf32> -> tensor<2xf32>
// CHECK-NEXT:    %{{.*}} = tgraph.constant dense<5.000000e-01> : tensor<2x2xbf16> -> tensor<2x2xbf16>
// CHECK-NEXT:    func.return
// OFF-LABEL: func.func @fold
// OFF:         tgraph.mul %a, %b
// OFF-NEXT:    tgraph.matmul %0, %a transpose_lhs
// SMALL-LABEL: func.func @fold
// SMALL:         %0 = tgraph.mul %a, %b
// SMALL-NEXT:    %1 = tgraph.matmul %0, %a transpose_lhs
// SMALL-NEXT:    %2 = tgraph.sum %1

// Ops with a non-constant operand, and random ops, are left alone.
func.func @keep(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %c = tgraph.constant dense<3.0> : tensor<f32> -> tensor<2xf32>
  %0 = tgraph.add %x, %c : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %r = tgraph.randn seed = 1 : tensor<2xf32>
  %1 = tgraph.exp %r : (tensor<2xf32>) -> tensor<2xf32>
  func.return %0, %1 : tensor<2xf32>, tensor<2xf32>
}
// CHECK-LABEL: func.func @keep
// CHECK:         tgraph.add %x, %c
// CHECK:         tgraph.randn
// CHECK:         tgraph.exp %r
