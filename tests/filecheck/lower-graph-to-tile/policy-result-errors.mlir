// RUN: not tessera-opt %s -p lower-graph-to-tile 2>&1 | filecheck %s

// A softmax whose result type carries a rounding policy: the kernel computes and rounds
// in one pass, so the policy cannot be applied after it; the op is named.

func.func @f(%x: tensor<4x8xbf16>) -> tensor<4x8xbf16, #tessera.policy<bf16, saturate>> {
  %0 = tgraph.softmax %x axis = 1 : (tensor<4x8xbf16>) -> tensor<4x8xbf16, #tessera.policy<bf16, saturate>>
  func.return %0 : tensor<4x8xbf16, #tessera.policy<bf16, saturate>>
}
// CHECK-NOT: internal error
// CHECK: policy-result-errors.mlir:7:3: error: lower-graph-to-tile: tgraph.softmax has no Tile IR lowering (a ts.bf16 @saturate result {{.*}}; cast the result to the policy instead)
// CHECK-NOT: Traceback
