// RUN: tessera-opt %s -p spmd-partition | filecheck %s

// 10 rows over tp = 4: padded blocks of 3 rows. The elementwise op keeps the uneven
// split; the reduction over the split dim first gathers it and drops the padding.
func.func @uneven(%w: tensor<10x32xf32> {tessera.shard = #tessera.shard<[[tp], []]>}) -> tensor<32xf32> attributes {tessera.mesh = #tessera.mesh<tp = 4>} {
  %e = tgraph.exp %w : (tensor<10x32xf32>) -> tensor<10x32xf32>
  %s = tgraph.sum %e axes = [0] : (tensor<10x32xf32>) -> tensor<32xf32>
  func.return %s : tensor<32xf32>
}
// CHECK: func.func @uneven(%w: tensor<3x32xf32> {{.*}}) -> tensor<32xf32>
// CHECK-NEXT: %e = tgraph.exp %w {{.*}} : (tensor<3x32xf32>) -> tensor<3x32xf32>
// CHECK-NEXT: %0 = tgraph.all_gather %e axis = "tp" dim = 0 {{.*}} : (tensor<3x32xf32>) -> tensor<12x32xf32>
// CHECK-NEXT: %1 = tgraph.slice %0 start = [0, 0] limit = [10, 32] stride = [1, 1] {{.*}} -> tensor<10x32xf32>
// CHECK-NEXT: %s = tgraph.sum %1 axes = [0] {{.*}} : (tensor<10x32xf32>) -> tensor<32xf32>
// CHECK-NEXT: func.return %s

// Splitting a replicated value unevenly pads it with zeros first.
func.func @pad(%x: tensor<4x10xf32>, %b: tensor<10xf32> {tessera.shard = #tessera.shard<[[tp]]>}) -> (tensor<4x10xf32> {tessera.shard = #tessera.shard<[[], [tp]]>}) attributes {tessera.mesh = #tessera.mesh<tp = 4>} {
  %z = tgraph.add %x, %b : (tensor<4x10xf32>, tensor<10xf32>) -> tensor<4x10xf32>
  func.return %z : tensor<4x10xf32>
}
// CHECK: func.func @pad(%x: tensor<4x10xf32>, %b: tensor<3xf32> {{.*}}) -> (tensor<4x3xf32> {{.*}})
// CHECK-NEXT: %0 = tgraph.constant dense<0.000000e+00> : tensor<f32> {{.*}} -> tensor<4x2xf32>
// CHECK-NEXT: %1 = tgraph.concat %x, %0 axis = 1 {{.*}} : (tensor<4x10xf32>, tensor<4x2xf32>) -> tensor<4x12xf32>
// CHECK-NEXT: %2 = tgraph.all_slice %1 axis = "tp" dim = 1 {{.*}} : (tensor<4x12xf32>) -> tensor<4x3xf32>
// CHECK-NEXT: %z = tgraph.add %2, %b {{.*}} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>

// RUN: tessera-opt %s -p shard-propagation | filecheck %s --check-prefix=PROP
// PROP: %e = tgraph.exp %w {tessera.shard = [#tessera.shard<{{\[\[tp\], \[\]\]}}>]}
// PROP: %s = tgraph.sum %e axes = [0] {tessera.shard = [#tessera.shard<{{\[\[\]\]}}>]}
