// RUN: tessera-opt %s -p canonicalize,cse --print-between-passes | filecheck %s
// RUN: tessera-opt %s -p tessera-graph-pipeline --print-between-passes | filecheck %s --check-prefix=GRAPH

// The IR after canonicalize still has both multiplications; cse then merges them.
func.func @f(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %c = tgraph.constant dense<2.0> : tensor<f32> -> tensor<4x8xf32>
  %0 = tgraph.mul %x, %c : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tgraph.mul %x, %c : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %e = tgraph.exp %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %e, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK:      IR after canonicalize:
// CHECK:        %0 = tgraph.mul %x, %c
// CHECK-NEXT:   %1 = tgraph.mul %x, %c
// CHECK-NOT:  IR after cse:
// CHECK:      builtin.module {
// CHECK:        %0 = tgraph.mul %x, %c
// CHECK-NOT:    tgraph.mul
// CHECK:        func.return %e, %0

// tessera-graph-pipeline is printed after each of its steps, in pipeline order.
// GRAPH:      IR after canonicalize:
// GRAPH:      IR after algebraic-simplify:
// GRAPH:      IR after cse:
// GRAPH-NOT:    %1 = tgraph.mul
// GRAPH:      IR after fuse-attention:
// GRAPH:      IR after fuse-matmul-epilogue:
// GRAPH:      IR after fuse-elementwise:
// GRAPH-NOT:  IR after
// GRAPH:      builtin.module {
