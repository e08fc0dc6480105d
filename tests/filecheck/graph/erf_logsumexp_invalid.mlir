// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// The verifiers of tgraph.erf and tgraph.logsumexp name the op and what is wrong.

func.func @int_erf(%x: tensor<4xi32>) {
  // expected-error @+1 {{tgraph.erf: needs a floating-point operand, got i32}}
  %0 = tgraph.erf %x : (tensor<4xi32>) -> tensor<4xi32>
  func.return
}

// -----

func.func @int_logsumexp(%x: tensor<4xi32>) {
  // expected-error @+1 {{tgraph.logsumexp: needs a floating-point operand, got i32}}
  %0 = tgraph.logsumexp %x axes = [0] : (tensor<4xi32>) -> tensor<i32>
  func.return
}

// -----

func.func @axis(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{tgraph.logsumexp: axis 2 out of range for rank 2}}
  %0 = tgraph.logsumexp %x axes = [2] : (tensor<4x6xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @shape(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{tgraph.logsumexp: result has shape [4, 6], expected [4, 1]}}
  %0 = tgraph.logsumexp %x axes = [1] keepdims : (tensor<4x6xf32>) -> tensor<4x6xf32>
  func.return
}
