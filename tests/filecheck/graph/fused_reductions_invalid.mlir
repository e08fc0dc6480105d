// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// tgraph.fused_reductions' verifier names the op and what its body breaks.

func.func @one_result(%a: tensor<6x10xf32>) {
  // expected-error @+1 {{tgraph.fused_reductions: has 1 result(s); one reduction is a tgraph.fused op}}
  %s = tgraph.fused_reductions %a : (tensor<6x10xf32>) -> (tensor<6xf32>) {
  ^bb0(%0: tensor<6x10xf32>):
    %1 = tgraph.sum %0 axes = [1] : (tensor<6x10xf32>) -> tensor<6xf32>
    tgraph.yield %1 : tensor<6xf32>
  }
  func.return
}

// -----

func.func @not_a_reduction(%a: tensor<6x10xf32>) {
  // expected-error @+1 {{tgraph.fused_reductions: each yielded value must be the result of a reduction (tgraph.sum/max/min/mean) of the body}}
  %s, %t = tgraph.fused_reductions %a : (tensor<6x10xf32>) -> (tensor<6xf32>, tensor<6x10xf32>) {
  ^bb0(%0: tensor<6x10xf32>):
    %1 = tgraph.sum %0 axes = [1] : (tensor<6x10xf32>) -> tensor<6xf32>
    %2 = tgraph.exp %0 : (tensor<6x10xf32>) -> tensor<6x10xf32>
    tgraph.yield %1, %2 : tensor<6xf32>, tensor<6x10xf32>
  }
  func.return
}

// -----

func.func @other_axes(%a: tensor<6x10xf32>) {
  // expected-error @+1 {{tgraph.fused_reductions: every reduction must reduce the same axes of a value of the same shape with the same keepdims (tgraph.sum over [1] of [6, 10], tgraph.max over [0] of [6, 10])}}
  %s, %t = tgraph.fused_reductions %a : (tensor<6x10xf32>) -> (tensor<6xf32>, tensor<10xf32>) {
  ^bb0(%0: tensor<6x10xf32>):
    %1 = tgraph.sum %0 axes = [1] : (tensor<6x10xf32>) -> tensor<6xf32>
    %2 = tgraph.max %0 axes = [0] : (tensor<6x10xf32>) -> tensor<10xf32>
    tgraph.yield %1, %2 : tensor<6xf32>, tensor<10xf32>
  }
  func.return
}

// -----

func.func @result_used_in_body(%a: tensor<6x10xf32>) {
  // expected-error @+1 {{tgraph.fused_reductions: a reduction's result may only be yielded}}
  %s, %t = tgraph.fused_reductions %a : (tensor<6x10xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
  ^bb0(%0: tensor<6x10xf32>):
    %1 = tgraph.sum %0 axes = [1] : (tensor<6x10xf32>) -> tensor<6xf32>
    %2 = tgraph.exp %1 : (tensor<6xf32>) -> tensor<6xf32>
    %3 = tgraph.max %0 axes = [1] : (tensor<6x10xf32>) -> tensor<6xf32>
    tgraph.yield %1, %3 : tensor<6xf32>, tensor<6xf32>
  }
  func.return
}

// -----

func.func @twice(%a: tensor<6x10xf32>) {
  // expected-error @+1 {{tgraph.fused_reductions: a reduction's result is yielded twice}}
  %s, %t = tgraph.fused_reductions %a : (tensor<6x10xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
  ^bb0(%0: tensor<6x10xf32>):
    %1 = tgraph.sum %0 axes = [1] : (tensor<6x10xf32>) -> tensor<6xf32>
    tgraph.yield %1, %1 : tensor<6xf32>, tensor<6xf32>
  }
  func.return
}

// -----

func.func @matmul_inside(%a: tensor<6x6xf32>) {
  // expected-error @+1 {{tgraph.fused_reductions: tgraph.matmul cannot be fused here; the body may hold elementwise ops, constants and the reductions}}
  %s, %t = tgraph.fused_reductions %a : (tensor<6x6xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
  ^bb0(%0: tensor<6x6xf32>):
    %1 = tgraph.matmul %0, %0 : (tensor<6x6xf32>, tensor<6x6xf32>) -> tensor<6x6xf32>
    %2 = tgraph.sum %1 axes = [1] : (tensor<6x6xf32>) -> tensor<6xf32>
    %3 = tgraph.max %0 axes = [1] : (tensor<6x6xf32>) -> tensor<6xf32>
    tgraph.yield %2, %3 : tensor<6xf32>, tensor<6xf32>
  }
  func.return
}

// -----

func.func @arg_type(%a: tensor<6x10xf32>) {
  // expected-error @+1 {{tgraph.fused_reductions: body argument 0 has type tensor<6x10xf16>, operand has tensor<6x10xf32>}}
  %s, %t = tgraph.fused_reductions %a : (tensor<6x10xf32>) -> (tensor<6xf16>, tensor<6xf16>) {
  ^bb0(%0: tensor<6x10xf16>):
    %1 = tgraph.sum %0 axes = [1] : (tensor<6x10xf16>) -> tensor<6xf16>
    %2 = tgraph.max %0 axes = [1] : (tensor<6x10xf16>) -> tensor<6xf16>
    tgraph.yield %1, %2 : tensor<6xf16>, tensor<6xf16>
  }
  func.return
}
