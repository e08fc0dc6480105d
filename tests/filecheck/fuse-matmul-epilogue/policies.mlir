// RUN: tessera-opt %s -p fuse-matmul-epilogue | filecheck %s

// A cast to a rounding policy (here saturating, without a seed) is not folded into the
// matmul's epilogue, whose plain conversion would round to nearest without saturating;
// nor is anything after a product that itself has such a policy.

func.func @f(%a: tensor<4x8xbf16>, %b: tensor<8x16xbf16>, %c: tensor<16xf32>) -> (tensor<4x16xf8E4M3FN, #tessera.policy<f8E4M3FN, saturate>>, tensor<4x16xbf16, #tessera.policy<bf16, saturate>>) {
  %0 = tgraph.matmul %a, %b : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xf32>
  %1 = tgraph.add %0, %c : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = tgraph.cast %1 : (tensor<4x16xf32>) -> tensor<4x16xf8E4M3FN, #tessera.policy<f8E4M3FN, saturate>>
  %3 = tgraph.matmul %a, %b : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xbf16, #tessera.policy<bf16, saturate>>
  %4 = tgraph.relu %3 : (tensor<4x16xbf16, #tessera.policy<bf16, saturate>>) -> tensor<4x16xbf16, #tessera.policy<bf16, saturate>>
  func.return %2, %4 : tensor<4x16xf8E4M3FN, #tessera.policy<f8E4M3FN, saturate>>, tensor<4x16xbf16, #tessera.policy<bf16, saturate>>
}
// CHECK:      %{{.*}} = tgraph.matmul_epilogue %a, %b bias %c : {{.*}} -> tensor<4x16xf32>
// CHECK-NEXT: %{{.*}} = tgraph.cast %{{.*}} : (tensor<4x16xf32>) -> tensor<4x16xf8E4M3FN, #tessera.policy<f8E4M3FN, saturate>>
// CHECK-NEXT: %{{.*}} = tgraph.matmul %a, %b : {{.*}} -> tensor<4x16xbf16, #tessera.policy<bf16, saturate>>
// CHECK-NEXT: %{{.*}} = tgraph.relu
