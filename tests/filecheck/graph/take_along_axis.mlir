// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// tgraph.take_along_axis (torch.gather): printed back identically, and through the
// generic form; indices smaller than the input outside the axis are allowed.

func.func @f(%x: tensor<4x8xf32>, %i: tensor<4x1xi64>, %y: tensor<2x3x5xbf16>, %j: tensor<2x7x4xi32>) {
  %0 = tgraph.take_along_axis %x, %i axis = 1 : (tensor<4x8xf32>, tensor<4x1xi64>) -> tensor<4x1xf32>
  %1 = tgraph.take_along_axis %y, %j axis = -2 : (tensor<2x3x5xbf16>, tensor<2x7x4xi32>) -> tensor<2x7x4xbf16>
  func.return
}
// CHECK:      %0 = tgraph.take_along_axis %x, %i axis = 1 : (tensor<4x8xf32>, tensor<4x1xi64>) -> tensor<4x1xf32>
// CHECK-NEXT: %1 = tgraph.take_along_axis %y, %j axis = -2 : (tensor<2x3x5xbf16>, tensor<2x7x4xi32>) -> tensor<2x7x4xbf16>

// GENERIC: "tgraph.take_along_axis"(%x, %i) <{axis = 1 : i64}> : (tensor<4x8xf32>, tensor<4x1xi64>) -> tensor<4x1xf32>
