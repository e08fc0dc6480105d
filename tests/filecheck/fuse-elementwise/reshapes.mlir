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
// Without hoisting, the reshape (of size-1 dims) joins the cast to the mul as an index
// map inside the one fused op.
// OFF-LABEL:   func.func @weight
// OFF-NEXT:      tgraph.fused %w, %x
// OFF:             tgraph.cast
// OFF-NEXT:        tgraph.reshape
// OFF-NEXT:        tgraph.mul

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

// A value read by several hoisted ops gets one reshape, not one per op: the cast feeding
// them then has one user, moves below the reshape too, and the fused kernel reads the
// bf16 input (the gelu backward of a bf16 MLP read its f32 copy four times).
func.func @shared(%x: tensor<4x6xbf16>) -> tensor<24xf32> {
  %c = tgraph.cast %x : (tensor<4x6xbf16>) -> tensor<4x6xf32>
  %a = tgraph.mul %c, %c : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %b = tgraph.add %a, %c : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %r = tgraph.reshape %b : (tensor<4x6xf32>) -> tensor<24xf32>
  %o = tgraph.exp %r : (tensor<24xf32>) -> tensor<24xf32>
  func.return %o : tensor<24xf32>
}
// CHECK-LABEL: func.func @shared
// CHECK-NEXT:    %[[R:.*]] = tgraph.reshape %x : (tensor<4x6xbf16>) -> tensor<24xbf16>
// CHECK-NEXT:    %[[F:.*]] = tgraph.fused %[[R]] : (tensor<24xbf16>) -> tensor<24xf32> {
// CHECK:           tgraph.cast
// CHECK:           tgraph.mul
// CHECK:           tgraph.add
// CHECK:           tgraph.exp
// CHECK:         func.return %[[F]]

// Not hoisted when a reader of the reshape cannot take the op (a matmul, a result): the
// cast stays with the producer it fused with, the reshape a view after it.
func.func @to_matmul(%x: tensor<4x6xf32>, %w: tensor<6x3xbf16>) -> tensor<2x2x3xbf16> {
  %e = tgraph.exp %x : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %c = tgraph.cast %e : (tensor<4x6xf32>) -> tensor<4x6xbf16>
  %r = tgraph.reshape %c : (tensor<4x6xbf16>) -> tensor<2x2x6xbf16>
  %m = tgraph.matmul %r, %w : (tensor<2x2x6xbf16>, tensor<6x3xbf16>) -> tensor<2x2x3xbf16>
  func.return %m : tensor<2x2x3xbf16>
}
// CHECK-LABEL: func.func @to_matmul
// CHECK-NEXT:    %[[F:.*]] = tgraph.fused %x : (tensor<4x6xf32>) -> tensor<4x6xbf16> {
// CHECK:           tgraph.exp
// CHECK:           tgraph.cast
// CHECK:         tgraph.reshape %[[F]] : (tensor<4x6xbf16>) -> tensor<2x2x6xbf16>

// A 0-d op reshaped to [1]: its 0-d operands are its shape, not scalars broadcast to
// it, so every one is reshaped (keeping them 0-d gave a select of 0-d operands typed
// [1], which the verifier rejects).
func.func @zero_d(%c: tensor<i1>, %a: tensor<f32>, %b: tensor<f32>) -> tensor<1xf32> {
  %s = tgraph.select %c, %a, %b : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
  %r = tgraph.reshape %s : (tensor<f32>) -> tensor<1xf32>
  %y = tgraph.exp %r : (tensor<1xf32>) -> tensor<1xf32>
  func.return %y : tensor<1xf32>
}
// CHECK-LABEL: func.func @zero_d
// CHECK-DAG:     %[[C:.*]] = tgraph.reshape %c : (tensor<i1>) -> tensor<1xi1>
// CHECK-DAG:     %[[A:.*]] = tgraph.reshape %a : (tensor<f32>) -> tensor<1xf32>
// CHECK-DAG:     %[[B:.*]] = tgraph.reshape %b : (tensor<f32>) -> tensor<1xf32>
// CHECK:         tgraph.fused %[[C]], %[[A]], %[[B]] : (tensor<1xi1>, tensor<1xf32>, tensor<1xf32>) -> tensor<1xf32>
// CHECK:           tgraph.select %{{.*}}, %{{.*}}, %{{.*}} : (tensor<1xi1>, tensor<1xf32>, tensor<1xf32>) -> tensor<1xf32>
