// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s

// tgraph.layernorm_fwd: a layer norm that also returns each row's mean and rstd
// ([..., 1], f32 for 16-bit and f32 inputs, f64 for f64), printed back identically
// and through the generic form.
func.func @ln(%x: tensor<2x5x8xbf16>, %w: tensor<8xbf16>, %d: tensor<3x4xf64>) {
  %y, %m, %r = tgraph.layernorm_fwd %x weight %w : tensor<8xbf16> bias %w : tensor<8xbf16> eps = 1.000000e-05 : tensor<2x5x8xbf16> -> (tensor<2x5x8xbf16>, tensor<2x5x1xf32>, tensor<2x5x1xf32>)
  %y2, %m2, %r2 = tgraph.layernorm_fwd %d eps = 0.000000e+00 : tensor<3x4xf64> -> (tensor<3x4xf64>, tensor<3x1xf64>, tensor<3x1xf64>)
  func.return
}
// CHECK-LABEL: func.func @ln
// CHECK-NEXT:  %y, %m, %r = tgraph.layernorm_fwd %x weight %w : tensor<8xbf16> bias %w : tensor<8xbf16> eps = 1.000000e-05 : tensor<2x5x8xbf16> -> (tensor<2x5x8xbf16>, tensor<2x5x1xf32>, tensor<2x5x1xf32>)
// CHECK-NEXT:  %y2, %m2, %r2 = tgraph.layernorm_fwd %d eps = 0.000000e+00 : tensor<3x4xf64> -> (tensor<3x4xf64>, tensor<3x1xf64>, tensor<3x1xf64>)
