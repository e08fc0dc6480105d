// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// A strided convolution's input gradient (tessera/autodiff/conv_grad.py): the phases'
// outputs [N, G, Ph, Pw, C, rows, cols] interleave by a transpose whose only user is the
// crop of whole phase rows; the crop reads the phases through the permutation
// (slice_i, one element per lane) and the transposed copy is never made.

func.func @phases(%y: tensor<2x1x2x2x8x29x29xbf16>) -> tensor<2x8x56x56xbf16> {
  %t = tgraph.transpose %y permutation = [0, 1, 4, 5, 2, 6, 3] : (tensor<2x1x2x2x8x29x29xbf16>) -> tensor<2x1x8x29x2x29x2xbf16>
  %c = tgraph.slice %t start = [0, 0, 0, 1, 0, 1, 0] limit = [2, 1, 8, 29, 2, 29, 2] stride = [1, 1, 1, 1, 1, 1, 1] : (tensor<2x1x8x29x2x29x2xbf16>) -> tensor<2x1x8x28x2x28x2xbf16>
  %r = tgraph.reshape %c : (tensor<2x1x8x28x2x28x2xbf16>) -> tensor<2x8x56x56xbf16>
  func.return %r : tensor<2x8x56x56xbf16>
}
// CHECK-NOT:  ttile.kernel @phases_transpose
// CHECK:      ttile.kernel @phases_slice_i_0(%[[O:.*]]: memref<2x1x8x28x2x28x2xbf16>, %[[Y:.*]]: memref<2x1x2x2x8x29x29xbf16>)
// CHECK:        ttile.load %[[Y]]
// CHECK:        ttile.store
// CHECK:      func.func @phases(%[[A:.*]]: memref<2x1x2x2x8x29x29xbf16>)
// CHECK-NOT:    ttile.launch @phases_transpose
// CHECK:        ttile.launch @phases_slice_i_0(%{{.*}}, %[[A]])
