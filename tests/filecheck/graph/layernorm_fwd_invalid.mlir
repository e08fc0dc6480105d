// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// tgraph.layernorm_fwd's verifier names the op and the offending result.

func.func @mean_shape(%x: tensor<2x8xbf16>) {
  // expected-error @+1 {{tgraph.layernorm_fwd: mean has shape [2], expected [2, 1]}}
  %y, %m, %r = tgraph.layernorm_fwd %x eps = 1.000000e-05 : tensor<2x8xbf16> -> (tensor<2x8xbf16>, tensor<2xf32>, tensor<2x1xf32>)
  func.return
}

// -----

func.func @rstd_type(%x: tensor<2x8xbf16>) {
  // expected-error @+1 {{tgraph.layernorm_fwd: rstd must be f32 for a bf16 input, got bf16}}
  %y, %m, %r = tgraph.layernorm_fwd %x eps = 1.000000e-05 : tensor<2x8xbf16> -> (tensor<2x8xbf16>, tensor<2x1xf32>, tensor<2x1xbf16>)
  func.return
}

// -----

func.func @f64_stats(%x: tensor<2x8xf64>) {
  // expected-error @+1 {{tgraph.layernorm_fwd: mean must be f64 for a f64 input, got f32}}
  %y, %m, %r = tgraph.layernorm_fwd %x eps = 1.000000e-05 : tensor<2x8xf64> -> (tensor<2x8xf64>, tensor<2x1xf32>, tensor<2x1xf32>)
  func.return
}

// -----

func.func @result_shape(%x: tensor<2x8xbf16>) {
  // expected-error @+1 {{tgraph.layernorm_fwd: result has shape [2, 4], expected [2, 8]}}
  %y, %m, %r = tgraph.layernorm_fwd %x eps = 1.000000e-05 : tensor<2x8xbf16> -> (tensor<2x4xbf16>, tensor<2x1xf32>, tensor<2x1xf32>)
  func.return
}

// -----

func.func @weight_shape(%x: tensor<2x8xbf16>, %w: tensor<4xbf16>) {
  // expected-error @+1 {{tgraph.layernorm_fwd: weight has shape [4], expected [8]}}
  %y, %m, %r = tgraph.layernorm_fwd %x weight %w : tensor<4xbf16> eps = 1.000000e-05 : tensor<2x8xbf16> -> (tensor<2x8xbf16>, tensor<2x1xf32>, tensor<2x1xf32>)
  func.return
}
