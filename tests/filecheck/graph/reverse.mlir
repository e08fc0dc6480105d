// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// tgraph.reverse (stablehlo.reverse, torch.flip): printed back identically, and
// through the generic form.

func.func @f(%w: tensor<64x32x3x3xbf16>, %x: tensor<5xf32>) {
  %0 = tgraph.reverse %w dims = [2, 3] : (tensor<64x32x3x3xbf16>) -> tensor<64x32x3x3xbf16>
  %1 = tgraph.reverse %x dims = [0] : (tensor<5xf32>) -> tensor<5xf32>
  func.return
}
// CHECK:      %0 = tgraph.reverse %w dims = [2, 3] : (tensor<64x32x3x3xbf16>) -> tensor<64x32x3x3xbf16>
// CHECK-NEXT: %1 = tgraph.reverse %x dims = [0] : (tensor<5xf32>) -> tensor<5xf32>

// GENERIC: "tgraph.reverse"(%w) <{dims = array<i64: 2, 3>}> : (tensor<64x32x3x3xbf16>) -> tensor<64x32x3x3xbf16>
