// RUN: tessera-opt %s -p canonicalize,cse --time-passes | filecheck %s
// RUN: tessera-opt %s -p tessera-graph-pipeline --time-passes | filecheck %s --check-prefix=GRAPH
// RUN: tessera-opt %s -p 'graph-optimize{fuse-attention=false}' --time-passes | filecheck %s --check-prefix=OPT

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %m = tgraph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = tgraph.relu %m : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %e = tgraph.exp %r : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %e : tensor<4x8xf32>
}

// One line per pass with its wall time in seconds, then the result.
// CHECK:      Pass canonicalize took {{[0-9]+(\.[0-9]+)?(e-?[0-9]+)?}} seconds
// CHECK-NEXT: Pass cse took {{[0-9]+(\.[0-9]+)?(e-?[0-9]+)?}} seconds
// CHECK-NEXT: builtin.module {

// The graph pipeline is timed per step.
// GRAPH:      Pass canonicalize took {{[0-9.e-]+}} seconds
// GRAPH-NEXT: Pass algebraic-simplify took {{[0-9.e-]+}} seconds
// GRAPH-NEXT: Pass spectral-rewrite took {{[0-9.e-]+}} seconds
// GRAPH-NEXT: Pass cse took {{[0-9.e-]+}} seconds
// GRAPH-NEXT: Pass fuse-attention took {{[0-9.e-]+}} seconds
// GRAPH-NEXT: Pass fuse-matmul-epilogue took {{[0-9.e-]+}} seconds
// GRAPH-NEXT: Pass fuse-elementwise took {{[0-9.e-]+}} seconds
// GRAPH-NEXT: Pass fused-f32-intermediates took {{[0-9.e-]+}} seconds
// GRAPH-NEXT: Pass merge-sibling-reductions took {{[0-9.e-]+}} seconds
// GRAPH-NEXT: Pass dce took {{[0-9.e-]+}} seconds
// GRAPH-NEXT: builtin.module {
// GRAPH:        tgraph.matmul_epilogue %x, %w activation = "relu"
// GRAPH:        tgraph.exp

// graph-optimize with a step switched off times only the steps that run.
// OPT:        Pass algebraic-simplify took {{[0-9.e-]+}} seconds
// OPT-NEXT:   Pass spectral-rewrite took {{[0-9.e-]+}} seconds
// OPT-NEXT:   Pass cse took {{[0-9.e-]+}} seconds
// OPT-NEXT:   Pass fuse-matmul-epilogue took {{[0-9.e-]+}} seconds
// OPT-NEXT:   Pass fuse-elementwise took {{[0-9.e-]+}} seconds
// OPT-NEXT:   Pass fused-f32-intermediates took {{[0-9.e-]+}} seconds
// OPT-NEXT:   Pass merge-sibling-reductions took {{[0-9.e-]+}} seconds
// OPT-NEXT:   Pass dce took {{[0-9.e-]+}} seconds
// OPT-NEXT:   builtin.module {
