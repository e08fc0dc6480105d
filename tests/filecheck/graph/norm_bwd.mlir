// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s

// tgraph.layernorm_bwd / tgraph.rmsnorm_bwd: the input gradient of a norm from the
// forward's row statistics, printed back identically and through the generic form.
func.func @bwd(%dy: tensor<2x5x8xbf16>, %x: tensor<2x5x8xbf16>, %m: tensor<2x5x1xf32>, %r: tensor<2x5x1xf32>, %w: tensor<8xbf16>) {
  %0 = tgraph.layernorm_bwd %dy, %x, %m, %r weight %w : tensor<8xbf16> : (tensor<2x5x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5x1xf32>, tensor<2x5x1xf32>) -> tensor<2x5x8xbf16>
  %1 = tgraph.layernorm_bwd %dy, %x, %m, %r : (tensor<2x5x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5x1xf32>, tensor<2x5x1xf32>) -> tensor<2x5x8xbf16>
  %2 = tgraph.rmsnorm_bwd %dy, %x, %r weight %w : tensor<8xbf16> : (tensor<2x5x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5x1xf32>) -> tensor<2x5x8xbf16>
  %3 = tgraph.rmsnorm_bwd %dy, %x, %r residual %x : tensor<2x5x8xbf16> : (tensor<2x5x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5x1xf32>) -> tensor<2x5x8xbf16>
  func.return
}
// CHECK-LABEL: func.func @bwd
// CHECK-NEXT:  %0 = tgraph.layernorm_bwd %dy, %x, %m, %r weight %w : tensor<8xbf16> : (tensor<2x5x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5x1xf32>, tensor<2x5x1xf32>) -> tensor<2x5x8xbf16>
// CHECK-NEXT:  %1 = tgraph.layernorm_bwd %dy, %x, %m, %r : (tensor<2x5x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5x1xf32>, tensor<2x5x1xf32>) -> tensor<2x5x8xbf16>
// CHECK-NEXT:  %2 = tgraph.rmsnorm_bwd %dy, %x, %r weight %w : tensor<8xbf16> : (tensor<2x5x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5x1xf32>) -> tensor<2x5x8xbf16>
// CHECK-NEXT:  %3 = tgraph.rmsnorm_bwd %dy, %x, %r residual %x : tensor<2x5x8xbf16> : (tensor<2x5x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5x1xf32>) -> tensor<2x5x8xbf16>
