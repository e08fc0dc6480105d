// RUN: tessera-opt %s -p fused-f32-intermediates | filecheck %s

// In a marked function, a fused chain of bf16 ops computes in f32 and rounds once, at
// the yield: (a / b) * 3.7 + x as dynamo spells addcdiv(value=3.7). The frontend's
// rounding of the mul (cast f32 -> bf16) is skipped by the twin.
func.func @chain(%x: tensor<4x8xbf16>, %a: tensor<4x8xbf16>, %b: tensor<4x8xbf16>) -> tensor<4x8xbf16> attributes {tessera.f32_intermediates} {
  %r = tgraph.fused %x, %a, %b : (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  ^bb0(%0: tensor<4x8xbf16>, %1: tensor<4x8xbf16>, %2: tensor<4x8xbf16>):
    %3 = tgraph.div %1, %2 : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
    %4 = tgraph.cast %3 : (tensor<4x8xbf16>) -> tensor<4x8xf32>
    %c = tgraph.constant dense<3.7> : tensor<f32> -> tensor<f32>
    %5 = tgraph.mul %4, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
    %6 = tgraph.cast %5 : (tensor<4x8xf32>) -> tensor<4x8xbf16>
    %7 = tgraph.add %0, %6 : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
    tgraph.yield %7 : tensor<4x8xbf16>
  }
  func.return %r : tensor<4x8xbf16>
}
// CHECK-LABEL: func.func @chain
// CHECK:         ^bb0(%[[X:.*]]: tensor<4x8xbf16>, %[[A:.*]]: tensor<4x8xbf16>, %[[B:.*]]: tensor<4x8xbf16>):
// CHECK-NEXT:      %[[A32:.*]] = tgraph.cast %[[A]] : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT:      %[[B32:.*]] = tgraph.cast %[[B]] : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT:      %[[Q:.*]] = tgraph.div %[[A32]], %[[B32]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:      %[[C:.*]] = tgraph.constant
// CHECK-NEXT:      %[[M:.*]] = tgraph.mul %[[Q]], %[[C]]
// CHECK-NEXT:      %[[X32:.*]] = tgraph.cast %[[X]] : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT:      %[[S:.*]] = tgraph.add %[[X32]], %[[M]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:      %[[R:.*]] = tgraph.cast %[[S]] : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK-NEXT:      tgraph.yield %[[R]] : tensor<4x8xbf16>

// An explicit conversion (tessera.rounds) stays a rounding; compares and selects read
// the twins; a broadcast carries a twin; a reduction reads the rounded value.
func.func @kept(%x: tensor<4x8xf32>, %y: tensor<8xf16>) -> tensor<4xf16> attributes {tessera.f32_intermediates} {
  %r = tgraph.fused %x, %y : (tensor<4x8xf32>, tensor<8xf16>) -> tensor<4xf16> {
  ^bb0(%0: tensor<4x8xf32>, %1: tensor<8xf16>):
    %2 = tgraph.cast %0 {tessera.rounds} : (tensor<4x8xf32>) -> tensor<4x8xf16>
    %3 = tgraph.exp %1 : (tensor<8xf16>) -> tensor<8xf16>
    %4 = tgraph.broadcast %3 : (tensor<8xf16>) -> tensor<4x8xf16>
    %5 = tgraph.mul %2, %4 : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xf16>
    %6 = tgraph.lt %5, %2 : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xi1>
    %7 = tgraph.select %6, %5, %2 : (tensor<4x8xi1>, tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xf16>
    %8 = tgraph.sum %7 axes = [1] : (tensor<4x8xf16>) -> tensor<4xf16>
    tgraph.yield %8 : tensor<4xf16>
  }
  func.return %r : tensor<4xf16>
}
// CHECK-LABEL: func.func @kept
// CHECK:         %[[R16:.*]] = tgraph.cast %{{.*}} {tessera.rounds} : (tensor<4x8xf32>) -> tensor<4x8xf16>
// CHECK-NEXT:    %[[Y32:.*]] = tgraph.cast %{{.*}} : (tensor<8xf16>) -> tensor<8xf32>
// CHECK-NEXT:    %[[E:.*]] = tgraph.exp %[[Y32]] : (tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT:    %[[BC:.*]] = tgraph.broadcast %[[E]] : (tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[W:.*]] = tgraph.cast %[[R16]] : (tensor<4x8xf16>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[P:.*]] = tgraph.mul %[[W]], %[[BC]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[LT:.*]] = tgraph.lt %[[P]], %[[W]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
// CHECK-NEXT:    %[[SEL:.*]] = tgraph.select %[[LT]], %[[P]], %[[W]] : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[N:.*]] = tgraph.cast %[[SEL]] : (tensor<4x8xf32>) -> tensor<4x8xf16>
// CHECK-NEXT:    %[[SUM:.*]] = tgraph.sum %[[N]] axes = [1]
// CHECK-NEXT:    tgraph.yield %[[SUM]]

// Without the attribute nothing changes: ts.jit keeps each op's rounding.
func.func @unmarked(%a: tensor<8xbf16>, %b: tensor<8xbf16>) -> tensor<8xbf16> {
  %r = tgraph.fused %a, %b : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16> {
  ^bb0(%0: tensor<8xbf16>, %1: tensor<8xbf16>):
    %2 = tgraph.mul %0, %1 : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
    %3 = tgraph.add %2, %1 : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
    tgraph.yield %3 : tensor<8xbf16>
  }
  func.return %r : tensor<8xbf16>
}
// CHECK-LABEL: func.func @unmarked
// CHECK-NEXT:    tgraph.fused
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      tgraph.mul %{{.*}} : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
// CHECK-NEXT:      tgraph.add %{{.*}} : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
