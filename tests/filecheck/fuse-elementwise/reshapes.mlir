// RUN: tessera-opt %s -p fuse-elementwise | filecheck %s
// RUN: tessera-opt %s -p 'fuse-elementwise{hoist-reshapes=false}' | filecheck %s --check-prefix=OFF

// Batch norm's weight, cast and reshaped to [1, C, 1, 1]: the reshape moves to the
// weight and the cast joins the normalization's kernel.
func.func @weight(%x: tensor<4x8x5x6xf32>, %w: tensor<8xbf16>) -> tensor<4x8x5x6xf32> {
  %c = tgraph.cast %w : (tensor<8xbf16>) -> tensor<8xf32>
  %r = tgraph.reshape %c : (tensor<8xf32>) -> tensor<1x8x1x1xf32>
  %y = tgraph.mul %x, %r : (tensor<4x8x5x6xf32>, tensor<1x8x1x1xf32>) -> tensor<4x8x5x6xf32>
  func.return %y : tensor<4x8x5x6xf32>
}
// CHECK-LABEL: func.func @weight
// CHECK-NEXT:    %[[W:.*]] = tgraph.reshape %w : (tensor<8xbf16>) -> tensor<1x8x1x1xbf16>
// CHECK-NEXT:    %[[F:.*]] = tgraph.fused %[[W]], %x : (tensor<1x8x1x1xbf16>, tensor<4x8x5x6xf32>) -> tensor<4x8x5x6xf32> {
// CHECK:           tgraph.cast
// CHECK:           tgraph.mul
// CHECK:         func.return %[[F]]
// OFF-LABEL:   func.func @weight
// OFF:           tgraph.cast %w
// OFF:           tgraph.reshape

// A chain of elementwise ops with scalar operands moves behind the reshape whole.
func.func @chain(%x: tensor<4x8x5x6xf32>, %a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8x5x6xf32> {
  %k = tgraph.constant dense<0.5> : tensor<f32> -> tensor<f32>
  %m = tgraph.mul %a, %b : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %s = tgraph.mul %m, %k : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %r = tgraph.reshape %s : (tensor<8xf32>) -> tensor<1x8x1x1xf32>
  %y = tgraph.sub %x, %r : (tensor<4x8x5x6xf32>, tensor<1x8x1x1xf32>) -> tensor<4x8x5x6xf32>
  func.return %y : tensor<4x8x5x6xf32>
}
// CHECK-LABEL: func.func @chain
// CHECK-DAG:     %[[A:.*]] = tgraph.reshape %a : (tensor<8xf32>) -> tensor<1x8x1x1xf32>
// CHECK-DAG:     %[[B:.*]] = tgraph.reshape %b : (tensor<8xf32>) -> tensor<1x8x1x1xf32>
// CHECK:         tgraph.fused %[[A]], %[[B]], %x : (tensor<1x8x1x1xf32>, tensor<1x8x1x1xf32>, tensor<4x8x5x6xf32>) -> tensor<4x8x5x6xf32>
// CHECK-NOT:     tgraph.reshape

// Stays: an elementwise result with another user, and a broadcasting operand.
func.func @kept(%a: tensor<8xf32>, %b: tensor<1xf32>) -> (tensor<2x4xf32>, tensor<8xf32>, tensor<2x4xf32>) {
  %e = tgraph.exp %a : (tensor<8xf32>) -> tensor<8xf32>
  %r = tgraph.reshape %e : (tensor<8xf32>) -> tensor<2x4xf32>
  %m = tgraph.mul %a, %b : (tensor<8xf32>, tensor<1xf32>) -> tensor<8xf32>
  %q = tgraph.reshape %m : (tensor<8xf32>) -> tensor<2x4xf32>
  func.return %r, %e, %q : tensor<2x4xf32>, tensor<8xf32>, tensor<2x4xf32>
}
// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    %[[E:.*]] = tgraph.exp %a
// CHECK-NEXT:    tgraph.reshape %[[E]]
// CHECK-NEXT:    %[[M:.*]] = tgraph.mul %a, %b
// CHECK-NEXT:    tgraph.reshape %[[M]]
