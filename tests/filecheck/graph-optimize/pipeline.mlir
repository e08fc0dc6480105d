// RUN: tessera-opt %s -p graph-optimize | filecheck %s
// RUN: tessera-opt %s -p 'graph-optimize{fuse-attention=false}' | filecheck %s --check-prefix=NOATTN
// RUN: tessera-opt %s -p 'graph-optimize{fuse-elementwise=false fuse-matmul-epilogue=false}' | filecheck %s --check-prefix=NOFUSE
// RUN: tessera-opt %s -p 'graph-optimize{algebraic-simplify=false spectral-rewrite=false cse=false fuse-attention=false fuse-matmul-epilogue=false fuse-elementwise=false dce=false}' | filecheck %s --check-prefix=NONE

// A transformer-style block: attention (K transposed, x * 1 left over), then an MLP.
func.func @block(%x: tensor<8x16xf32>, %wq: tensor<16x16xf32>, %wk: tensor<16x16xf32>, %wv: tensor<16x16xf32>, %w1: tensor<16x32xf32>, %b1: tensor<32xf32>) -> tensor<8xf32> {
  %one = tgraph.constant dense<1.0> : tensor<f32> -> tensor<8x16xf32>
  %q = tgraph.matmul %x, %wq : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %k = tgraph.matmul %x, %wk : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %v = tgraph.matmul %x, %wv : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %q1 = tgraph.mul %q, %one : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %kt = tgraph.transpose %k permutation = [1, 0] : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %s = tgraph.matmul %q1, %kt : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %a = tgraph.softmax %s axis = -1 : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %o = tgraph.matmul %a, %v : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %h = tgraph.matmul %o, %w1 : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %hb = tgraph.add %h, %b1 : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %g = tgraph.gelu %hb : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %sq = tgraph.mul %g, %g : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  %e = tgraph.exp %sq : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %r = tgraph.sum %e axes = [1] : (tensor<8x32xf32>) -> tensor<8xf32>
  %dead = tgraph.exp %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %r : tensor<8xf32>
}
// CHECK-LABEL: func.func @block
// CHECK-NEXT:    %q = tgraph.matmul %x, %wq
// CHECK-NEXT:    %k = tgraph.matmul %x, %wk
// CHECK-NEXT:    %v = tgraph.matmul %x, %wv
// CHECK-NEXT:    %o = tgraph.flash_attention %q, %k, %v scale = 1.000000e+00
// CHECK-NEXT:    %g = tgraph.matmul_epilogue %o, %w1 bias %b1 activation = "gelu"
// CHECK-NEXT:    %r = tgraph.fused %g : (tensor<8x32xf32>) -> tensor<8xf32> {
// CHECK:           tgraph.mul
// CHECK-NEXT:      tgraph.exp
// CHECK-NEXT:      tgraph.sum
// CHECK-NEXT:      tgraph.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r
// NOATTN-LABEL: func.func @block
// NOATTN:         %s = tgraph.matmul %q, %k transpose_rhs
// NOATTN-NEXT:    %a = tgraph.softmax %s
// NOATTN-NEXT:    %o = tgraph.matmul %a, %v
// NOFUSE-LABEL: func.func @block
// NOFUSE:         tgraph.flash_attention
// NOFUSE-NEXT:    tgraph.matmul %o, %w1
// NOFUSE-NEXT:    tgraph.add
// NOFUSE-NOT:     tgraph.fused
// NONE-LABEL: func.func @block
// NONE:         %dead = tgraph.exp %x
