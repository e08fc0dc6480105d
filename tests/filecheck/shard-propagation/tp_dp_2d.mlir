// RUN: tessera-opt %s -p shard-propagation | filecheck %s

// Column-sharded weight: the product is split over tp along its columns.
func.func @col(%x: tensor<8x16xf32>, %w: tensor<16x32xf32> {tessera.shard = #tessera.shard<[[], [tp]]>}) -> tensor<8x32xf32> attributes {tessera.mesh = #tessera.mesh<tp = 4>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %r = tgraph.gelu %y : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %r : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @col
// CHECK: tgraph.matmul %x, %w {tessera.shard = [#tessera.shard<{{\[\[}}], [tp]]>]}
// CHECK: tgraph.gelu %y {tessera.shard = [#tessera.shard<{{\[\[}}], [tp]]>]}

// Row-sharded: the contraction dim is split, so the product is a partial sum; the
// bias add needs the reduced value.
func.func @row(%x: tensor<8x16xf32> {tessera.shard = #tessera.shard<[[], [tp]]>}, %w: tensor<16x32xf32> {tessera.shard = #tessera.shard<[[tp], []]>}, %b: tensor<32xf32>) -> tensor<8x32xf32> attributes {tessera.mesh = #tessera.mesh<tp = 4>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %n = tgraph.neg %y : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %z = tgraph.add %n, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  func.return %z : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @row
// CHECK: tgraph.matmul %x, %w {tessera.shard = [#tessera.shard<{{\[\[}}], []], partial = sum over [tp]>]}
// CHECK: tgraph.neg %y {tessera.shard = [#tessera.shard<{{\[\[}}], []], partial = sum over [tp]>]}
// CHECK: tgraph.add %n, %b {tessera.shard = [#tessera.shard<{{\[\[}}], []]>]}

// Data parallel: the batch is split over dp; the weight gradient X^T e is a partial
// sum over dp, the loss a partial mean.
func.func @dp(%x: tensor<8x4xf32> {tessera.shard = #tessera.shard<[[dp], []]>}, %t: tensor<8x1xf32> {tessera.shard = #tessera.shard<[[dp], []]>}, %w: tensor<4x1xf32>) -> (tensor<4x1xf32>, tensor<f32>) attributes {tessera.mesh = #tessera.mesh<dp = 2>} {
  %p = tgraph.matmul %x, %w : (tensor<8x4xf32>, tensor<4x1xf32>) -> tensor<8x1xf32>
  %e = tgraph.sub %p, %t : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %g = tgraph.matmul %x, %e transpose_lhs : (tensor<8x4xf32>, tensor<8x1xf32>) -> tensor<4x1xf32>
  %l = tgraph.mse %p, %t : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<f32>
  func.return %g, %l : tensor<4x1xf32>, tensor<f32>
}
// CHECK-LABEL: func.func @dp
// CHECK: tgraph.matmul %x, %w {tessera.shard = [#tessera.shard<{{\[\[}}dp], []]>]}
// CHECK: tgraph.sub %p, %t {tessera.shard = [#tessera.shard<{{\[\[}}dp], []]>]}
// CHECK: tgraph.matmul %x, %e transpose_lhs {tessera.shard = [#tessera.shard<{{\[\[}}], []], partial = sum over [dp]>]}
// CHECK: tgraph.mse %p, %t {tessera.shard = [#tessera.shard<[], partial = mean over [dp]>]}

// 2D: rows over dp, weight columns over tp; a row reduction leaves a tp partial sum.
func.func @two_d(%x: tensor<8x16xf32> {tessera.shard = #tessera.shard<[[dp], []]>}, %w: tensor<16x32xf32> {tessera.shard = #tessera.shard<[[], [tp]]>}) -> tensor<8xf32> attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 2>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %s = tgraph.sum %y axes = [1] : (tensor<8x32xf32>) -> tensor<8xf32>
  func.return %s : tensor<8xf32>
}
// CHECK-LABEL: func.func @two_d
// CHECK: tgraph.matmul %x, %w {tessera.shard = [#tessera.shard<{{\[\[}}dp], [tp]]>]}
// CHECK: tgraph.sum %y axes = [1] {tessera.shard = [#tessera.shard<{{\[\[}}dp]], partial = sum over [tp]>]}

// Collectives written by the user make a per-rank program; the pass follows them.
func.func @guide(%x: tensor<8x16xf32>, %w: tensor<16x8xf32> {tessera.shard = #tessera.shard<[[], [tp]]>}) -> tensor<8x32xf32> attributes {tessera.mesh = #tessera.mesh<tp = 4>} {
  %y_local = tgraph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %y = tgraph.all_gather %y_local axis = "tp" dim = 1 : (tensor<8x8xf32>) -> tensor<8x32xf32>
  func.return %y : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @guide
// CHECK: tgraph.matmul %x, %w {tessera.shard = [#tessera.shard<{{\[\[}}], [tp]]>]}
// CHECK: tgraph.all_gather %y_local axis = "tp" dim = 1 {tessera.shard = [#tessera.shard<{{\[\[}}], []]>]}
