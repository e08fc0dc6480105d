// RUN: tessera-opt %s -p fuse-matmul-epilogue | filecheck %s
// RUN: tessera-opt %s -p 'fuse-matmul-epilogue{fuse-cast=false}' | filecheck %s --check-prefix=NOCAST
// RUN: tessera-opt %s -p 'fuse-matmul-epilogue{fuse-bias=false fuse-activation=false fuse-cast=false}' | filecheck %s --check-prefix=OFF

// matmul -> + bias -> relu -> cast is one op; the product type is kept as compute_type.
func.func @full(%x: tensor<4x8xbf16>, %w: tensor<16x8xbf16>, %b: tensor<16xbf16>) -> tensor<4x16xf8E4M3FN> {
  %m = tgraph.matmul %x, %w transpose_rhs tile_shape = [64, 64, 32] : (tensor<4x8xbf16>, tensor<16x8xbf16>) -> tensor<4x16xbf16>
  %y = tgraph.add %b, %m : (tensor<16xbf16>, tensor<4x16xbf16>) -> tensor<4x16xbf16>
  %r = tgraph.relu %y : (tensor<4x16xbf16>) -> tensor<4x16xbf16>
  %c = tgraph.cast %r : (tensor<4x16xbf16>) -> tensor<4x16xf8E4M3FN>
  func.return %c : tensor<4x16xf8E4M3FN>
}
// CHECK-LABEL: func.func @full
// CHECK-NEXT:    %c = tgraph.matmul_epilogue %x, %w bias %b transpose_rhs activation = "relu" compute_type = tensor<4x16xbf16> tile_shape = [64, 64, 32] : (tensor<4x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>) -> tensor<4x16xf8E4M3FN>
// CHECK-NEXT:    func.return %c
// NOCAST-LABEL: func.func @full
// NOCAST-NEXT:    %r = tgraph.matmul_epilogue %x, %w bias %b transpose_rhs activation = "relu" tile_shape = [64, 64, 32] : (tensor<4x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>) -> tensor<4x16xbf16>
// NOCAST-NEXT:    %c = tgraph.cast %r
// OFF-LABEL: func.func @full
// OFF-NEXT:      tgraph.matmul %x, %w
// OFF-NEXT:      tgraph.add

// Each step is optional: activation alone, bias alone (on a batched matmul).
func.func @partial(%x: tensor<2x4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<4x16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>) {
  %m0 = tgraph.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %g = tgraph.gelu %m0 : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %m1 = tgraph.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %y = tgraph.add %m1, %b : (tensor<2x4x16xf32>, tensor<4x16xf32>) -> tensor<2x4x16xf32>
  %s = tgraph.silu %y : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  func.return %g, %s : tensor<2x4x16xf32>, tensor<2x4x16xf32>
}
// CHECK-LABEL: func.func @partial
// CHECK-NEXT:    %g = tgraph.matmul_epilogue %x, %w activation = "gelu" : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT:    %s = tgraph.matmul_epilogue %x, %w bias %b activation = "silu" : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT:    func.return %g, %s

// A step whose input has another user ends the chain there: nothing is computed twice.
// An add that broadcasts the product to a larger shape is not a bias.
func.func @stops(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %big: tensor<3x4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<3x4x16xf32>) {
  %m = tgraph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %y = tgraph.add %m, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %r = tgraph.relu %y : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %m2 = tgraph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %z = tgraph.add %m2, %big : (tensor<4x16xf32>, tensor<3x4x16xf32>) -> tensor<3x4x16xf32>
  func.return %y, %r, %z : tensor<4x16xf32>, tensor<4x16xf32>, tensor<3x4x16xf32>
}
// CHECK-LABEL: func.func @stops
// CHECK-NEXT:    %y = tgraph.matmul_epilogue %x, %w bias %b : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %r = tgraph.relu %y
// CHECK-NEXT:    %m2 = tgraph.matmul %x, %w
// CHECK-NEXT:    %z = tgraph.add %m2, %big

// A seeded (stochastic) cast stays separate.
func.func @seeded(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> tensor<4x16xbf16, #tessera.policy<bf16, rounding = stochastic>> {
  %m = tgraph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %c = tgraph.cast %m seed = 5 : (tensor<4x16xf32>) -> tensor<4x16xbf16, #tessera.policy<bf16, rounding = stochastic>>
  func.return %c : tensor<4x16xbf16, #tessera.policy<bf16, rounding = stochastic>>
}
// CHECK-LABEL: func.func @seeded
// CHECK-NEXT:    %m = tgraph.matmul %x, %w
// CHECK-NEXT:    %c = tgraph.cast %m seed = 5

// A bf16 bias widened to an f32 product (torch's addmm: one rounding, at the cast) is
// read by the epilogue as bf16; the widening cast is left to dce. A cast that is not an
// exact widening (f32 -> bf16 -> f32 of an f32 value) is not a bias of this kind.
func.func @narrow_bias(%x: tensor<4x8xbf16>, %w: tensor<16x8xbf16>, %b: tensor<16xbf16>) -> tensor<4x16xbf16> {
  %m = tgraph.matmul %x, %w transpose_rhs : (tensor<4x8xbf16>, tensor<16x8xbf16>) -> tensor<4x16xf32>
  %b32 = tgraph.cast %b : (tensor<16xbf16>) -> tensor<16xf32>
  %y = tgraph.add %m, %b32 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %c = tgraph.cast %y : (tensor<4x16xf32>) -> tensor<4x16xbf16>
  func.return %c : tensor<4x16xbf16>
}
// CHECK-LABEL: func.func @narrow_bias
// CHECK:         tgraph.matmul_epilogue %x, %w bias %b transpose_rhs compute_type = tensor<4x16xf32> : (tensor<4x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>) -> tensor<4x16xbf16>
