// RUN: not tessera-opt %s -p lower-graph-to-tile 2>&1 | filecheck %s

// An op without a Tile IR lowering (here: an integer conv2d) is named, as a one-line
// user error (exit 1), not an internal error.

func.func @f(%x: tensor<1x3x8x8xi32>, %k: tensor<4x3x3x3xi32>) -> tensor<1x4x8x8xi32> {
  %0 = tgraph.conv2d %x, %k stride = [1, 1] padding = [1, 1] : tensor<1x3x8x8xi32>, tensor<4x3x3x3xi32> -> tensor<1x4x8x8xi32>
  func.return %0 : tensor<1x4x8x8xi32>
}
// CHECK-NOT: internal error
// CHECK: errors.mlir:7:3: error: lower-graph-to-tile: tgraph.conv2d has no Tile IR lowering
// CHECK-NOT: Traceback
