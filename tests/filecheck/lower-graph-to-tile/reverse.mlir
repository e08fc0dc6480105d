// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// tgraph.reverse (tile_datamove.lower_reverse): one copy whose source index is
// n - 1 - i on each reversed dim; vectors when the last dim is kept. A convolution
// weight's batch-channel swap followed by the flip of kh and kw is one copy that reads
// the weight through the deferred transpose (no transpose kernel).

func.func @rows(%x: tensor<6x5x64xbf16>) -> tensor<6x5x64xbf16> {
  %0 = tgraph.reverse %x dims = [0, 1] : (tensor<6x5x64xbf16>) -> tensor<6x5x64xbf16>
  func.return %0 : tensor<6x5x64xbf16>
}
// CHECK:      ttile.kernel @rows_reverse_0(%[[O:.*]]: memref<6x5x64xbf16>, %[[I:.*]]: memref<6x5x64xbf16>)
// CHECK:        arith.subi
// CHECK:        ttile.load_vector %[[I]]
// CHECK:        ttile.store_vector
// CHECK:      func.func @rows(
// CHECK:        ttile.launch @rows_reverse_0(

func.func @flip_weight(%w: tensor<64x32x3x3xf32>) -> tensor<32x64x3x3xf32> {
  %t = tgraph.transpose %w permutation = [1, 0, 2, 3] : (tensor<64x32x3x3xf32>) -> tensor<32x64x3x3xf32>
  %r = tgraph.reverse %t dims = [2, 3] : (tensor<32x64x3x3xf32>) -> tensor<32x64x3x3xf32>
  func.return %r : tensor<32x64x3x3xf32>
}
// CHECK-NOT:  ttile.kernel @flip_weight_transpose
// CHECK:      ttile.kernel @flip_weight_reverse_t_0(%[[O:.*]]: memref<32x64x3x3xf32>, %[[W:.*]]: memref<64x32x3x3xf32>)
// CHECK:        ttile.load %[[W]]
// CHECK:      func.func @flip_weight(%[[X:.*]]: memref<64x32x3x3xf32>)
// CHECK-NOT:    ttile.launch @flip_weight_transpose
// CHECK:        ttile.launch @flip_weight_reverse_t_0(%{{.*}}, %[[X]])
