// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// The verifiers of tgraph.sin and tgraph.cos name the op and what is wrong.

func.func @int_sin(%x: tensor<4xi32>) {
  // expected-error @+1 {{tgraph.sin: needs a floating-point operand, got i32}}
  %0 = tgraph.sin %x : (tensor<4xi32>) -> tensor<4xi32>
  func.return
}

// -----

func.func @cos_shape(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{tgraph.cos: result has shape [4, 5], expected [4, 6]}}
  %0 = tgraph.cos %x : (tensor<4x6xf32>) -> tensor<4x5xf32>
  func.return
}

// -----

func.func @cos_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{tgraph.cos: element types differ: f32, f64}}
  %0 = tgraph.cos %x : (tensor<4xf32>) -> tensor<4xf64>
  func.return
}
