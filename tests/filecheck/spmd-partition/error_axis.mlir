// RUN: not tessera-opt %s -p spmd-partition 2>&1 | filecheck %s

func.func @bad_axis(%w: tensor<8x32xf32> {tessera.shard = #tessera.shard<[[ep], []]>}) -> tensor<8x32xf32> attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  func.return %w : tensor<8x32xf32>
}
// CHECK: @bad_axis: argument 0: mesh has no axis 'ep' (axes: dp, tp)
