// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// The attention gradient ops, in custom syntax; printed back identically, and through
// the generic form.
func.func @attention_grad(%q: tensor<2x5x8xbf16>, %k: tensor<2x7x8xbf16>, %do: tensor<2x5x8xbf16>) {
  %o, %lse = tgraph.flash_attention_fwd %q, %k, %k scale = 5.000000e-01 causal : (tensor<2x5x8xbf16>, tensor<2x7x8xbf16>, tensor<2x7x8xbf16>) -> (tensor<2x5x8xbf16>, tensor<2x5xf32>)
  %dq, %dk, %dv = tgraph.flash_attention_bwd %q, %k, %k, %o, %do, %lse scale = 5.000000e-01 causal : (tensor<2x5x8xbf16>, tensor<2x7x8xbf16>, tensor<2x7x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5xf32>) -> (tensor<2x5x8xbf16>, tensor<2x7x8xbf16>, tensor<2x7x8xbf16>)
  %o2, %lse2 = tgraph.flash_attention_fwd %q, %k, %k : (tensor<2x5x8xbf16>, tensor<2x7x8xbf16>, tensor<2x7x8xbf16>) -> (tensor<2x5x8xbf16>, tensor<2x5xf32>)
  func.return
}
// CHECK-LABEL: func.func @attention_grad
// CHECK-NEXT:  %o, %lse = tgraph.flash_attention_fwd %q, %k, %k scale = 5.000000e-01 causal : (tensor<2x5x8xbf16>, tensor<2x7x8xbf16>, tensor<2x7x8xbf16>) -> (tensor<2x5x8xbf16>, tensor<2x5xf32>)
// CHECK-NEXT:  %dq, %dk, %dv = tgraph.flash_attention_bwd %q, %k, %k, %o, %do, %lse scale = 5.000000e-01 causal : (tensor<2x5x8xbf16>, tensor<2x7x8xbf16>, tensor<2x7x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5xf32>) -> (tensor<2x5x8xbf16>, tensor<2x7x8xbf16>, tensor<2x7x8xbf16>)
// CHECK-NEXT:  %o2, %lse2 = tgraph.flash_attention_fwd %q, %k, %k : (tensor<2x5x8xbf16>, tensor<2x7x8xbf16>, tensor<2x7x8xbf16>) -> (tensor<2x5x8xbf16>, tensor<2x5xf32>)
// GENERIC: "tgraph.flash_attention_fwd"(%{{.*}}, %{{.*}}, %{{.*}}) <{scale = 5.000000e-01 : f64, causal}>
// GENERIC: "tgraph.flash_attention_bwd"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{scale = 5.000000e-01 : f64, causal}>
