// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// tgraph.erf and tgraph.logsumexp (the ops of the add-an-op recipe in docs/ARCHITECTURE.md):
// printed back identically, and through the generic form.

func.func @f(%x: tensor<4x8xf32>, %y: tensor<2x3x5xbf16>) {
  %0 = tgraph.erf %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tgraph.logsumexp %x axes = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
  %2 = tgraph.logsumexp %y axes = [0, 2] keepdims : (tensor<2x3x5xbf16>) -> tensor<1x3x1xbf16>
  %3 = tgraph.logsumexp %x axes = [] : (tensor<4x8xf32>) -> tensor<f32>
  func.return
}
// CHECK:      %0 = tgraph.erf %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %1 = tgraph.logsumexp %x axes = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
// CHECK-NEXT: %2 = tgraph.logsumexp %y axes = [0, 2] keepdims : (tensor<2x3x5xbf16>) -> tensor<1x3x1xbf16>
// CHECK-NEXT: %3 = tgraph.logsumexp %x axes = [] : (tensor<4x8xf32>) -> tensor<f32>

// GENERIC: "tgraph.erf"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC: "tgraph.logsumexp"(%x) <{axes = array<i64: 1>}> : (tensor<4x8xf32>) -> tensor<4xf32>
// GENERIC: "tgraph.logsumexp"(%y) <{axes = array<i64: 0, 2>, keepdims}> : (tensor<2x3x5xbf16>) -> tensor<1x3x1xbf16>
