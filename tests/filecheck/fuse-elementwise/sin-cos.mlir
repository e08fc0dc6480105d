// RUN: tessera-opt %s -p fuse-elementwise | filecheck %s

// A rotary embedding's cos and sin of the angles fuse with the products around them into
// one tgraph.fused op (they are FUSIBLE_UNARY_OPS).
func.func @rope(%q: tensor<8x16xf32>, %r: tensor<8x16xf32>, %ang: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %c = tgraph.cos %ang : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %s = tgraph.sin %ang : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %0 = tgraph.mul %q, %c : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %1 = tgraph.mul %r, %s : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %2 = tgraph.add %0, %1 : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %2 : tensor<8x16xf32>
}
// CHECK-LABEL: func.func @rope
// CHECK-NEXT:    %[[R:[0-9a-z_]+]] = tgraph.fused %ang, %r, %q : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32> {
// CHECK-NEXT:    ^bb0(%[[A:[0-9a-z_]+]]: tensor<8x16xf32>, %{{.*}}: tensor<8x16xf32>, %{{.*}}: tensor<8x16xf32>):
// CHECK-NEXT:      %s = tgraph.sin %[[A]]
// CHECK-NEXT:      tgraph.mul
// CHECK-NEXT:      %c = tgraph.cos %[[A]]
// CHECK-NEXT:      tgraph.mul
// CHECK-NEXT:      tgraph.add
// CHECK-NEXT:      tgraph.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[R]]
