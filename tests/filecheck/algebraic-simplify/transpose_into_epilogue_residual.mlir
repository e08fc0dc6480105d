// RUN: tessera-opt %s -p algebraic-simplify | filecheck %s

// A transpose folds into a matmul_epilogue that has a bias and a residual: the operands keep
// their segments.
func.func @f(%x: tensor<8x6xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %r: tensor<6x16xf32>) -> tensor<6x16xf32> {
  %t = tgraph.transpose %x permutation = [1, 0] : (tensor<8x6xf32>) -> tensor<6x8xf32>
  %y = tgraph.matmul_epilogue %t, %w bias %b residual %r : (tensor<6x8xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<6x16xf32>) -> tensor<6x16xf32>
  func.return %y : tensor<6x16xf32>
}
// CHECK-LABEL: func.func @f
// CHECK-NEXT:    %y = tgraph.matmul_epilogue %x, %w bias %b residual %r transpose_lhs : (tensor<8x6xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<6x16xf32>) -> tensor<6x16xf32>
// CHECK-NEXT:    func.return %y
