// RUN: tessera-opt %s -p fuse-elementwise | filecheck %s
// RUN: tessera-opt %s -p 'fuse-elementwise{fuse-reductions=false}' | filecheck %s --check-prefix=NORED
// RUN: tessera-opt %s -p 'fuse-elementwise{fuse-constants=false}' | filecheck %s --check-prefix=NOCST

// A chain of elementwise ops and a trailing reduction become one tgraph.fused op;
// the splat constant moves into the body.
func.func @chain(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4xf32> {
  %two = tgraph.constant dense<2.0> : tensor<f32> -> tensor<4x8xf32>
  %0 = tgraph.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = tgraph.mul %0, %two : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tgraph.exp %1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = tgraph.sum %2 axes = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
  func.return %3 : tensor<4xf32>
}
// CHECK-LABEL: func.func @chain
// CHECK-NEXT:    %[[R:[0-9a-z_]+]] = tgraph.fused %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32> {
// CHECK-NEXT:    ^bb0(%[[X:[0-9a-z_]+]]: tensor<4x8xf32>, %[[B:[0-9a-z_]+]]: tensor<8xf32>):
// CHECK-NEXT:      %two = tgraph.constant dense<2.000000e+00> : tensor<f32> -> tensor<4x8xf32>
// CHECK-NEXT:      %[[A:[0-9a-z_]+]] = tgraph.add %[[X]], %[[B]]
// CHECK-NEXT:      %[[M:[0-9a-z_]+]] = tgraph.mul %[[A]], %two
// CHECK-NEXT:      %[[E:[0-9a-z_]+]] = tgraph.exp %[[M]]
// CHECK-NEXT:      %[[S:[0-9a-z_]+]] = tgraph.sum %[[E]] axes = [1]
// CHECK-NEXT:      tgraph.yield %[[S]] : tensor<4xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[R]]
// NORED-LABEL: func.func @chain
// NORED:         %[[F:[0-9a-z_]+]] = tgraph.fused %x, %b
// NORED:           tgraph.exp
// NORED-NEXT:      tgraph.yield
// NORED:         tgraph.sum %[[F]] axes = [1]
// NOCST-LABEL: func.func @chain
// NOCST:         tgraph.fused %x, %b, %two : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4xf32>

// A value used twice inside the chain is computed once; an input used by two ops of
// the chain becomes one operand.
func.func @dag(%x: tensor<16xf32>) -> tensor<16xf32> {
  %0 = tgraph.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  %1 = tgraph.mul %0, %0 : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %2 = tgraph.sub %1, %x : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  func.return %2 : tensor<16xf32>
}
// CHECK-LABEL: func.func @dag
// CHECK-NEXT:    %{{.*}} = tgraph.fused %x : (tensor<16xf32>) -> tensor<16xf32> {
// CHECK-NEXT:    ^bb0(%[[X:[0-9a-z_]+]]: tensor<16xf32>):
// CHECK-NEXT:      %[[E:[0-9a-z_]+]] = tgraph.exp %[[X]]
// CHECK-NEXT:      %[[M:[0-9a-z_]+]] = tgraph.mul %[[E]], %[[E]]
// CHECK-NEXT:      %[[S:[0-9a-z_]+]] = tgraph.sub %[[M]], %[[X]]
// CHECK-NEXT:      tgraph.yield %[[S]]
// CHECK-NEXT:    }

// A value with a user outside the chain stays a separate op (nothing is computed twice);
// a reduction ends its kernel; a lone op is left as it is.
func.func @boundaries(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = tgraph.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tgraph.neg %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tgraph.max %1 axes = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
  %3 = tgraph.tanh %2 : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0, %2, %3 : tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>
}
// CHECK-LABEL: func.func @boundaries
// CHECK-NEXT:    %[[E:[0-9a-z_]+]] = tgraph.exp %x
// CHECK-NEXT:    %[[F:[0-9a-z_]+]] = tgraph.fused %[[E]] : (tensor<4x8xf32>) -> tensor<4xf32> {
// CHECK:           tgraph.neg
// CHECK-NEXT:      tgraph.max
// CHECK-NEXT:      tgraph.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[T:[0-9a-z_]+]] = tgraph.tanh %[[F]]
// CHECK-NEXT:    func.return %[[E]], %[[F]], %[[T]]

// Compare, select and cast fuse too; non-elementwise ops (matmul, softmax) do not.
func.func @mixed(%x: tensor<4x4xf32>, %y: tensor<4x4xf32>) -> tensor<4x4xbf16> {
  %m = tgraph.matmul %x, %y : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %c = tgraph.gt %m, %y : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xi1>
  %s = tgraph.select %c, %m, %y : (tensor<4x4xi1>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %r = tgraph.cast %s : (tensor<4x4xf32>) -> tensor<4x4xbf16>
  func.return %r : tensor<4x4xbf16>
}
// CHECK-LABEL: func.func @mixed
// CHECK-NEXT:    %m = tgraph.matmul %x, %y
// CHECK-NEXT:    %r = tgraph.fused %m, %y : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xbf16> {
// CHECK-NEXT:    ^bb0(%[[M:[0-9a-z_]+]]: tensor<4x4xf32>, %[[Y:[0-9a-z_]+]]: tensor<4x4xf32>):
// CHECK-NEXT:      %c = tgraph.gt %[[M]], %[[Y]]
// CHECK-NEXT:      %s = tgraph.select %c, %[[M]], %[[Y]]
// CHECK-NEXT:      %[[R:[0-9a-z_]+]] = tgraph.cast %s
// CHECK-NEXT:      tgraph.yield %[[R]]
