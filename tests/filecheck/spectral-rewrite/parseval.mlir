// RUN: tessera-opt %s -p spectral-rewrite | filecheck %s
// RUN: tessera-opt %s -p 'spectral-rewrite{parseval=false}' | filecheck %s --check-prefix=OFF

// Parseval: sum over the transformed axis of real(F)^2 + imag(F)^2, F = fft(x), is
// n * sum(x^2) (1/n for an inverse transform); the transform is gone.
func.func @real_input(%x: tensor<3x8xf32>) -> tensor<3xf32> {
  %0 = tgraph.fft %x : (tensor<3x8xf32>) -> tensor<3x8xcomplex<f32>>
  %r = tgraph.real %0 : (tensor<3x8xcomplex<f32>>) -> tensor<3x8xf32>
  %i = tgraph.imag %0 : (tensor<3x8xcomplex<f32>>) -> tensor<3x8xf32>
  %rr = tgraph.mul %r, %r : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  %ii = tgraph.mul %i, %i : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  %p = tgraph.add %ii, %rr : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  %s = tgraph.sum %p axes = [1] : (tensor<3x8xf32>) -> tensor<3xf32>
  func.return %s : tensor<3xf32>
}
// CHECK-LABEL: func.func @real_input
// CHECK-NEXT:    %[[SQ:.*]] = tgraph.mul %x, %x : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
// CHECK-NEXT:    %[[S:.*]] = tgraph.sum %[[SQ]] axes = [1] : (tensor<3x8xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %[[N:.*]] = tgraph.constant dense<8.000000e+00> : tensor<f32> -> tensor<f32>
// CHECK-NEXT:    %{{.*}} = tgraph.mul %[[S]], %[[N]] : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
// CHECK-NOT:     tgraph.fft
// OFF-LABEL: func.func @real_input
// OFF:         tgraph.fft
// OFF:         tgraph.sum %p

// A complex input, an inverse 2-D transform and squares written as p ** 2.
func.func @complex_input(%z: tensor<2x4x4xcomplex<f64>>) -> tensor<f64> {
  %0 = tgraph.fft2d %z inverse : (tensor<2x4x4xcomplex<f64>>) -> tensor<2x4x4xcomplex<f64>>
  %two = tgraph.constant dense<2.0> : tensor<f64> -> tensor<f64>
  %r = tgraph.real %0 : (tensor<2x4x4xcomplex<f64>>) -> tensor<2x4x4xf64>
  %i = tgraph.imag %0 : (tensor<2x4x4xcomplex<f64>>) -> tensor<2x4x4xf64>
  %rr = tgraph.pow %r, %two : (tensor<2x4x4xf64>, tensor<f64>) -> tensor<2x4x4xf64>
  %ii = tgraph.pow %i, %two : (tensor<2x4x4xf64>, tensor<f64>) -> tensor<2x4x4xf64>
  %p = tgraph.add %rr, %ii : (tensor<2x4x4xf64>, tensor<2x4x4xf64>) -> tensor<2x4x4xf64>
  %s = tgraph.sum %p axes = [] : (tensor<2x4x4xf64>) -> tensor<f64>
  func.return %s : tensor<f64>
}
// CHECK-LABEL: func.func @complex_input
// CHECK-NEXT:    %[[RE:.*]] = tgraph.real %z
// CHECK-NEXT:    %[[IM:.*]] = tgraph.imag %z
// CHECK-NEXT:    %[[R2:.*]] = tgraph.mul %[[RE]], %[[RE]]
// CHECK-NEXT:    %[[I2:.*]] = tgraph.mul %[[IM]], %[[IM]]
// CHECK-NEXT:    %[[A:.*]] = tgraph.add %[[R2]], %[[I2]]
// CHECK-NEXT:    %[[S:.*]] = tgraph.sum %[[A]] axes = [0, 1, 2]
// CHECK-NEXT:    %[[N:.*]] = tgraph.constant dense<6.250000e-02> : tensor<f64> -> tensor<f64>
// CHECK-NEXT:    tgraph.mul %[[S]], %[[N]]
// CHECK-NOT:     tgraph.fft2d

// A sum that leaves the transformed axis is not Parseval's.
func.func @other_axis(%x: tensor<3x8xf32>) -> tensor<8xf32> {
  %0 = tgraph.fft %x : (tensor<3x8xf32>) -> tensor<3x8xcomplex<f32>>
  %r = tgraph.real %0 : (tensor<3x8xcomplex<f32>>) -> tensor<3x8xf32>
  %i = tgraph.imag %0 : (tensor<3x8xcomplex<f32>>) -> tensor<3x8xf32>
  %rr = tgraph.mul %r, %r : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  %ii = tgraph.mul %i, %i : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  %p = tgraph.add %rr, %ii : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  %s = tgraph.sum %p axes = [0] : (tensor<3x8xf32>) -> tensor<8xf32>
  func.return %s : tensor<8xf32>
}
// CHECK-LABEL: func.func @other_axis
// CHECK:         tgraph.fft %x
// CHECK:         tgraph.sum %p axes = [0]
