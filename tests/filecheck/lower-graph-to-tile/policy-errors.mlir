// RUN: not tessera-opt %s -p lower-graph-to-tile 2>&1 | filecheck %s

// Stochastic rounding to an integer type has no kernel: the cast is named at its
// location, a one-line user error, never a silent nearest-even rounding.

func.func @f(%x: tensor<8xf32>) -> tensor<8xi8, #tessera.policy<i8, rounding = stochastic>> {
  %0 = tgraph.cast %x seed = 1 : (tensor<8xf32>) -> tensor<8xi8, #tessera.policy<i8, rounding = stochastic>>
  func.return %0 : tensor<8xi8, #tessera.policy<i8, rounding = stochastic>>
}
// CHECK-NOT: internal error
// CHECK: policy-errors.mlir:7:3: error: lower-graph-to-tile: tgraph.cast has no Tile IR lowering (a ts.int8 @stochastic_round result: stochastic rounding, saturation and loss scaling are lowered for float storage types only
// CHECK-NOT: Traceback
