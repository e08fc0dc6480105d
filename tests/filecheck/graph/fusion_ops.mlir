// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// tgraph.fused (with tgraph.yield) and tgraph.matmul_epilogue, custom and generic syntax.

func.func @fused(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4xf32> {
  %r = tgraph.fused %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32> {
  ^bb0(%0: tensor<4x8xf32>, %1: tensor<8xf32>):
    %c = tgraph.constant dense<2.0> : tensor<f32> -> tensor<4x8xf32>
    %2 = tgraph.add %0, %1 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %3 = tgraph.mul %2, %c : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %4 = tgraph.exp %3 : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %5 = tgraph.sum %4 axes = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
    tgraph.yield %5 : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
// CHECK-LABEL: func.func @fused
// CHECK-NEXT:    %r = tgraph.fused %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32> {
// CHECK-NEXT:    ^bb0(%0: tensor<4x8xf32>, %1: tensor<8xf32>):
// CHECK-NEXT:      %c = tgraph.constant dense<2.000000e+00> : tensor<f32> -> tensor<4x8xf32>
// CHECK-NEXT:      %2 = tgraph.add %0, %1
// CHECK-NEXT:      %3 = tgraph.mul %2, %c
// CHECK-NEXT:      %4 = tgraph.exp %3
// CHECK-NEXT:      %5 = tgraph.sum %4 axes = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
// CHECK-NEXT:      tgraph.yield %5 : tensor<4xf32>
// CHECK-NEXT:    }
// GENERIC-LABEL: "func.func"() <{sym_name = "fused"
// GENERIC:         %r = "tgraph.fused"(%x, %b) ({
// GENERIC-NEXT:    ^bb0(%0: tensor<4x8xf32>, %1: tensor<8xf32>):
// GENERIC:           "tgraph.yield"(%5) : (tensor<4xf32>) -> ()
// GENERIC-NEXT:    }) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32>

func.func @epilogue(%a: tensor<2x4x8xbf16>, %w: tensor<16x8xbf16>, %v: tensor<8x4xbf16>, %b: tensor<16xf32>, %bb: tensor<16xbf16>) {
  %0 = tgraph.matmul_epilogue %a, %v : (tensor<2x4x8xbf16>, tensor<8x4xbf16>) -> tensor<2x4x4xbf16>
  %1 = tgraph.matmul_epilogue %a, %w bias %b transpose_rhs activation = "gelu" compute_type = tensor<2x4x16xf32> tile_shape = [64, 64, 32] : (tensor<2x4x8xbf16>, tensor<16x8xbf16>, tensor<16xf32>) -> tensor<2x4x16xbf16>
  %2 = tgraph.matmul_epilogue %v, %w transpose_lhs transpose_rhs activation = "silu" : (tensor<8x4xbf16>, tensor<16x8xbf16>) -> tensor<4x16xbf16>
  %3 = tgraph.matmul_epilogue %a, %w bias %bb residual %1 transpose_rhs activation = "relu" : (tensor<2x4x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>, tensor<2x4x16xbf16>) -> tensor<2x4x16xbf16>
  %4 = tgraph.matmul_epilogue %v, %w residual %2 transpose_lhs transpose_rhs : (tensor<8x4xbf16>, tensor<16x8xbf16>, tensor<4x16xbf16>) -> tensor<4x16xbf16>
  %5 = tgraph.matmul_epilogue %a, %w bias %bb transpose_rhs compute_type = tensor<2x4x16xf32> : (tensor<2x4x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>) -> tensor<2x4x16xbf16>
  func.return
}
// CHECK-LABEL: func.func @epilogue
// CHECK-NEXT: %0 = tgraph.matmul_epilogue %a, %v : (tensor<2x4x8xbf16>, tensor<8x4xbf16>) -> tensor<2x4x4xbf16>
// CHECK-NEXT: %1 = tgraph.matmul_epilogue %a, %w bias %b transpose_rhs activation = "gelu" compute_type = tensor<2x4x16xf32> tile_shape = [64, 64, 32] : (tensor<2x4x8xbf16>, tensor<16x8xbf16>, tensor<16xf32>) -> tensor<2x4x16xbf16>
// CHECK-NEXT: %2 = tgraph.matmul_epilogue %v, %w transpose_lhs transpose_rhs activation = "silu" : (tensor<8x4xbf16>, tensor<16x8xbf16>) -> tensor<4x16xbf16>
// CHECK-NEXT: %3 = tgraph.matmul_epilogue %a, %w bias %bb residual %1 transpose_rhs activation = "relu" : (tensor<2x4x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>, tensor<2x4x16xbf16>) -> tensor<2x4x16xbf16>
// CHECK-NEXT: %4 = tgraph.matmul_epilogue %v, %w residual %2 transpose_lhs transpose_rhs : (tensor<8x4xbf16>, tensor<16x8xbf16>, tensor<4x16xbf16>) -> tensor<4x16xbf16>
// CHECK-NEXT: %5 = tgraph.matmul_epilogue %a, %w bias %bb transpose_rhs compute_type = tensor<2x4x16xf32> : (tensor<2x4x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>) -> tensor<2x4x16xbf16>
// GENERIC-LABEL: "func.func"() <{sym_name = "epilogue"
// GENERIC: "tgraph.matmul_epilogue"(%a, %w, %b) <{transpose_rhs, activation = "gelu", compute_type = tensor<2x4x16xf32>, tile_shape = array<i64: 64, 64, 32>, operandSegmentSizes = array<i32: 1, 1, 1, 0>}>
// GENERIC: "tgraph.matmul_epilogue"(%v, %w, %2) <{transpose_lhs, transpose_rhs, operandSegmentSizes = array<i32: 1, 1, 0, 1>}>
