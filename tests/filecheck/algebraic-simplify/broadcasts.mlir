// RUN: tessera-opt %s -p algebraic-simplify | filecheck %s
// RUN: tessera-opt %s -p 'algebraic-simplify{fold-broadcasts=false}' | filecheck %s --check-prefix=OFF

// torch's `(g / n).expand(128).view(128, 1)` times a [128, 1000] tensor: the elementwise ops
// broadcast the 0-d value themselves, so the broadcast and its reshape go.
func.func @scalar(%g: tensor<f32>, %n: tensor<f32>, %c: tensor<128x1xi1>, %x: tensor<128x1000xf32>) -> tensor<128x1000xf32> {
  %z = tgraph.constant dense<0.0> : tensor<f32> -> tensor<f32>
  %0 = tgraph.div %g, %n : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %1 = tgraph.broadcast %0 : (tensor<f32>) -> tensor<128xf32>
  %2 = tgraph.reshape %1 : (tensor<128xf32>) -> tensor<128x1xf32>
  %3 = tgraph.select %c, %2, %z : (tensor<128x1xi1>, tensor<128x1xf32>, tensor<f32>) -> tensor<128x1xf32>
  %4 = tgraph.mul %x, %3 : (tensor<128x1000xf32>, tensor<128x1xf32>) -> tensor<128x1000xf32>
  func.return %4 : tensor<128x1000xf32>
}
// CHECK-LABEL: func.func @scalar
// CHECK:         %[[D:.*]] = tgraph.div %g, %n
// CHECK-NEXT:    %[[S:.*]] = tgraph.select %c, %[[D]], %{{.*}} : (tensor<128x1xi1>, tensor<f32>, tensor<f32>) -> tensor<128x1xf32>
// CHECK-NEXT:    %[[M:.*]] = tgraph.mul %x, %[[S]]
// CHECK-NEXT:    func.return %[[M]]
// OFF-LABEL: func.func @scalar
// OFF:         tgraph.broadcast
// OFF:         tgraph.reshape

// A broadcast that makes the result larger than the op's other operands would stays for that
// operand (of `b + b`, one goes); so does a reshape of a broadcast of more than one element.
func.func @kept(%v: tensor<4xf32>, %y: tensor<3x1xf32>, %w: tensor<2xf32>) -> (tensor<3x4xf32>, tensor<8xf32>) {
  %0 = tgraph.broadcast %v : (tensor<4xf32>) -> tensor<3x4xf32>
  %1 = tgraph.add %0, %0 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %2 = tgraph.broadcast %w : (tensor<2xf32>) -> tensor<4x2xf32>
  %3 = tgraph.reshape %2 : (tensor<4x2xf32>) -> tensor<8xf32>
  func.return %1, %3 : tensor<3x4xf32>, tensor<8xf32>
}
// CHECK-LABEL: func.func @kept
// CHECK:         %[[B:.*]] = tgraph.broadcast %v
// CHECK-NEXT:    tgraph.add %v, %[[B]] : (tensor<4xf32>, tensor<3x4xf32>)
// CHECK:         tgraph.broadcast %w
// CHECK-NEXT:    tgraph.reshape

// Operands that broadcast to the result together need neither broadcast.
func.func @one_of_two(%v: tensor<4xf32>, %y: tensor<3x1xf32>) -> tensor<3x4xf32> {
  %0 = tgraph.broadcast %v : (tensor<4xf32>) -> tensor<3x4xf32>
  %1 = tgraph.broadcast %y : (tensor<3x1xf32>) -> tensor<3x4xf32>
  %2 = tgraph.sub %0, %1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  func.return %2 : tensor<3x4xf32>
}
// CHECK-LABEL: func.func @one_of_two
// CHECK-NEXT:    tgraph.sub %v, %y : (tensor<4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
