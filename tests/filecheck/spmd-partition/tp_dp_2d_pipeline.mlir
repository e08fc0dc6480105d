// RUN: tessera-opt %s -p spmd-partition | filecheck %s

// Column-parallel GEMM: local weight [16, 8]; the result is gathered along columns.
func.func @col(%x: tensor<8x16xf32>, %w: tensor<16x32xf32> {tessera.shard = #tessera.shard<[[], [tp]]>}) -> tensor<8x32xf32> attributes {tessera.mesh = #tessera.mesh<tp = 4>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  func.return %y : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @col(%x: tensor<8x16xf32>, %w: tensor<16x8xf32>
// CHECK-SAME: tessera.spmd = "local"
// CHECK-NEXT: %y = tgraph.matmul %x, %w {{.*}} : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %0 = tgraph.all_gather %y axis = "tp" dim = 1 {{.*}} : (tensor<8x8xf32>) -> tensor<8x32xf32>
// CHECK-NEXT: func.return %0 : tensor<8x32xf32>

// Row-parallel GEMM: partial sums, all_reduce before the bias.
func.func @row(%x: tensor<8x16xf32> {tessera.shard = #tessera.shard<[[], [tp]]>}, %w: tensor<16x32xf32> {tessera.shard = #tessera.shard<[[tp], []]>}, %b: tensor<32xf32>) -> tensor<8x32xf32> attributes {tessera.mesh = #tessera.mesh<tp = 4>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = tgraph.add %y, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  func.return %z : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @row(%x: tensor<8x4xf32> {{.*}}, %w: tensor<4x32xf32>
// CHECK-NEXT: %y = tgraph.matmul %x, %w {{.*}} -> tensor<8x32xf32>
// CHECK-NEXT: %0 = tgraph.all_reduce %y op = "sum" axis = "tp"
// CHECK-NEXT: %z = tgraph.add %0, %b

// Row-parallel GEMM whose result stays split by rows: a reduce_scatter.
func.func @row_rs(%x: tensor<8x16xf32> {tessera.shard = #tessera.shard<[[], [tp]]>}, %w: tensor<16x32xf32> {tessera.shard = #tessera.shard<[[tp], []]>}) -> (tensor<8x32xf32> {tessera.shard = #tessera.shard<[[tp], []]>}) attributes {tessera.mesh = #tessera.mesh<tp = 4>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  func.return %y : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @row_rs
// CHECK-SAME: -> (tensor<2x32xf32>
// CHECK: %0 = tgraph.reduce_scatter %y op = "sum" axis = "tp" dim = 0 {{.*}} : (tensor<8x32xf32>) -> tensor<2x32xf32>
// CHECK-NEXT: func.return %0 : tensor<2x32xf32>

// DP gradients: the weight update all_reduces the gradient over dp, the loss is a mean.
func.func @dp(%x: tensor<8x4xf32> {tessera.shard = #tessera.shard<[[dp], []]>}, %t: tensor<8x1xf32> {tessera.shard = #tessera.shard<[[dp], []]>}, %w: tensor<4x1xf32>) -> (tensor<4x1xf32>, tensor<f32>) attributes {tessera.mesh = #tessera.mesh<dp = 2>} {
  %p = tgraph.matmul %x, %w : (tensor<8x4xf32>, tensor<4x1xf32>) -> tensor<8x1xf32>
  %e = tgraph.sub %p, %t : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %g = tgraph.matmul %x, %e transpose_lhs : (tensor<8x4xf32>, tensor<8x1xf32>) -> tensor<4x1xf32>
  %wn = tgraph.sub %w, %g : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %l = tgraph.mse %p, %t : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<f32>
  func.return %wn, %l : tensor<4x1xf32>, tensor<f32>
}
// CHECK-LABEL: func.func @dp(%x: tensor<4x4xf32> {{.*}}, %t: tensor<4x1xf32> {{.*}}, %w: tensor<4x1xf32>)
// CHECK-NEXT: %p = tgraph.matmul %x, %w {{.*}} -> tensor<4x1xf32>
// CHECK-NEXT: %e = tgraph.sub %p, %t
// CHECK-NEXT: %g = tgraph.matmul %x, %e transpose_lhs {{.*}} : (tensor<4x4xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
// CHECK-NEXT: %0 = tgraph.all_reduce %g op = "sum" axis = "dp"
// CHECK-NEXT: %wn = tgraph.sub %w, %0
// CHECK-NEXT: %l = tgraph.mse %p, %t
// CHECK-NEXT: %1 = tgraph.all_reduce %l op = "mean" axis = "dp"
// CHECK-NEXT: func.return %wn, %1

// 2D: a 2D-sharded weight; the replicated input is sliced (all_slice) to match its
// split rows, the dp partial is reduced and the tp columns gathered.
func.func @w2d(%x: tensor<8x16xf32>, %w: tensor<16x32xf32> {tessera.shard = #tessera.shard<[[dp], [tp]]>}) -> tensor<8x32xf32> attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 2>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  func.return %y : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @w2d(%x: tensor<8x16xf32>, %w: tensor<8x16xf32>
// CHECK-NEXT: %0 = tgraph.all_slice %x axis = "dp" dim = 1 {{.*}} : (tensor<8x16xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %y = tgraph.matmul %0, %w {{.*}} -> tensor<8x16xf32>
// CHECK-NEXT: %1 = tgraph.all_reduce %y op = "sum" axis = "dp"
// CHECK-NEXT: %2 = tgraph.all_gather %1 axis = "tp" dim = 1 {{.*}} -> tensor<8x32xf32>

// Moving a mesh axis between dims: all_to_all (rows over tp -> columns over tp).
func.func @a2a(%x: tensor<8x16xf32> {tessera.shard = #tessera.shard<[[tp], []]>}) -> (tensor<8x16xf32> {tessera.shard = #tessera.shard<[[], [tp]]>}) attributes {tessera.mesh = #tessera.mesh<tp = 4>} {
  %s = tgraph.softmax %x axis = 0 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %t = tgraph.exp %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %t : tensor<8x16xf32>
}
// CHECK-LABEL: func.func @a2a
// CHECK-NEXT: %0 = tgraph.all_gather %x axis = "tp" dim = 0
// CHECK-NEXT: %s = tgraph.softmax %0 axis = 0
// CHECK-NEXT: %t = tgraph.exp %x {{.*}} : (tensor<2x16xf32>) -> tensor<2x16xf32>
// CHECK-NEXT: %1 = tgraph.all_to_all %t axis = "tp" split_dim = 1 concat_dim = 0 {{.*}} : (tensor<2x16xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: func.return %1 : tensor<8x4xf32>

// Two pipeline stages: the stage-0 activation is sent to stage 1.
func.func @pipe(%x: tensor<4x8xf32>, %w1: tensor<8x16xf32>, %w2: tensor<16x8xf32>) -> tensor<4x8xf32> attributes {tessera.mesh = #tessera.mesh<pp = 2>} {
  %h = tgraph.matmul %x, %w1 {tessera.stage = 0 : i64} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %y = tgraph.matmul %h, %w2 {tessera.stage = 1 : i64} : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK-LABEL: func.func @pipe
// CHECK-NEXT: %h = tgraph.matmul %x, %w1 {{.*}}tessera.stage = 0 : i64
// CHECK-NEXT: tgraph.send %h axis = "pp" peer = 1 {tessera.stage = 0 : i64} : tensor<4x16xf32>
// CHECK-NEXT: %0 = tgraph.recv axis = "pp" peer = -1 {{.*}}tessera.stage = 1 : i64{{.*}} : tensor<4x16xf32>
// CHECK-NEXT: %y = tgraph.matmul %0, %w2 {{.*}}tessera.stage = 1 : i64
