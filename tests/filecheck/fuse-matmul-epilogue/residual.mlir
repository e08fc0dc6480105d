// RUN: tessera-opt %s -p fuse-matmul-epilogue | filecheck %s
// RUN: tessera-opt %s -p 'fuse-matmul-epilogue{fuse-residual=false}' | filecheck %s --check-prefix=OFF

// A linear layer with a bias, then the skip connection (a transformer block's
// out-projection): the bias and the residual both join the epilogue.
func.func @bias_residual(%x: tensor<6x8xbf16>, %w: tensor<16x8xbf16>, %b: tensor<16xbf16>, %r: tensor<6x16xbf16>) -> tensor<6x16xbf16> {
  %m = tgraph.matmul %x, %w transpose_rhs : (tensor<6x8xbf16>, tensor<16x8xbf16>) -> tensor<6x16xbf16>
  %y = tgraph.add %m, %b : (tensor<6x16xbf16>, tensor<16xbf16>) -> tensor<6x16xbf16>
  %z = tgraph.add %r, %y : (tensor<6x16xbf16>, tensor<6x16xbf16>) -> tensor<6x16xbf16>
  func.return %z : tensor<6x16xbf16>
}
// CHECK-LABEL: func.func @bias_residual
// CHECK-NEXT:    %z = tgraph.matmul_epilogue %x, %w bias %b residual %r transpose_rhs : (tensor<6x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>, tensor<6x16xbf16>) -> tensor<6x16xbf16>
// CHECK-NEXT:    func.return %z
// OFF-LABEL: func.func @bias_residual
// OFF-NEXT:      %y = tgraph.matmul_epilogue %x, %w bias %b transpose_rhs
// OFF-NEXT:      %z = tgraph.add %r, %y

// The same on [B, S, D] activations: the bias is added on [M, N], a reshape splits the
// rows, then the residual (reshaped to [M, N]) is added.
func.func @split_residual(%x: tensor<6x8xbf16>, %w: tensor<16x8xbf16>, %b: tensor<16xbf16>, %r: tensor<2x3x16xbf16>) -> tensor<2x3x16xbf16> {
  %m = tgraph.matmul %x, %w transpose_rhs : (tensor<6x8xbf16>, tensor<16x8xbf16>) -> tensor<6x16xbf16>
  %y = tgraph.add %m, %b : (tensor<6x16xbf16>, tensor<16xbf16>) -> tensor<6x16xbf16>
  %v = tgraph.reshape %y : (tensor<6x16xbf16>) -> tensor<2x3x16xbf16>
  %z = tgraph.add %v, %r : (tensor<2x3x16xbf16>, tensor<2x3x16xbf16>) -> tensor<2x3x16xbf16>
  func.return %z : tensor<2x3x16xbf16>
}
// CHECK-LABEL: func.func @split_residual
// CHECK-NEXT:    %[[R:.*]] = tgraph.reshape %r : (tensor<2x3x16xbf16>) -> tensor<6x16xbf16>
// CHECK-NEXT:    %[[E:.*]] = tgraph.matmul_epilogue %x, %w bias %b residual %[[R]] transpose_rhs : (tensor<6x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>, tensor<6x16xbf16>) -> tensor<6x16xbf16>
// CHECK-NEXT:    %z = tgraph.reshape %[[E]] : (tensor<6x16xbf16>) -> tensor<2x3x16xbf16>
// CHECK-NEXT:    func.return %z

// After an activation (no bias): the first add after the activation is the residual,
// and a cast after it joins too.
func.func @act_residual(%x: tensor<6x8xf32>, %w: tensor<8x16xf32>, %r: tensor<6x16xf32>) -> tensor<6x16xbf16> {
  %m = tgraph.matmul %x, %w : (tensor<6x8xf32>, tensor<8x16xf32>) -> tensor<6x16xf32>
  %g = tgraph.gelu %m : (tensor<6x16xf32>) -> tensor<6x16xf32>
  %z = tgraph.add %g, %r : (tensor<6x16xf32>, tensor<6x16xf32>) -> tensor<6x16xf32>
  %c = tgraph.cast %z : (tensor<6x16xf32>) -> tensor<6x16xbf16>
  func.return %c : tensor<6x16xbf16>
}
// CHECK-LABEL: func.func @act_residual
// CHECK-NEXT:    %c = tgraph.matmul_epilogue %x, %w residual %r activation = "gelu" compute_type = tensor<6x16xf32> : (tensor<6x8xf32>, tensor<8x16xf32>, tensor<6x16xf32>) -> tensor<6x16xbf16>

// Not a residual: a broadcast second addend, and a second add whose first result has
// another user.
func.func @stops(%x: tensor<6x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %c: tensor<1x16xf32>, %r: tensor<6x16xf32>) -> (tensor<6x16xf32>, tensor<6x16xf32>, tensor<6x16xf32>) {
  %m0 = tgraph.matmul %x, %w : (tensor<6x8xf32>, tensor<8x16xf32>) -> tensor<6x16xf32>
  %y0 = tgraph.add %m0, %b : (tensor<6x16xf32>, tensor<16xf32>) -> tensor<6x16xf32>
  %z0 = tgraph.add %y0, %c : (tensor<6x16xf32>, tensor<1x16xf32>) -> tensor<6x16xf32>
  %m1 = tgraph.matmul %x, %w : (tensor<6x8xf32>, tensor<8x16xf32>) -> tensor<6x16xf32>
  %y1 = tgraph.add %m1, %b : (tensor<6x16xf32>, tensor<16xf32>) -> tensor<6x16xf32>
  %z1 = tgraph.add %y1, %r : (tensor<6x16xf32>, tensor<6x16xf32>) -> tensor<6x16xf32>
  func.return %z0, %z1, %y1 : tensor<6x16xf32>, tensor<6x16xf32>, tensor<6x16xf32>
}
// CHECK-LABEL: func.func @stops
// CHECK-NEXT:    %y0 = tgraph.matmul_epilogue %x, %w bias %b :
// CHECK-NEXT:    %z0 = tgraph.add %y0, %c
// CHECK-NEXT:    %y1 = tgraph.matmul_epilogue %x, %w bias %b :
// CHECK-NEXT:    %z1 = tgraph.add %y1, %r
