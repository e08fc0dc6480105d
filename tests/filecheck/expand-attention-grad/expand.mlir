// RUN: tessera-opt %s -p expand-attention-grad | filecheck %s
// RUN: tessera-opt %s -p 'expand-attention-grad{all=true}' | filecheck %s --check-prefix=ALL

// Without a fused kernel (f32 here) the attention gradient ops become Graph IR: the
// forward is a plain flash_attention plus the log-sum-exp of the masked scores, the
// backward recomputes P = exp(S - lse) and runs the four matmuls.

func.func @f32_grad(%q: tensor<2x4x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x8xf32>, %do: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32>) {
  %o, %lse = tgraph.flash_attention_fwd %q, %k, %v scale = 5.000000e-01 causal : (tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  %dq, %dk, %dv = tgraph.flash_attention_bwd %q, %k, %v, %o, %do, %lse scale = 5.000000e-01 causal : (tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32>)
  func.return %dq, %dk, %dv : tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32>
}
// CHECK-LABEL: func.func @f32_grad
// CHECK-NOT:     tgraph.flash_attention_fwd
// CHECK:         %[[O:.*]] = tgraph.flash_attention %q, %k, %v scale = 5.000000e-01 causal
// CHECK:         %[[S:.*]] = tgraph.matmul %q, %k transpose_rhs
// CHECK:         tgraph.select
// CHECK:         tgraph.max
// CHECK:         tgraph.exp
// CHECK:         tgraph.sum
// CHECK:         %[[L:.*]] = tgraph.log
// CHECK:         %[[LSE:.*]] = tgraph.add
// CHECK:         tgraph.matmul %q, %k transpose_rhs
// CHECK:         %[[P:.*]] = tgraph.exp
// CHECK:         %[[DV:.*]] = tgraph.matmul %[[P]], %do transpose_lhs
// CHECK:         tgraph.matmul %do, %v transpose_rhs
// CHECK:         tgraph.mul %do, %[[O]]
// CHECK:         %[[DQ:.*]] = tgraph.matmul %[[DS:.*]], %k :
// CHECK:         %[[DK:.*]] = tgraph.matmul %[[DS]], %q transpose_lhs
// CHECK-NOT:     tgraph.flash_attention_bwd
// CHECK:         func.return %[[DQ]], %[[DK]], %[[DV]]

// bf16 with head size 64 has the fused kernels: kept, unless all=true.
func.func @bf16_grad(%q: tensor<1x80x64xbf16>, %do: tensor<1x80x64xbf16>) -> (tensor<1x80x64xbf16>, tensor<1x80x64xbf16>, tensor<1x80x64xbf16>) {
  %o, %lse = tgraph.flash_attention_fwd %q, %q, %q : (tensor<1x80x64xbf16>, tensor<1x80x64xbf16>, tensor<1x80x64xbf16>) -> (tensor<1x80x64xbf16>, tensor<1x80xf32>)
  %dq, %dk, %dv = tgraph.flash_attention_bwd %q, %q, %q, %o, %do, %lse : (tensor<1x80x64xbf16>, tensor<1x80x64xbf16>, tensor<1x80x64xbf16>, tensor<1x80x64xbf16>, tensor<1x80x64xbf16>, tensor<1x80xf32>) -> (tensor<1x80x64xbf16>, tensor<1x80x64xbf16>, tensor<1x80x64xbf16>)
  func.return %dq, %dk, %dv : tensor<1x80x64xbf16>, tensor<1x80x64xbf16>, tensor<1x80x64xbf16>
}
// CHECK-LABEL: func.func @bf16_grad
// CHECK:         tgraph.flash_attention_fwd
// CHECK:         tgraph.flash_attention_bwd
// ALL-LABEL:   func.func @bf16_grad
// ALL-NOT:       tgraph.flash_attention_fwd
// ALL:           tgraph.flash_attention %q, %q, %q
// ALL-NOT:       tgraph.flash_attention_bwd
// ALL:           func.return
