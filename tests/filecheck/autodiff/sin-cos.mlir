// RUN: tessera-opt %s -p autodiff | filecheck %s

// The adjoints of tgraph.sin and tgraph.cos: d sin(x) = cos(x) dx, d cos(x) = -sin(x) dx,
// each emitted as Graph IR (so itself differentiable).

func.func @f(%x: tensor<4xf64>) -> tensor<f64> {
  %s = tgraph.sin %x : (tensor<4xf64>) -> tensor<4xf64>
  %c = tgraph.cos %s : (tensor<4xf64>) -> tensor<4xf64>
  %l = tgraph.sum %c axes = [0] : (tensor<4xf64>) -> tensor<f64>
  func.return %l : tensor<f64>
}
// CHECK-LABEL: func.func @f_grad(%x: tensor<4xf64>) -> tensor<4xf64>
// CHECK:         %s = tgraph.sin %x
// CHECK:         %[[ONES:[0-9]+]] = tgraph.broadcast
// CHECK-NEXT:    %[[SS:[0-9]+]] = tgraph.sin %s
// CHECK-NEXT:    %[[M:[0-9]+]] = tgraph.mul %[[ONES]], %[[SS]]
// CHECK-NEXT:    %[[DC:[0-9]+]] = tgraph.neg %[[M]]
// CHECK-NEXT:    %[[CX:[0-9]+]] = tgraph.cos %x
// CHECK-NEXT:    %[[DX:[0-9]+]] = tgraph.mul %[[DC]], %[[CX]]
// CHECK-NEXT:    func.return %[[DX]]
