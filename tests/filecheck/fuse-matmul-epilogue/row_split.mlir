// RUN: tessera-opt %s -p fuse-matmul-epilogue | filecheck %s

// A linear layer on [B, S, D] activations: the product's rows are split by a reshape
// before the residual add. The residual is reshaped to the product's [M, N] (no copy),
// the epilogue adds it, and the result is reshaped back.
func.func @residual(%x: tensor<6x8xbf16>, %w: tensor<16x8xbf16>, %r: tensor<2x3x16xbf16>) -> tensor<2x3x16xbf16> {
  %m = tgraph.matmul %x, %w transpose_rhs : (tensor<6x8xbf16>, tensor<16x8xbf16>) -> tensor<6x16xbf16>
  %v = tgraph.reshape %m : (tensor<6x16xbf16>) -> tensor<2x3x16xbf16>
  %y = tgraph.add %r, %v : (tensor<2x3x16xbf16>, tensor<2x3x16xbf16>) -> tensor<2x3x16xbf16>
  func.return %y : tensor<2x3x16xbf16>
}
// CHECK-LABEL: func.func @residual
// CHECK-NEXT:    %[[R:.*]] = tgraph.reshape %r : (tensor<2x3x16xbf16>) -> tensor<6x16xbf16>
// CHECK-NEXT:    %[[E:.*]] = tgraph.matmul_epilogue %x, %w bias %[[R]] transpose_rhs : (tensor<6x8xbf16>, tensor<16x8xbf16>, tensor<6x16xbf16>) -> tensor<6x16xbf16>
// CHECK-NEXT:    %y = tgraph.reshape %[[E]] : (tensor<6x16xbf16>) -> tensor<2x3x16xbf16>
// CHECK-NEXT:    func.return %y

// A row bias of the split shape ([1, 1, N]) becomes [N]; the activation and cast after
// it join the epilogue too.
func.func @row_bias(%x: tensor<6x8xf32>, %w: tensor<8x16xf32>, %b: tensor<1x1x16xf32>) -> tensor<2x3x16xbf16> {
  %m = tgraph.matmul %x, %w : (tensor<6x8xf32>, tensor<8x16xf32>) -> tensor<6x16xf32>
  %v = tgraph.reshape %m : (tensor<6x16xf32>) -> tensor<2x3x16xf32>
  %y = tgraph.add %v, %b : (tensor<2x3x16xf32>, tensor<1x1x16xf32>) -> tensor<2x3x16xf32>
  %g = tgraph.gelu %y : (tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
  %c = tgraph.cast %g : (tensor<2x3x16xf32>) -> tensor<2x3x16xbf16>
  func.return %c : tensor<2x3x16xbf16>
}
// CHECK-LABEL: func.func @row_bias
// CHECK-NEXT:    %[[B:.*]] = tgraph.reshape %b : (tensor<1x1x16xf32>) -> tensor<16xf32>
// CHECK-NEXT:    %[[E:.*]] = tgraph.matmul_epilogue %x, %w bias %[[B]] activation = "gelu" compute_type = tensor<6x16xf32> : (tensor<6x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<6x16xbf16>
// CHECK-NEXT:    %c = tgraph.reshape %[[E]] : (tensor<6x16xbf16>) -> tensor<2x3x16xbf16>

// Not taken: a reshape that changes the last dim, an addend broadcast over one dim only,
// and a reshaped product with another user.
func.func @stops(%x: tensor<6x8xf32>, %w: tensor<8x16xf32>, %r: tensor<2x3x16xf32>, %c: tensor<2x1x16xf32>) -> (tensor<3x32xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>) {
  %m0 = tgraph.matmul %x, %w : (tensor<6x8xf32>, tensor<8x16xf32>) -> tensor<6x16xf32>
  %v0 = tgraph.reshape %m0 : (tensor<6x16xf32>) -> tensor<3x32xf32>
  %y0 = tgraph.add %v0, %v0 : (tensor<3x32xf32>, tensor<3x32xf32>) -> tensor<3x32xf32>
  %m1 = tgraph.matmul %x, %w : (tensor<6x8xf32>, tensor<8x16xf32>) -> tensor<6x16xf32>
  %v1 = tgraph.reshape %m1 : (tensor<6x16xf32>) -> tensor<2x3x16xf32>
  %y1 = tgraph.add %v1, %c : (tensor<2x3x16xf32>, tensor<2x1x16xf32>) -> tensor<2x3x16xf32>
  %m2 = tgraph.matmul %x, %w : (tensor<6x8xf32>, tensor<8x16xf32>) -> tensor<6x16xf32>
  %v2 = tgraph.reshape %m2 : (tensor<6x16xf32>) -> tensor<2x3x16xf32>
  %y2 = tgraph.add %v2, %r : (tensor<2x3x16xf32>, tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
  func.return %y0, %y1, %y2, %v2 : tensor<3x32xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>
}
// CHECK-LABEL: func.func @stops
// CHECK-NOT:     tgraph.matmul_epilogue
// CHECK:         func.return
