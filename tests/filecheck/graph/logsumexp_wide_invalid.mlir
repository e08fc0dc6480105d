// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// Only 16-bit inputs may widen, and only to f32.

func.func @narrow(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{tgraph.logsumexp: result element type bf16 is neither the input's (f32) nor f32 for a 16-bit input}}
  %0 = tgraph.logsumexp %x axes = [1] : (tensor<4x8xf32>) -> tensor<4xbf16>
  func.return
}

// -----

func.func @f64(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{tgraph.logsumexp: result element type f64 is neither the input's (bf16) nor f32 for a 16-bit input}}
  %0 = tgraph.logsumexp %x axes = [1] : (tensor<4x8xbf16>) -> tensor<4xf64>
  func.return
}
