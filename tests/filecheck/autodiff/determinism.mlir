// RUN: tessera-opt %s -p autodiff > %t.1
// RUN: tessera-opt %s -p autodiff > %t.2
// RUN: diff %t.1 %t.2
// RUN: filecheck %s < %t.1

// The backward of a program is the same graph every time. A non-scalar result
// takes a cotangent argument (a VJP); attention's forward is recomputed saving the
// log-sum-exp, and its adjoint is one fused flash_attention_bwd.

func.func @attn(%q: tensor<2x4x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x8xf32>) -> tensor<2x4x8xf32> {
  %o = tgraph.flash_attention %q, %k, %v causal : (tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32>) -> tensor<2x4x8xf32>
  func.return %o : tensor<2x4x8xf32>
}
// CHECK-LABEL: func.func @attn_grad(%q: tensor<2x4x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x8xf32>, %0: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32>)
// CHECK-NEXT:    %o, %[[LSE:.*]] = tgraph.flash_attention_fwd %q, %k, %v causal : {{.*}} -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
// CHECK-NEXT:    %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = tgraph.flash_attention_bwd %q, %k, %v, %o, %0, %[[LSE]] causal
// CHECK-NEXT:    func.return %[[DQ]], %[[DK]], %[[DV]]
