// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// tgraph.broadcast is a vector copy (tile_datamove.lower_broadcast) over views whose
// adjacent dims are merged where both repeat or both copy (a scalar's broadcast is flat):
// 16-byte stores, four per lane, 32-bit index math; a broadcast along the last dim loads
// one element per vector and splats it (vector.broadcast). Copies of 2**31 vectors or
// more keep 32-bit indices: their leading dims go to grid y (here the batch of 128), the
// rest to grid x (the stride-16 dilation a ViT-B/16 patch gradient used to build).

func.func @rows(%x: tensor<8x1024x1xbf16>) -> tensor<8x1024x768xbf16> {
  %0 = tgraph.broadcast %x : (tensor<8x1024x1xbf16>) -> tensor<8x1024x768xbf16>
  func.return %0 : tensor<8x1024x768xbf16>
}
// CHECK:      ttile.kernel @rows_broadcast_0(%[[O:.*]]: memref<8192x768xbf16>, %[[I:.*]]: memref<8192x1xbf16>) group_size = 256 {
// CHECK:        arith.cmpi ult, %{{.*}}, %{{.*}} : i32
// CHECK:        arith.remui %{{.*}}, %{{.*}} : i32
// CHECK:        %[[L:.*]] = ttile.load %[[I]][%{{.*}}, %{{.*}}] mask %{{.*}} : memref<8192x1xbf16> -> bf16
// CHECK-NEXT:   %[[V:.*]] = vector.broadcast %[[L]] : bf16 to vector<8xbf16>
// CHECK-COUNT-3: vector.broadcast
// CHECK:        ttile.store_vector %[[V]], %[[O]][%{{.*}}, %{{.*}}] mask %{{.*}} : vector<8xbf16>, memref<8192x768xbf16>
// CHECK-COUNT-3: ttile.store_vector
// CHECK-NEXT:   ttile.return
// CHECK:      func.func @rows(%[[X:.*]]: memref<8x1024x1xbf16>)
// CHECK-NEXT:   %[[A:.*]] = memref.alloc() : memref<8x1024x768xbf16>
// CHECK-NEXT:   %[[AV:.*]] = memref.collapse_shape %[[A]] {{\[}}[0 : i64, 1 : i64], [2 : i64]] : memref<8x1024x768xbf16> into memref<8192x768xbf16>
// CHECK-NEXT:   %[[XV:.*]] = memref.collapse_shape %[[X]] {{.*}} into memref<8192x1xbf16>
// CHECK-NEXT:   ttile.launch @rows_broadcast_0(%[[AV]], %[[XV]]) grid = [768, 1, 1]
// CHECK-NEXT:   func.return %[[A]]

func.func @heads(%x: tensor<1x197x768xbf16>) -> tensor<8x197x768xbf16> {
  %0 = tgraph.broadcast %x : (tensor<1x197x768xbf16>) -> tensor<8x197x768xbf16>
  func.return %0 : tensor<8x197x768xbf16>
}
// CHECK:      ttile.kernel @heads_broadcast_0(%[[O:.*]]: memref<8x151296xbf16>, %[[I:.*]]: memref<1x151296xbf16>) group_size = 256 {
// CHECK-NOT:    vector.broadcast
// CHECK:        %[[V:.*]] = ttile.load_vector %[[I]][%{{.*}}, %[[D:.*]]] mask %{{.*}} : memref<1x151296xbf16> -> vector<8xbf16>
// CHECK:        ttile.store_vector %[[V]], %[[O]][%{{.*}}, %[[D]]] mask %{{.*}} : vector<8xbf16>, memref<8x151296xbf16>

func.func @huge(%x: tensor<128x768x209x14x1xbf16>, %z: tensor<bf16>) -> tensor<128x768x209x14x16xbf16> {
  %0 = tgraph.broadcast %z : (tensor<bf16>) -> tensor<128x768x209x14x15xbf16>
  %1 = tgraph.concat %x, %0 axis = 4 : (tensor<128x768x209x14x1xbf16>, tensor<128x768x209x14x15xbf16>) -> tensor<128x768x209x14x16xbf16>
  func.return %1 : tensor<128x768x209x14x16xbf16>
}
// CHECK:      ttile.kernel @huge_broadcast_0(%[[O:.*]]: memref<4314562560xbf16>, %[[I:.*]]: memref<1xbf16>) group_size = 256 {
// CHECK:        %[[N:.*]] = arith.constant 539320320 : i32
// CHECK-NEXT:   arith.cmpi ult, %{{.*}}, %[[N]] : i32
// CHECK:        vector.broadcast %{{.*}} : bf16 to vector<8xbf16>
// CHECK:        ttile.store_vector %{{.*}}, %[[O]][%{{.*}}] mask %{{.*}} : vector<8xbf16>, memref<4314562560xbf16>
// CHECK:      ttile.kernel @huge_concat_1(%[[O:.*]]: memref<128x768x209x14x16xbf16>, %{{.*}}: memref<128x768x209x14x15xbf16>) group_size = 256 {
// CHECK:        %[[Y:.*]] = ttile.tile_id y
// CHECK:        %[[YI:.*]] = arith.index_cast %[[Y]] : index to i32
// CHECK-NEXT:   %[[B:.*]] = arith.index_cast %[[YI]] : i32 to index
// CHECK-NEXT:   %[[N:.*]] = arith.constant 33707520 : i32
// CHECK-NEXT:   arith.cmpi ult, %{{.*}}, %[[N]] : i32
// CHECK:        arith.divui %{{.*}}, %{{.*}} : i32
// CHECK:        ttile.store %{{.*}}, %[[O]][%[[B]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] mask %{{.*}} : bf16, memref<128x768x209x14x16xbf16>
// CHECK:      func.func @huge(
// CHECK:        ttile.launch @huge_broadcast_0(%{{.*}}, %{{.*}}) grid = [526680, 1, 1]
// CHECK:        ttile.launch @huge_concat_0(%{{.*}}, %{{.*}}) grid = [280896, 1, 1]
// CHECK:        ttile.launch @huge_concat_1(%{{.*}}, %{{.*}}) grid = [32918, 128, 1]
