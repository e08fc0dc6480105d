// RUN: not tessera-opt %s -p lower-graph-to-tile 2>&1 | filecheck %s

// A rounding policy the kernels cannot apply is named at its op's location, a one-line
// user error, never a silent nearest-even rounding: here stochastic rounding to int64
// (integer targets are lowered for casts to 8 to 32 bits).

func.func @f(%x: tensor<8xf32>) -> tensor<8xi64, #tessera.policy<i64, rounding = stochastic>> {
  %0 = tgraph.cast %x seed = 1 : (tensor<8xf32>) -> tensor<8xi64, #tessera.policy<i64, rounding = stochastic>>
  func.return %0 : tensor<8xi64, #tessera.policy<i64, rounding = stochastic>>
}
// CHECK-NOT: internal error
// CHECK: policy-errors.mlir:8:3: error: lower-graph-to-tile: tgraph.cast has no Tile IR lowering (a ts.int64 @stochastic_round result: stochastic rounding, saturation and loss scaling are lowered for float storage types, and for casts to integers of 8 to 32 bits)
// CHECK-NOT: Traceback
