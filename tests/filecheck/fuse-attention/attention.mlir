// RUN: tessera-opt %s -p fuse-attention | filecheck %s
// RUN: tessera-opt %s -p 'fuse-attention{fuse-scale=false fuse-causal-mask=false}' | filecheck %s --check-prefix=PLAIN

// The guide's attention: Kᵀ as a transpose, no scale -> scale = 1.0 (not 1/sqrt(D)).
func.func @guide(%q: tensor<8x16xf32>, %k: tensor<8x16xf32>, %v: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %kt = tgraph.transpose %k permutation = [1, 0] : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %s = tgraph.matmul %q, %kt : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %a = tgraph.softmax %s axis = 1 : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %o = tgraph.matmul %a, %v : (tensor<8x8xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %o : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @guide
// CHECK-NEXT:    %o = tgraph.flash_attention %q, %k, %v scale = 1.000000e+00 : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    func.return %o
// PLAIN-LABEL: func.func @guide
// PLAIN-NEXT:    tgraph.flash_attention %q, %k, %v scale = 1.000000e+00

// Batched, Kᵀ as transpose_rhs, scaled by a division, causal mask by select.
func.func @scaled_causal(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %d = tgraph.constant dense<4.0> : tensor<f32> -> tensor<f32>
  %tril = tgraph.constant dense<[[true, false, false, false, false, false, false, false], [true, true, false, false, false, false, false, false], [true, true, true, false, false, false, false, false], [true, true, true, true, false, false, false, false], [true, true, true, true, true, false, false, false], [true, true, true, true, true, true, false, false], [true, true, true, true, true, true, true, false], [true, true, true, true, true, true, true, true]]> : tensor<8x8xi1> -> tensor<8x8xi1>
  %ninf = tgraph.constant dense<"0x000080FF"> : tensor<f32> -> tensor<f32>
  %s = tgraph.matmul %q, %k transpose_rhs : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x8xf32>
  %t = tgraph.div %s, %d : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %m = tgraph.select %tril, %t, %ninf : (tensor<8x8xi1>, tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %a = tgraph.softmax %m axis = -1 : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o = tgraph.matmul %a, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  func.return %o : tensor<2x4x8x16xf32>
}
// CHECK-LABEL: func.func @scaled_causal
// CHECK:         %o = tgraph.flash_attention %q, %k, %v scale = 2.500000e-01 causal : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
// CHECK-NEXT:    func.return %o
// PLAIN-LABEL: func.func @scaled_causal
// PLAIN-NOT:     tgraph.flash_attention
// PLAIN:         tgraph.softmax

// (-inf is written as its little-endian bytes: xDSL does not parse hex float literals.)
// Mask first, then the scale as a multiplication; an additive mask (0 / -inf); K given
// already transposed ([D, S]) with no transpose op: one is inserted.
func.func @additive(%q: tensor<4x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %mask = tgraph.constant dense<"0x00000000000080FF000080FF000080FF0000000000000000000080FF000080FF000000000000000000000000000080FF00000000000000000000000000000000"> : tensor<4x4xf32> -> tensor<4x4xf32>
  %c = tgraph.constant dense<0.125> : tensor<f32> -> tensor<f32>
  %s = tgraph.matmul %q, %kt : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %m = tgraph.add %mask, %s : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %t = tgraph.mul %c, %m : (tensor<f32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %a = tgraph.softmax %t axis = 1 : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %o = tgraph.matmul %a, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %o : tensor<4x8xf32>
}
// CHECK-LABEL: func.func @additive
// CHECK:         %[[K:[0-9a-z_]+]] = tgraph.transpose %kt permutation = [1, 0] : (tensor<8x4xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %o = tgraph.flash_attention %q, %[[K]], %v scale = 1.250000e-01 causal

// Not attention: softmax over another axis, a mask that is not causal, a score with a
// second user, a negative scale.
func.func @not_attention(%q: tensor<4x8xf32>, %k: tensor<4x8xf32>, %v: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x4xf32>, tensor<4x8xf32>) {
  %s0 = tgraph.matmul %q, %k transpose_rhs : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  %a0 = tgraph.softmax %s0 axis = 0 : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %o0 = tgraph.matmul %a0, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %triu = tgraph.constant dense<[[true, true, true, true], [false, true, true, true], [false, false, true, true], [false, false, false, true]]> : tensor<4x4xi1> -> tensor<4x4xi1>
  %ninf = tgraph.constant dense<"0x000080FF"> : tensor<f32> -> tensor<f32>
  %s1 = tgraph.matmul %q, %k transpose_rhs : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  %m1 = tgraph.select %triu, %s1, %ninf : (tensor<4x4xi1>, tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xf32>
  %a1 = tgraph.softmax %m1 axis = 1 : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %o1 = tgraph.matmul %a1, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %s2 = tgraph.matmul %q, %k transpose_rhs : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  %a2 = tgraph.softmax %s2 axis = 1 : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %o2 = tgraph.matmul %a2, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %neg = tgraph.constant dense<-2.0> : tensor<f32> -> tensor<f32>
  %s3 = tgraph.matmul %q, %k transpose_rhs : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  %t3 = tgraph.mul %s3, %neg : (tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xf32>
  %a3 = tgraph.softmax %t3 axis = 1 : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %o3 = tgraph.matmul %a3, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %o0, %o1, %o2, %s2, %o3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x4xf32>, tensor<4x8xf32>
}
// CHECK-LABEL: func.func @not_attention
// CHECK-NOT:     tgraph.flash_attention
// CHECK:         func.return
