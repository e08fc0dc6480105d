// RUN: tessera-opt %s -p algebraic-simplify | filecheck %s
// RUN: tessera-opt %s -p 'algebraic-simplify{no-signed-zeros=true}' | filecheck %s --check-prefix=NSZ
// RUN: tessera-opt %s -p 'algebraic-simplify{fold-arith-identities=false}' | filecheck %s --check-prefix=OFF

// x * 1, 1 * x, x / 1, x - (+0.0), x + (-0.0) are x, bit for bit.
func.func @exact(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %one = tgraph.constant dense<1.0> : tensor<f32> -> tensor<8xf32>
  %pz = tgraph.constant dense<0.0> : tensor<f32> -> tensor<4x8xf32>
  %nz = tgraph.constant dense<-0.0> : tensor<f32> -> tensor<1x8xf32>
  %0 = tgraph.mul %x, %one : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = tgraph.mul %one, %x : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tgraph.div %x, %one : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %3 = tgraph.sub %x, %pz : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = tgraph.add %nz, %x : (tensor<1x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
// CHECK-LABEL: func.func @exact
// CHECK-NEXT:    func.return %x, %x, %x, %x, %x
// OFF-LABEL: func.func @exact
// OFF-COUNT-5: tgraph.{{mul|div|sub|add}}

// x + (+0.0) is x only up to the sign of zero (-0.0 + 0.0 = +0.0): folded with
// no-signed-zeros only. Likewise x - (-0.0). Integer zeros always fold.
func.func @signed_zero(%x: tensor<4xf32>, %i: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xi32>, tensor<4xi32>) {
  %pz = tgraph.constant dense<0.0> : tensor<f32> -> tensor<4xf32>
  %nz = tgraph.constant dense<-0.0> : tensor<f32> -> tensor<4xf32>
  %iz = tgraph.constant dense<0> : tensor<i32> -> tensor<4xi32>
  %0 = tgraph.add %x, %pz : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = tgraph.sub %x, %nz : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = tgraph.add %i, %iz : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %3 = tgraph.sub %i, %iz : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  func.return %0, %1, %2, %3 : tensor<4xf32>, tensor<4xf32>, tensor<4xi32>, tensor<4xi32>
}
// CHECK-LABEL: func.func @signed_zero
// CHECK:         %0 = tgraph.add %x, %pz
// CHECK-NEXT:    %1 = tgraph.sub %x, %nz
// CHECK-NEXT:    func.return %0, %1, %i, %i
// NSZ-LABEL: func.func @signed_zero
// NSZ-NEXT:      func.return %x, %x, %i, %i

// No fold when the constant broadcasts x to a larger shape, or is not exactly 1.
func.func @no_fold(%x: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>) {
  %one = tgraph.constant dense<1.0> : tensor<f32> -> tensor<4x8xf32>
  %almost = tgraph.constant dense<[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0000001]> : tensor<8xf32> -> tensor<8xf32>
  %0 = tgraph.mul %x, %one : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tgraph.mul %x, %almost : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  func.return %0, %1 : tensor<4x8xf32>, tensor<8xf32>
}
// CHECK-LABEL: func.func @no_fold
// CHECK:         %0 = tgraph.mul %x, %one
// CHECK:         %1 = tgraph.mul %x, %almost
// CHECK-NEXT:    func.return %0, %1
