// RUN: not tessera-opt %s -p lower-graph-to-tile 2>&1 | filecheck %s

// A collective of a pipeline stage (tessera.stage) is not lowered: a lowered host function
// runs every op on every rank; staged programs run through tessera.dist.segments.

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {tessera.mesh = #tessera.mesh<pp = 2>} {
  tgraph.send %x axis = "pp" peer = 1 {tessera.stage = 0 : i64} : tensor<4xf32>
  %y = tgraph.recv axis = "pp" peer = -1 {tessera.stage = 1 : i64} : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK-NOT: internal error
// CHECK: collectives-errors.mlir:7:3: error: lower-graph-to-tile: tgraph.send has no Tile IR lowering (ops of a pipeline stage, tessera.stage, run through tessera.dist.segments)
// CHECK-NOT: Traceback
