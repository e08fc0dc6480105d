// RUN: not tessera-opt %s -p spmd-partition 2>&1 | filecheck %s

func.func @bad_dim(%w: tensor<10x32xf32> {tessera.shard = #tessera.shard<[[tp], []]>}) -> tensor<10x32xf32> attributes {tessera.mesh = #tessera.mesh<tp = 4>} {
  func.return %w : tensor<10x32xf32>
}
// CHECK: @bad_dim: argument 0: dim 0 of size 10 is not divisible by mesh axes 'tp' (4) = 4 parts
