// RUN: tessera-opt %s -p fuse-elementwise | filecheck %s

// A producer used by several consumers is copied into each when that reads no more
// memory than storing its result: batch norm's x - mean (one tensor of the result's
// size, the mean broadcast) feeds the variance's reduction and the normalization, and
// is computed in both kernels, never stored.

func.func @norm(%x: tensor<8x16x32xf32>, %m: tensor<1x16x1xf32>, %r: tensor<1x16x1xf32>) -> (tensor<16xf32>, tensor<8x16x32xf32>) {
  %d = tgraph.sub %x, %m : (tensor<8x16x32xf32>, tensor<1x16x1xf32>) -> tensor<8x16x32xf32>
  %sq = tgraph.mul %d, %d : (tensor<8x16x32xf32>, tensor<8x16x32xf32>) -> tensor<8x16x32xf32>
  %v = tgraph.sum %sq axes = [0, 2] : (tensor<8x16x32xf32>) -> tensor<16xf32>
  %y = tgraph.mul %d, %r : (tensor<8x16x32xf32>, tensor<1x16x1xf32>) -> tensor<8x16x32xf32>
  func.return %v, %y : tensor<16xf32>, tensor<8x16x32xf32>
}
// CHECK-LABEL: func.func @norm
// CHECK-NOT:   tgraph.sub %x
// CHECK:       tgraph.fused %x, %m : (tensor<8x16x32xf32>, tensor<1x16x1xf32>) -> tensor<16xf32>
// CHECK:         tgraph.sub
// CHECK:         tgraph.sum
// CHECK:       tgraph.fused %x, %m, %r : ({{.*}}) -> tensor<8x16x32xf32>
// CHECK:         tgraph.sub
// CHECK:         tgraph.mul

// Per element, storing a producer's result costs reading its large inputs, writing
// it and each user reading it; a copy costs each user the large inputs it does not
// read already. A cast that narrows (f32 -> bf16) with two users: storing moves
// 4 + 2 + 2 * 2 bytes, copying 2 * 4: copied. So is a sum of two f32 tensors with two
// users (16 + 2 * 4 bytes stored, 2 * 8 copied), and the relu backward of bf16 tensors
// stored as f32 (4 + 4 + 3 * 4 bytes stored, 3 * 4 copied).

func.func @copied(%x: tensor<64x64xf32>, %y: tensor<64x64xf32>, %a: tensor<64x64xbf16>, %g: tensor<64x64xbf16>, %m: tensor<1x64xf32>) -> (tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>) {
  %c = tgraph.cast %x : (tensor<64x64xf32>) -> tensor<64x64xbf16>
  %c1 = tgraph.neg %c : (tensor<64x64xbf16>) -> tensor<64x64xbf16>
  %c2 = tgraph.exp %c : (tensor<64x64xbf16>) -> tensor<64x64xbf16>
  %s = tgraph.add %x, %y : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %s1 = tgraph.neg %s : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %s2 = tgraph.exp %s : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %z = tgraph.constant dense<0.0> : tensor<f32> -> tensor<bf16>
  %le = tgraph.le %a, %z : (tensor<64x64xbf16>, tensor<bf16>) -> tensor<64x64xi1>
  %sel = tgraph.select %le, %z, %g : (tensor<64x64xi1>, tensor<bf16>, tensor<64x64xbf16>) -> tensor<64x64xbf16>
  %d = tgraph.cast %sel : (tensor<64x64xbf16>) -> tensor<64x64xf32>
  %r1 = tgraph.sum %d axes = [0] : (tensor<64x64xf32>) -> tensor<64xf32>
  %dm = tgraph.mul %d, %m : (tensor<64x64xf32>, tensor<1x64xf32>) -> tensor<64x64xf32>
  %r2 = tgraph.sum %dm axes = [0] : (tensor<64x64xf32>) -> tensor<64xf32>
  %dx = tgraph.sub %d, %m : (tensor<64x64xf32>, tensor<1x64xf32>) -> tensor<64x64xf32>
  func.return %c1, %c2, %s1, %s2, %r1, %r2, %dx : tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>
}
// CHECK-LABEL: func.func @copied
// CHECK-NOT:   tgraph.cast %x
// CHECK-NOT:   tgraph.add %x, %y
// CHECK:       tgraph.fused %x :
// CHECK:         tgraph.cast
// CHECK:         tgraph.neg
// CHECK:       tgraph.fused %x :
// CHECK:         tgraph.cast
// CHECK:         tgraph.exp
// CHECK:       tgraph.fused %x, %y :
// CHECK:         tgraph.add
// CHECK:         tgraph.neg
// CHECK:       tgraph.fused %x, %y :
// CHECK:         tgraph.add
// CHECK:         tgraph.exp
// CHECK-NOT:   -> tensor<64x64xf32> {
// CHECK:       tgraph.fused %a, %g : ({{.*}}) -> tensor<64xf32>
// CHECK:         tgraph.select
// CHECK:         tgraph.sum
// CHECK:       tgraph.fused %a, %g, %m : ({{.*}}) -> tensor<64xf32>
// CHECK:         tgraph.select
// CHECK:         tgraph.sum
// CHECK:       tgraph.fused %a, %g, %m : ({{.*}}) -> tensor<64x64xf32>
// CHECK:         tgraph.select
// CHECK:         tgraph.sub

// Stored once: a producer one of whose users is no elementwise consumer (the matmul),
// a sum of two f32 tensors with four users (16 + 5 * 4 bytes stored, 4 * 8 copied), a
// narrowing cast with five users (4 + 6 * 2 stored, 5 * 4 copied).

func.func @kept(%x: tensor<64x64xf32>, %y: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xbf16>) {
  %e = tgraph.exp %x : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %mm = tgraph.matmul %e, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %n = tgraph.neg %e : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %s = tgraph.add %x, %y : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %s1 = tgraph.neg %s : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %s2 = tgraph.exp %s : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %s3 = tgraph.sin %s : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %s4 = tgraph.cos %s : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %c = tgraph.cast %x : (tensor<64x64xf32>) -> tensor<64x64xbf16>
  %c1 = tgraph.neg %c : (tensor<64x64xbf16>) -> tensor<64x64xbf16>
  %c2 = tgraph.exp %c : (tensor<64x64xbf16>) -> tensor<64x64xbf16>
  %c3 = tgraph.sin %c : (tensor<64x64xbf16>) -> tensor<64x64xbf16>
  %c4 = tgraph.cos %c : (tensor<64x64xbf16>) -> tensor<64x64xbf16>
  %c5 = tgraph.abs %c : (tensor<64x64xbf16>) -> tensor<64x64xbf16>
  func.return %mm, %n, %s1, %s2, %s3, %s4, %c1, %c2, %c3, %c4, %c5 : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xbf16>
}
// CHECK-LABEL: func.func @kept
// CHECK:       %[[E:.*]] = tgraph.exp %x
// CHECK:       tgraph.matmul %[[E]], %x
// CHECK:       tgraph.neg %[[E]]
// CHECK:       %[[S:.*]] = tgraph.add %x, %y
// CHECK:       tgraph.neg %[[S]]
// CHECK:       tgraph.exp %[[S]]
// CHECK:       tgraph.sin %[[S]]
// CHECK:       tgraph.cos %[[S]]
// CHECK:       %[[C:.*]] = tgraph.cast %x
// CHECK:       tgraph.neg %[[C]]
// CHECK:       tgraph.abs %[[C]]
