// RUN: tessera-opt %s -p algebraic-simplify | filecheck %s
// RUN: tessera-opt %s -p 'algebraic-simplify{fold-empty=false}' | filecheck %s --check-prefix=OFF

// A sum over an empty axis and a matmul contracting no terms depend on the shapes alone:
// they become splat constants (one 0-d value, filled by a kernel at any size). A concat drops its empty operands.
func.func @fold(%a: tensor<4x0xf32>, %b: tensor<0x5xf32>, %x: tensor<3x5xf32>) -> (tensor<4x5xf32>, tensor<4xf32>, tensor<3x5xf32>, tensor<3x5xf32>) {
  %0 = tgraph.matmul %a, %b : (tensor<4x0xf32>, tensor<0x5xf32>) -> tensor<4x5xf32>
  %1 = tgraph.sum %a axes = [1] : (tensor<4x0xf32>) -> tensor<4xf32>
  %2 = tgraph.concat %b, %x, %b axis = 0 : (tensor<0x5xf32>, tensor<3x5xf32>, tensor<0x5xf32>) -> tensor<3x5xf32>
  %3 = tgraph.concat %b, %x, %x axis = 0 : (tensor<0x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<6x5xf32>
  %4 = tgraph.slice %3 start = [0, 0] limit = [3, 5] stride = [1, 1] : (tensor<6x5xf32>) -> tensor<3x5xf32>
  func.return %0, %1, %2, %4 : tensor<4x5xf32>, tensor<4xf32>, tensor<3x5xf32>, tensor<3x5xf32>
}
// CHECK-LABEL: func.func @fold
// CHECK-NEXT:    %{{.*}} = tgraph.constant dense<0.000000e+00> : tensor<f32> -> tensor<4x5xf32>
// CHECK-NEXT:    %{{.*}} = tgraph.constant dense<0.000000e+00> : tensor<f32> -> tensor<4xf32>
// CHECK-NEXT:    %[[C:.*]] = tgraph.concat %x, %x axis = 0
// CHECK-NEXT:    %[[S:.*]] = tgraph.slice %[[C]]
// CHECK-NEXT:    func.return %{{.*}}, %{{.*}}, %x, %[[S]]
// OFF-LABEL: func.func @fold
// OFF:         tgraph.matmul %a, %b
// OFF:         tgraph.sum %a
// OFF:         tgraph.concat %b, %x, %b

// The mean of nothing is NaN and the logsumexp -inf: 0/0 and -1/0, as a constant does not
// carry them through the printed IR. A max stays (it has no identity; the lowering names it).
func.func @nonfinite(%a: tensor<4x0xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = tgraph.mean %a axes = [1] : (tensor<4x0xf32>) -> tensor<4xf32>
  %b = tgraph.cast %a : (tensor<4x0xf32>) -> tensor<4x0xbf16>
  %1 = tgraph.logsumexp %b axes = [1] : (tensor<4x0xbf16>) -> tensor<4xf32>
  %2 = tgraph.max %a axes = [1] : (tensor<4x0xf32>) -> tensor<4xf32>
  func.return %0, %1, %2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
// CHECK-LABEL: func.func @nonfinite
// CHECK-NEXT:    %[[Z:.*]] = tgraph.constant dense<0.000000e+00> : tensor<f32> -> tensor<4xf32>
// CHECK-NEXT:    %[[Z2:.*]] = tgraph.constant dense<0.000000e+00> : tensor<f32> -> tensor<4xf32>
// CHECK-NEXT:    %[[M:.*]] = tgraph.div %[[Z]], %[[Z2]]
// CHECK:         %[[N:.*]] = tgraph.constant dense<-1.000000e+00> : tensor<f32> -> tensor<4xf32>
// CHECK-NEXT:    %[[D:.*]] = tgraph.constant dense<0.000000e+00> : tensor<f32> -> tensor<4xf32>
// CHECK-NEXT:    %[[L:.*]] = tgraph.div %[[N]], %[[D]]
// CHECK-NEXT:    %[[X:.*]] = tgraph.max %a
// CHECK-NEXT:    func.return %[[M]], %[[L]], %[[X]]
