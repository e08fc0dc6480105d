// RUN: tessera-opt %s -p algebraic-simplify,cse,fuse-attention,fuse-matmul-epilogue,fuse-elementwise,dce --print-between-passes | filecheck %s

// Each step of the graph pipeline, printed between passes.
func.func @attn(%q: tensor<4x8xf32>, %k: tensor<4x8xf32>, %v: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x4xf32>) {
  %kt = tgraph.transpose %k permutation = [1, 0] : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %s = tgraph.matmul %q, %kt : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %a = tgraph.softmax %s axis = 1 : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %o = tgraph.matmul %a, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w = tgraph.matmul %o, %kt : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %r = tgraph.relu %w : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %t = tgraph.tanh %o : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %t2 = tgraph.tanh %o : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %n = tgraph.sub %t, %t2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %z = tgraph.exp %r : (tensor<4x4xf32>) -> tensor<4x4xf32>
  func.return %n, %z : tensor<4x8xf32>, tensor<4x4xf32>
}

// CHECK:      IR after algebraic-simplify:
// CHECK:        %s = tgraph.matmul %q, %k transpose_rhs
// CHECK:        %w = tgraph.matmul %o, %k transpose_rhs
// CHECK:        %n = tgraph.sub %t, %t2
// CHECK:      IR after cse:
// CHECK:        %n = tgraph.sub %t, %t :
// CHECK:      IR after fuse-attention:
// CHECK:        %o = tgraph.flash_attention %q, %k, %v scale = 1.000000e+00
// CHECK-NOT:    tgraph.softmax
// CHECK:      IR after fuse-matmul-epilogue:
// CHECK:        %r = tgraph.matmul_epilogue %o, %k transpose_rhs activation = "relu"
// CHECK:      IR after fuse-elementwise:
// CHECK:        %n = tgraph.fused %o
// CHECK:          tgraph.tanh
// CHECK-NEXT:     tgraph.sub
// CHECK:        %z = tgraph.exp %r
// CHECK:      builtin.module {
// CHECK:        func.return %n, %z
