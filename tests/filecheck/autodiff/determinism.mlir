// RUN: tessera-opt %s -p autodiff > %t.1
// RUN: tessera-opt %s -p autodiff > %t.2
// RUN: diff %t.1 %t.2
// RUN: filecheck %s < %t.1

// The backward of a program is the same graph every time. A non-scalar result
// takes a cotangent argument (a VJP); attention is differentiated through its math.

func.func @attn(%q: tensor<2x4x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x8xf32>) -> tensor<2x4x8xf32> {
  %o = tgraph.flash_attention %q, %k, %v causal : (tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32>) -> tensor<2x4x8xf32>
  func.return %o : tensor<2x4x8xf32>
}
// CHECK-LABEL: func.func @attn_grad(%q: tensor<2x4x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x8xf32>, %0: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32>)
// CHECK:         tgraph.matmul %q, %k transpose_rhs
// CHECK:         tgraph.select
// CHECK:         %[[P:.*]] = tgraph.softmax %{{.*}} axis = 2
// CHECK:         tgraph.matmul %[[P]], %0 transpose_lhs
// CHECK:         func.return
