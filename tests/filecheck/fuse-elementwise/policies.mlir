// RUN: tessera-opt %s -p fuse-elementwise | filecheck %s

// An op whose result is stored by a rounding policy (stochastic rounding, saturation,
// loss scale) keeps its own op: its kernel applies the policy. Ops around it still fuse;
// a plain policy (here @accum) does not stop fusion.

func.func @f(%x: tensor<8xbf16>, %y: tensor<8xbf16>) -> tensor<8xf32> {
  %0 = tgraph.mul %x, %y : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  %1 = tgraph.cast %0 seed = 3 : (tensor<8xbf16>) -> tensor<8xbf16, #tessera.policy<bf16, rounding = stochastic>>
  %2 = tgraph.relu %1 : (tensor<8xbf16, #tessera.policy<bf16, rounding = stochastic>>) -> tensor<8xbf16, #tessera.policy<bf16, rounding = stochastic>>
  %3 = tgraph.cast %2 : (tensor<8xbf16, #tessera.policy<bf16, rounding = stochastic>>) -> tensor<8xf32, #tessera.policy<f32, accum = f32>>
  %4 = tgraph.exp %3 : (tensor<8xf32, #tessera.policy<f32, accum = f32>>) -> tensor<8xf32, #tessera.policy<f32, accum = f32>>
  %5 = tgraph.cast %4 : (tensor<8xf32, #tessera.policy<f32, accum = f32>>) -> tensor<8xf32>
  func.return %5 : tensor<8xf32>
}
// CHECK:      %0 = tgraph.mul %x, %y
// CHECK-NEXT: %1 = tgraph.cast %0 seed = 3
// CHECK-NEXT: %2 = tgraph.relu %1
// CHECK-NEXT: %3 = tgraph.fused %2 : (tensor<8xbf16, #tessera.policy<bf16, rounding = stochastic>>) -> tensor<8xf32> {
// CHECK:        tgraph.cast
// CHECK-NEXT:   tgraph.exp
// CHECK-NEXT:   tgraph.cast
// CHECK:      func.return %3
