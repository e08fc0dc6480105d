// RUN: not tessera-opt %s -p lower-graph-to-tile 2>&1 | filecheck %s

// A max over an empty axis has no value (torch raises too): the op is named, as a
// user error, not a crash of some kernel builder.
func.func @f(%x: tensor<4x0xf32>) -> tensor<4xf32> {
  %0 = tgraph.max %x axes = [1] : (tensor<4x0xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK-NOT: internal error
// CHECK: empty-errors.mlir:6:3: error: lower-graph-to-tile: tgraph.max has no Tile IR lowering (an operand has no elements, the result has some)
// CHECK-NOT: Traceback
