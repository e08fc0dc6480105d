// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// The attention gradient ops' verifiers name the op and the offending operand.

func.func @lse_shape(%q: tensor<2x4x8xbf16>) {
  // expected-error @+1 {{tgraph.flash_attention_fwd: lse has shape [2, 5], expected [2, 4]}}
  %o, %l = tgraph.flash_attention_fwd %q, %q, %q : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x5xf32>)
  func.return
}

// -----

func.func @lse_type(%q: tensor<2x4x8xbf16>) {
  // expected-error @+1 {{tgraph.flash_attention_fwd: lse must be f32 or f64, got bf16}}
  %o, %l = tgraph.flash_attention_fwd %q, %q, %q : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x4xbf16>)
  func.return
}

// -----

func.func @do_shape(%q: tensor<2x4x8xbf16>, %d: tensor<2x4x16xbf16>, %l: tensor<2x4xf32>) {
  // expected-error @+1 {{tgraph.flash_attention_bwd: do has shape [2, 4, 16], expected [2, 4, 8]}}
  %a, %b, %c = tgraph.flash_attention_bwd %q, %q, %q, %q, %d, %l : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x16xbf16>, tensor<2x4xf32>) -> (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>)
  func.return
}

// -----

func.func @dk_shape(%q: tensor<2x4x8xbf16>, %k: tensor<2x6x8xbf16>, %l: tensor<2x4xf32>) {
  // expected-error @+1 {{tgraph.flash_attention_bwd: dk has shape [2, 4, 8], expected [2, 6, 8]}}
  %a, %b, %c = tgraph.flash_attention_bwd %q, %k, %k, %q, %q, %l : (tensor<2x4x8xbf16>, tensor<2x6x8xbf16>, tensor<2x6x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4xf32>) -> (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x6x8xbf16>)
  func.return
}

// -----

func.func @batch(%q: tensor<2x4x8xbf16>, %k: tensor<3x4x8xbf16>, %l: tensor<2x4xf32>) {
  // expected-error @+1 {{tgraph.flash_attention_bwd: batch dims differ: [2], [3], [3]}}
  %a, %b, %c = tgraph.flash_attention_bwd %q, %k, %k, %q, %q, %l : (tensor<2x4x8xbf16>, tensor<3x4x8xbf16>, tensor<3x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4xf32>) -> (tensor<2x4x8xbf16>, tensor<3x4x8xbf16>, tensor<3x4x8xbf16>)
  func.return
}
