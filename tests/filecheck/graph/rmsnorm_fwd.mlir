// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s

// tgraph.rmsnorm_fwd: an RMS norm that also returns each row's rstd ([..., 1], f32 for
// 16-bit and f32 inputs, f64 for f64), printed back identically and through the
// generic form.
func.func @rms(%x: tensor<2x5x8xbf16>, %w: tensor<8xbf16>, %d: tensor<3x4xf64>) {
  %y, %r = tgraph.rmsnorm_fwd %x weight %w : tensor<8xbf16> eps = 1.000000e-06 : tensor<2x5x8xbf16> -> (tensor<2x5x8xbf16>, tensor<2x5x1xf32>)
  %y2, %r2 = tgraph.rmsnorm_fwd %d eps = 0.000000e+00 : tensor<3x4xf64> -> (tensor<3x4xf64>, tensor<3x1xf64>)
  func.return
}
// CHECK-LABEL: func.func @rms
// CHECK-NEXT:  %y, %r = tgraph.rmsnorm_fwd %x weight %w : tensor<8xbf16> eps = 1.000000e-06 : tensor<2x5x8xbf16> -> (tensor<2x5x8xbf16>, tensor<2x5x1xf32>)
// CHECK-NEXT:  %y2, %r2 = tgraph.rmsnorm_fwd %d eps = 0.000000e+00 : tensor<3x4xf64> -> (tensor<3x4xf64>, tensor<3x1xf64>)
