// RUN: not tessera-opt %s -p spmd-partition 2>&1 | filecheck %s

func.func @bad_stage(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {tessera.mesh = #tessera.mesh<pp = 2>} {
  %h = tgraph.exp %x {tessera.stage = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = tgraph.exp %h {tessera.stage = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: tgraph.exp: runs at stage 0 but uses a value computed at later stage 1
