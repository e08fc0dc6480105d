// RUN: not tessera-opt %s -p lower-graph-to-tile 2>&1 | filecheck %s

// A tessera.donate index that is not an argument of the function is a user error that
// names the function, not an IndexError.
func.func @step(%p: tensor<4xf32>, %g: tensor<4xf32>) -> tensor<4xf32> attributes {tessera.donate = array<i64: 0, 7>} {
  %0 = tgraph.sub %p, %g : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK-NOT: internal error
// CHECK: error: lower-graph-to-tile: @step: tessera.donate index 7 is not an argument (the function has 2)
// CHECK-NOT: Traceback
