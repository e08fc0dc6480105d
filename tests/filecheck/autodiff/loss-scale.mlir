// RUN: tessera-opt %s -p autodiff | filecheck %s

// Scale the loss, unscale the gradients: the loss is cast to a @loss_scale(128) policy
// (it stores 128 L) and back to f32. The cast's adjoint multiplies the cotangent by 128,
// so the backward pass runs on scaled cotangents; since the seeded loss is that cast's
// value, the gradient is multiplied by 1/128 at the end.

func.func @loss(%x: tensor<4xf32>) -> tensor<f32> {
  %0 = tgraph.mul %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = tgraph.sum %0 axes = [] : (tensor<4xf32>) -> tensor<f32>
  %2 = tgraph.cast %1 : (tensor<f32>) -> tensor<f32, #tessera.policy<f32, loss_scale = 128.0>>
  %3 = tgraph.cast %2 : (tensor<f32, #tessera.policy<f32, loss_scale = 128.0>>) -> tensor<f32>
  func.return %3 : tensor<f32>
}
// CHECK:      func.func @loss_grad(%x: tensor<4xf32>) -> tensor<4xf32> {
// CHECK:        %[[K:[0-9]+]] = tgraph.constant dense<1.280000e+02>
// CHECK:        tgraph.mul %{{.*}}, %[[K]]
// CHECK:        %[[U:[0-9]+]] = tgraph.constant dense<7.812500e-03>
// CHECK:        %[[G:[0-9]+]] = tgraph.mul %{{.*}}, %[[U]]
// CHECK-NEXT:   func.return %[[G]] : tensor<4xf32>
