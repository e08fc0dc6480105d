// RUN: tessera-opt %s -p fuse-elementwise | filecheck %s

// A broadcast is a producer: copied into each elementwise consumer (reading its smaller
// input costs nothing more), never materialized for them; one that a matmul reads stays.
func.func @f(%x: tensor<8x64xf32>, %s: tensor<8x1xf32>, %w: tensor<64x16xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x16xf32>) {
  %b = tgraph.broadcast %s : (tensor<8x1xf32>) -> tensor<8x64xf32>
  %0 = tgraph.mul %x, %b : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %1 = tgraph.exp %0 : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %2 = tgraph.sub %x, %b : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %3 = tgraph.matmul %b, %w : (tensor<8x64xf32>, tensor<64x16xf32>) -> tensor<8x16xf32>
  func.return %1, %2, %3 : tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x16xf32>
}
// CHECK-LABEL: func.func @f
// CHECK:      %[[B:.*]] = tgraph.broadcast %s : (tensor<8x1xf32>) -> tensor<8x64xf32>
// CHECK:      tgraph.fused %s, %x
// CHECK-NEXT: ^{{.*}}(%[[S1:.*]]: tensor<8x1xf32>, %{{.*}}: tensor<8x64xf32>):
// CHECK-NEXT:   tgraph.broadcast %[[S1]]
// CHECK:        tgraph.exp
// CHECK:      tgraph.fused %s, %x
// CHECK:        tgraph.broadcast
// CHECK:        tgraph.sub
// CHECK:      tgraph.matmul %[[B]], %w

// The rule is the cost, not the op: an add of a column and a row (both smaller than its
// result) is copied into its elementwise consumer too, while the matmul keeps it.
func.func @outer(%c: tensor<8x1xf32>, %r: tensor<1x64xf32>, %w: tensor<64x16xf32>) -> (tensor<8x64xf32>, tensor<8x16xf32>) {
  %0 = tgraph.add %c, %r : (tensor<8x1xf32>, tensor<1x64xf32>) -> tensor<8x64xf32>
  %1 = tgraph.exp %0 : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %2 = tgraph.matmul %0, %w : (tensor<8x64xf32>, tensor<64x16xf32>) -> tensor<8x16xf32>
  func.return %1, %2 : tensor<8x64xf32>, tensor<8x16xf32>
}
// CHECK-LABEL: func.func @outer
// CHECK:      %[[SUM:.*]] = tgraph.add %c, %r
// CHECK:      tgraph.fused %c, %r
// CHECK:        tgraph.add
// CHECK:        tgraph.exp
// CHECK:      tgraph.matmul %[[SUM]], %w
