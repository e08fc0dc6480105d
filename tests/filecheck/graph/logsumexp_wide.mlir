// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s

// tgraph.logsumexp of bf16/f16 rows may give an f32 result (the loss of 16-bit logits).

func.func @f(%x: tensor<4x8xbf16>, %y: tensor<3x5xf16>) {
  %0 = tgraph.logsumexp %x axes = [1] : (tensor<4x8xbf16>) -> tensor<4xf32>
  %1 = tgraph.logsumexp %y axes = [1] keepdims : (tensor<3x5xf16>) -> tensor<3x1xf32>
  func.return
}
// CHECK:      %0 = tgraph.logsumexp %x axes = [1] : (tensor<4x8xbf16>) -> tensor<4xf32>
// CHECK-NEXT: %1 = tgraph.logsumexp %y axes = [1] keepdims : (tensor<3x5xf16>) -> tensor<3x1xf32>
