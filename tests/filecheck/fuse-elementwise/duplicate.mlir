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

// A cast that narrows (f32 -> bf16) would make each consumer read the wider input: it is
// stored once. So is a producer one of whose users is no elementwise consumer (the
// matmul), or one that reads two full-size tensors.

func.func @kept(%x: tensor<64x64xf32>, %y: tensor<64x64xf32>) -> (tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) {
  %c = tgraph.cast %x : (tensor<64x64xf32>) -> tensor<64x64xbf16>
  %a = tgraph.neg %c : (tensor<64x64xbf16>) -> tensor<64x64xbf16>
  %b = tgraph.exp %c : (tensor<64x64xbf16>) -> tensor<64x64xbf16>
  %e = tgraph.exp %x : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %mm = tgraph.matmul %e, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %n = tgraph.neg %e : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %s = tgraph.add %x, %y : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %s1 = tgraph.neg %s : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %s2 = tgraph.exp %s : (tensor<64x64xf32>) -> tensor<64x64xf32>
  func.return %a, %b, %mm, %n, %s1, %s2 : tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>
}
// CHECK-LABEL: func.func @kept
// CHECK:       %[[C:.*]] = tgraph.cast %x
// CHECK:       tgraph.neg %[[C]]
// CHECK:       tgraph.exp %[[C]]
// CHECK:       %[[E:.*]] = tgraph.exp %x
// CHECK:       tgraph.matmul %[[E]], %x
// CHECK:       tgraph.neg %[[E]]
// CHECK:       %[[S:.*]] = tgraph.add %x, %y
// CHECK:       tgraph.neg %[[S]]
// CHECK:       tgraph.exp %[[S]]
