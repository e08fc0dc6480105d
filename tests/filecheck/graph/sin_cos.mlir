// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// tgraph.sin and tgraph.cos: printed back identically, and through the generic form.

func.func @f(%x: tensor<4x8xf32>, %y: tensor<2x3xbf16>, %z: tensor<5xf64>) {
  %0 = tgraph.sin %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tgraph.cos %y : (tensor<2x3xbf16>) -> tensor<2x3xbf16>
  %2 = tgraph.sin %z : (tensor<5xf64>) -> tensor<5xf64>
  func.return
}
// CHECK:      %0 = tgraph.sin %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %1 = tgraph.cos %y : (tensor<2x3xbf16>) -> tensor<2x3xbf16>
// CHECK-NEXT: %2 = tgraph.sin %z : (tensor<5xf64>) -> tensor<5xf64>

// GENERIC: "tgraph.sin"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC: "tgraph.cos"(%y) : (tensor<2x3xbf16>) -> tensor<2x3xbf16>
