// RUN: tessera-opt %s -p algebraic-simplify | filecheck %s
// RUN: tessera-opt %s -p 'algebraic-simplify{fold-reshapes=false fold-casts=false}' | filecheck %s --check-prefix=OFF

func.func @reshapes(%x: tensor<2x3x4xf32>) -> (tensor<6x4xf32>, tensor<2x3x4xf32>) {
  %0 = tgraph.reshape %x : (tensor<2x3x4xf32>) -> tensor<24xf32>
  %1 = tgraph.reshape %0 : (tensor<24xf32>) -> tensor<4x6xf32>
  %2 = tgraph.reshape %1 : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %3 = tgraph.reshape %x : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %4 = tgraph.reshape %3 : (tensor<6x4xf32>) -> tensor<2x3x4xf32>
  func.return %2, %4 : tensor<6x4xf32>, tensor<2x3x4xf32>
}
// CHECK-LABEL: func.func @reshapes
// CHECK-NEXT:    %0 = tgraph.reshape %x : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
// CHECK-NEXT:    func.return %0, %x
// OFF-LABEL: func.func @reshapes
// OFF-COUNT-5: tgraph.reshape

// Widening then narrowing back is the identity; a widening then any cast is one cast.
func.func @casts(%h: tensor<4xf16>, %b: tensor<4xbf16>, %e: tensor<4xf8E4M3FN>, %i: tensor<4xi8>) -> (tensor<4xf16>, tensor<4xbf16>, tensor<4xf8E4M3FN>, tensor<4xi8>, tensor<4xbf16>, tensor<4xf16>) {
  %0 = tgraph.cast %h : (tensor<4xf16>) -> tensor<4xf32>
  %1 = tgraph.cast %0 : (tensor<4xf32>) -> tensor<4xf16>
  %2 = tgraph.cast %b : (tensor<4xbf16>) -> tensor<4xf64>
  %3 = tgraph.cast %2 : (tensor<4xf64>) -> tensor<4xbf16>
  %4 = tgraph.cast %e : (tensor<4xf8E4M3FN>) -> tensor<4xf16>
  %5 = tgraph.cast %4 : (tensor<4xf16>) -> tensor<4xf8E4M3FN>
  %6 = tgraph.cast %i : (tensor<4xi8>) -> tensor<4xf32>
  %7 = tgraph.cast %6 : (tensor<4xf32>) -> tensor<4xi8>
  %8 = tgraph.cast %0 : (tensor<4xf32>) -> tensor<4xbf16>
  %9 = tgraph.cast %h : (tensor<4xf16>) -> tensor<4xf16>
  func.return %1, %3, %5, %7, %8, %9 : tensor<4xf16>, tensor<4xbf16>, tensor<4xf8E4M3FN>, tensor<4xi8>, tensor<4xbf16>, tensor<4xf16>
}
// CHECK-LABEL: func.func @casts
// CHECK-NEXT:    %0 = tgraph.cast %h : (tensor<4xf16>) -> tensor<4xbf16>
// CHECK-NEXT:    func.return %h, %b, %e, %i, %0, %h

// Narrowing first loses information: no fold. Nor when a policy is involved, or for a
// stochastic cast with a seed.
func.func @inexact(%x: tensor<4xf32>, %i: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = tgraph.cast %x : (tensor<4xf32>) -> tensor<4xf16>
  %1 = tgraph.cast %0 : (tensor<4xf16>) -> tensor<4xf32>
  %2 = tgraph.cast %i : (tensor<4xi32>) -> tensor<4xf32>
  %3 = tgraph.cast %2 : (tensor<4xf32>) -> tensor<4xi32>
  %4 = tgraph.cast %x : (tensor<4xf32>) -> tensor<4xf32, #tessera.policy<f32, loss_scale = 128.0>>
  %5 = tgraph.cast %4 : (tensor<4xf32, #tessera.policy<f32, loss_scale = 128.0>>) -> tensor<4xf32>
  %6 = tgraph.cast %x seed = 3 : (tensor<4xf32>) -> tensor<4xf32>
  func.return %1, %3, %5, %6 : tensor<4xf32>, tensor<4xi32>, tensor<4xf32>, tensor<4xf32>
}
// CHECK-LABEL: func.func @inexact
// CHECK-NEXT:    %0 = tgraph.cast %x : (tensor<4xf32>) -> tensor<4xf16>
// CHECK-NEXT:    %1 = tgraph.cast %0 : (tensor<4xf16>) -> tensor<4xf32>
// CHECK-NEXT:    %2 = tgraph.cast %i : (tensor<4xi32>) -> tensor<4xf32>
// CHECK-NEXT:    %3 = tgraph.cast %2 : (tensor<4xf32>) -> tensor<4xi32>
// CHECK-NEXT:    %4 = tgraph.cast %x : (tensor<4xf32>) -> tensor<4xf32, #tessera.policy<f32, loss_scale = 128.0>>
// CHECK-NEXT:    %5 = tgraph.cast %4
// CHECK-NEXT:    %6 = tgraph.cast %x seed = 3
