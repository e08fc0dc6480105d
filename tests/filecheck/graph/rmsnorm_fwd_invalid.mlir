// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// tgraph.rmsnorm_fwd's verifier names the op and the offending result or operand.

func.func @rstd_shape(%x: tensor<2x8xbf16>) {
  // expected-error @+1 {{tgraph.rmsnorm_fwd: rstd has shape [2], expected [2, 1]}}
  %y, %r = tgraph.rmsnorm_fwd %x eps = 1.000000e-05 : tensor<2x8xbf16> -> (tensor<2x8xbf16>, tensor<2xf32>)
  func.return
}

// -----

func.func @rstd_type(%x: tensor<2x8xbf16>) {
  // expected-error @+1 {{tgraph.rmsnorm_fwd: rstd must be f32 for a bf16 input, got bf16}}
  %y, %r = tgraph.rmsnorm_fwd %x eps = 1.000000e-05 : tensor<2x8xbf16> -> (tensor<2x8xbf16>, tensor<2x1xbf16>)
  func.return
}

// -----

func.func @f64_stats(%x: tensor<2x8xf64>) {
  // expected-error @+1 {{tgraph.rmsnorm_fwd: rstd must be f64 for a f64 input, got f32}}
  %y, %r = tgraph.rmsnorm_fwd %x eps = 1.000000e-05 : tensor<2x8xf64> -> (tensor<2x8xf64>, tensor<2x1xf32>)
  func.return
}

// -----

func.func @weight_shape(%x: tensor<2x8xbf16>, %w: tensor<4xbf16>) {
  // expected-error @+1 {{tgraph.rmsnorm_fwd: weight has shape [4], expected [8]}}
  %y, %r = tgraph.rmsnorm_fwd %x weight %w : tensor<4xbf16> eps = 1.000000e-05 : tensor<2x8xbf16> -> (tensor<2x8xbf16>, tensor<2x1xf32>)
  func.return
}

// -----

func.func @eps(%x: tensor<2x8xbf16>) {
  // expected-error @+1 {{tgraph.rmsnorm_fwd: eps must be in [0, 3.402823e+38], got -1.0}}
  %y, %r = tgraph.rmsnorm_fwd %x eps = -1.000000e+00 : tensor<2x8xbf16> -> (tensor<2x8xbf16>, tensor<2x1xf32>)
  func.return
}
