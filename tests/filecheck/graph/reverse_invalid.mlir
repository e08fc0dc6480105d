// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// The verifier of tgraph.reverse names the op and what is wrong.

func.func @dim_range(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{tgraph.reverse: dim 2 out of range for rank 2 input [4, 8]}}
  %0 = tgraph.reverse %x dims = [2] : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @negative_dim(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{tgraph.reverse: dim -1 out of range for rank 2 input [4, 8]}}
  %0 = tgraph.reverse %x dims = [-1] : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @repeated(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{tgraph.reverse: dims [1, 1] repeat a dim}}
  %0 = tgraph.reverse %x dims = [1, 1] : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{tgraph.reverse: result}}
  %0 = tgraph.reverse %x dims = [0] : (tensor<4x8xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @elem(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{tgraph.reverse}}
  %0 = tgraph.reverse %x dims = [0] : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  func.return
}
