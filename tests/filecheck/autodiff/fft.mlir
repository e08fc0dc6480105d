// RUN: tessera-opt %s -p autodiff | filecheck %s

// fft's adjoint is F^H = n · ifft; for a real input only the real part is
// kept. The cotangent of tgraph.real is the complex value ct + 0i.

func.func @power(%x: tensor<2x8xf32>) -> tensor<f32> {
  %z = tgraph.fft %x : (tensor<2x8xf32>) -> tensor<2x8xcomplex<f32>>
  %re = tgraph.real %z : (tensor<2x8xcomplex<f32>>) -> tensor<2x8xf32>
  %sq = tgraph.mul %re, %re : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %s = tgraph.sum %sq axes = [] : (tensor<2x8xf32>) -> tensor<f32>
  func.return %s : tensor<f32>
}
// CHECK-LABEL: func.func @power_grad(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
// CHECK:         %[[G:.*]] = tgraph.add %{{.*}}, %{{.*}} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:    %[[ZERO:.*]] = tgraph.constant dense<0.000000e+00> : tensor<f32> -> tensor<2x8xf32>
// CHECK-NEXT:    %[[C:.*]] = tgraph.complex %[[G]], %[[ZERO]] : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xcomplex<f32>>
// CHECK-NEXT:    %[[I:.*]] = tgraph.fft %[[C]] inverse : (tensor<2x8xcomplex<f32>>) -> tensor<2x8xcomplex<f32>>
// CHECK-NEXT:    %[[R:.*]] = tgraph.real %[[I]] : (tensor<2x8xcomplex<f32>>) -> tensor<2x8xf32>
// CHECK-NEXT:    %[[N:.*]] = tgraph.constant dense<8.000000e+00>
// CHECK-NEXT:    %[[GX:.*]] = tgraph.mul %[[R]], %[[N]]
// CHECK-NEXT:    func.return %[[GX]] : tensor<2x8xf32>
