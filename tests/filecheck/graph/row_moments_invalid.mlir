// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// tgraph.row_moments' verifier names the op and the offending dims, type or result.

func.func @dims(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{tgraph.row_moments: dims = 3 must be between 1 and the input's rank 2}}
  %m, %q = tgraph.row_moments %x dims = 3 : tensor<4x8xf32> -> (tensor<f32>, tensor<f32>)
  func.return
}

// -----

func.func @f64(%x: tensor<4x8xf64>) {
  // expected-error @+1 {{tgraph.row_moments: needs a bf16, f16 or f32 input, got f64}}
  %m, %q = tgraph.row_moments %x dims = 1 : tensor<4x8xf64> -> (tensor<4xf32>, tensor<4xf32>)
  func.return
}

// -----

func.func @type(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{tgraph.row_moments: m2 must be f32, got bf16}}
  %m, %q = tgraph.row_moments %x dims = 1 : tensor<4x8xbf16> -> (tensor<4xf32>, tensor<4xbf16>)
  func.return
}

// -----

func.func @shape(%x: tensor<4x8x3xbf16>) {
  // expected-error @+1 {{tgraph.row_moments: mean has shape [4, 8], expected [4]}}
  %m, %q = tgraph.row_moments %x dims = 2 : tensor<4x8x3xbf16> -> (tensor<4x8xf32>, tensor<4xf32>)
  func.return
}
