// RUN: tessera-opt %s -p 'autodiff{mode=forward wrt=0}' | filecheck %s

// Forward mode: @f_jvp(args..., tangents...) returns the primal result and its
// tangent. It is the transpose of the reverse pass, so the tangent of tanh is
// t * (1 - y*y) and the tangent of a sum is the sum of the tangents.

func.func @f(%x: tensor<4xf64>, %c: tensor<4xf64>) -> tensor<f64> {
  %y = tgraph.tanh %x : (tensor<4xf64>) -> tensor<4xf64>
  %z = tgraph.mul %y, %c : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
  %l = tgraph.sum %z axes = [0] : (tensor<4xf64>) -> tensor<f64>
  func.return %l : tensor<f64>
}
// CHECK-LABEL: func.func @f_jvp(%x: tensor<4xf64>, %c: tensor<4xf64>, %t_x: tensor<4xf64>) -> (tensor<f64>, tensor<f64>) {
// CHECK-NEXT:    %[[Y:.*]] = tgraph.tanh %x
// CHECK-NEXT:    %[[Z:.*]] = tgraph.mul %[[Y]], %c
// CHECK-NEXT:    %[[L:.*]] = tgraph.sum %[[Z]] axes = [0]
// CHECK-NEXT:    %[[YY:.*]] = tgraph.mul %[[Y]], %[[Y]]
// CHECK-NEXT:    %[[ONE:.*]] = tgraph.constant dense<1.000000e+00>
// CHECK-NEXT:    %[[D:.*]] = tgraph.sub %[[ONE]], %[[YY]]
// CHECK-NEXT:    %[[TY:.*]] = tgraph.mul %t_x, %[[D]]
// CHECK-NEXT:    %[[TZ:.*]] = tgraph.mul %[[TY]], %c
// CHECK-NEXT:    %[[TL:.*]] = tgraph.sum %[[TZ]] axes = [0]
// CHECK-NEXT:    func.return %[[L]], %[[TL]] : tensor<f64>, tensor<f64>
