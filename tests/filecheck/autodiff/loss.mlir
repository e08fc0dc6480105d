// RUN: tessera-opt %s -p 'autodiff{wrt=1,2}' | filecheck %s
// RUN: tessera-opt %s -p 'autodiff{wrt=1,2 return-value=true}' | filecheck %s --check-prefix=VALUE
// RUN: tessera-opt %s -p 'autodiff{wrt=1,2}' | tessera-opt | filecheck %s

// The guide's loss_function: matmul + bias + relu + mse. The gradient function
// recomputes the forward pass, seeds the scalar loss with 1 and applies the
// adjoint rules backwards: mse, relu (mask x > 0), bias add (sum over the
// broadcast batch dim), matmul (xᵀ · g with transpose_lhs).

func.func @loss(%x: tensor<4x3xf32>, %W: tensor<3x2xf32>, %b: tensor<2xf32>, %y: tensor<4x2xf32>) -> tensor<f32> {
  %0 = tgraph.matmul %x, %W : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %1 = tgraph.add %0, %b : (tensor<4x2xf32>, tensor<2xf32>) -> tensor<4x2xf32>
  %2 = tgraph.relu %1 : (tensor<4x2xf32>) -> tensor<4x2xf32>
  %3 = tgraph.mse %2, %y : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<f32>
  func.return %3 : tensor<f32>
}

// CHECK-LABEL: func.func @loss(
// CHECK:         func.return %{{.*}} : tensor<f32>
// CHECK-LABEL: func.func @loss_grad(%x: tensor<4x3xf32>, %W: tensor<3x2xf32>, %b: tensor<2xf32>, %y: tensor<4x2xf32>) -> (tensor<3x2xf32>, tensor<2xf32>) {
// CHECK-NEXT:    %[[MM:.*]] = tgraph.matmul %x, %W
// CHECK-NEXT:    %[[PRE:.*]] = tgraph.add %[[MM]], %b
// CHECK-NEXT:    %[[ACT:.*]] = tgraph.relu %[[PRE]]
// CHECK-NEXT:    %[[ONE:.*]] = tgraph.constant dense<1.000000e+00> : tensor<f32> -> tensor<f32>
// CHECK-NEXT:    %[[DIFF:.*]] = tgraph.sub %[[ACT]], %y
// CHECK-NEXT:    %[[INV:.*]] = tgraph.constant dense<2.500000e-01> : tensor<f32> -> tensor<f32>
// CHECK-NEXT:    %[[S:.*]] = tgraph.mul %[[ONE]], %[[INV]]
// CHECK-NEXT:    %[[DACT:.*]] = tgraph.mul %[[DIFF]], %[[S]] : (tensor<4x2xf32>, tensor<f32>) -> tensor<4x2xf32>
// CHECK-NEXT:    %[[ZERO:.*]] = tgraph.constant dense<0.000000e+00> : tensor<f32> -> tensor<f32>
// CHECK-NEXT:    %[[POS:.*]] = tgraph.gt %[[PRE]], %[[ZERO]] : (tensor<4x2xf32>, tensor<f32>) -> tensor<4x2xi1>
// CHECK-NEXT:    %[[Z:.*]] = tgraph.constant dense<0.000000e+00>
// CHECK-NEXT:    %[[DPRE:.*]] = tgraph.select %[[POS]], %[[DACT]], %[[Z]]
// CHECK-NEXT:    %[[DB:.*]] = tgraph.sum %[[DPRE]] axes = [0] : (tensor<4x2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    %[[DW:.*]] = tgraph.matmul %x, %[[DPRE]] transpose_lhs : (tensor<4x3xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:    func.return %[[DW]], %[[DB]] : tensor<3x2xf32>, tensor<2xf32>
// CHECK-NEXT:  }

// VALUE-LABEL: func.func @loss_grad(
// VALUE-SAME:    -> (tensor<f32>, tensor<3x2xf32>, tensor<2xf32>)
// VALUE:         %[[L:.*]] = tgraph.mse
// VALUE:         func.return %[[L]], %{{.*}}, %{{.*}} : tensor<f32>, tensor<3x2xf32>, tensor<2xf32>
