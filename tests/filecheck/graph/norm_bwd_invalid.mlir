// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// The norm gradient ops' verifiers name the op and the offending operand.

func.func @stats_shape(%x: tensor<2x8xbf16>, %s: tensor<2xf32>) {
  // expected-error @+1 {{tgraph.rmsnorm_bwd: rstd has shape [2], expected [2, 1]}}
  %0 = tgraph.rmsnorm_bwd %x, %x, %s : (tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2xf32>) -> tensor<2x8xbf16>
  func.return
}

// -----

func.func @stats_type(%x: tensor<2x8xbf16>, %s: tensor<2x1xbf16>, %r: tensor<2x1xf32>) {
  // expected-error @+1 {{tgraph.layernorm_bwd: mean must be f32 for a bf16 input, got bf16}}
  %0 = tgraph.layernorm_bwd %x, %x, %s, %r : (tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x1xbf16>, tensor<2x1xf32>) -> tensor<2x8xbf16>
  func.return
}

// -----

func.func @dy_shape(%x: tensor<2x8xbf16>, %d: tensor<2x4xbf16>, %r: tensor<2x1xf32>) {
  // expected-error @+1 {{tgraph.rmsnorm_bwd: dy has shape [2, 4], expected [2, 8]}}
  %0 = tgraph.rmsnorm_bwd %d, %x, %r : (tensor<2x4xbf16>, tensor<2x8xbf16>, tensor<2x1xf32>) -> tensor<2x8xbf16>
  func.return
}

// -----

func.func @dy_type(%x: tensor<2x8xbf16>, %d: tensor<2x8xf32>, %r: tensor<2x1xf32>) {
  // expected-error @+1 {{tgraph.rmsnorm_bwd}}
  %0 = tgraph.rmsnorm_bwd %d, %x, %r : (tensor<2x8xf32>, tensor<2x8xbf16>, tensor<2x1xf32>) -> tensor<2x8xbf16>
  func.return
}

// -----

func.func @weight_shape(%x: tensor<2x8xbf16>, %r: tensor<2x1xf32>, %w: tensor<4xbf16>) {
  // expected-error @+1 {{tgraph.layernorm_bwd: weight has shape [4], expected [8]}}
  %0 = tgraph.layernorm_bwd %x, %x, %r, %r weight %w : tensor<4xbf16> : (tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x8xbf16>
  func.return
}

// -----

func.func @residual_shape(%x: tensor<2x8xbf16>, %r: tensor<2x1xf32>, %res: tensor<8xbf16>) {
  // expected-error @+1 {{tgraph.rmsnorm_bwd: residual has shape [8], expected [2, 8]}}
  %0 = tgraph.rmsnorm_bwd %x, %x, %r residual %res : tensor<8xbf16> : (tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x1xf32>) -> tensor<2x8xbf16>
  func.return
}
