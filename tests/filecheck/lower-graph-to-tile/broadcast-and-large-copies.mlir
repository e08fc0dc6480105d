// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// tgraph.broadcast is a vector copy (tile_datamove.lower_broadcast): 16-byte stores,
// four per lane, 32-bit index math; a broadcast along the last dim loads one element
// per vector and splats it (vector.broadcast). Copies of 2**31 elements or more keep
// 32-bit indices: their leading dims go to grid y (here the batch of 128), the rest to
// grid x (the stride-16 dilation of a ViT-B/16 patch gradient at batch 128).

func.func @rows(%x: tensor<8x1024x1xbf16>) -> tensor<8x1024x768xbf16> {
  %0 = tgraph.broadcast %x : (tensor<8x1024x1xbf16>) -> tensor<8x1024x768xbf16>
  func.return %0 : tensor<8x1024x768xbf16>
}
// CHECK:      ttile.kernel @rows_broadcast_0(%[[O:.*]]: memref<8x1024x768xbf16>, %[[I:.*]]: memref<8x1024x1xbf16>) group_size = 256 {
// CHECK:        arith.cmpi ult, %{{.*}}, %{{.*}} : i32
// CHECK:        arith.remui %{{.*}}, %{{.*}} : i32
// CHECK:        %[[L:.*]] = ttile.load %[[I]][%{{.*}}, %{{.*}}, %{{.*}}] mask %{{.*}} : memref<8x1024x1xbf16> -> bf16
// CHECK-NEXT:   %[[V:.*]] = vector.broadcast %[[L]] : bf16 to vector<8xbf16>
// CHECK-COUNT-3: vector.broadcast
// CHECK:        ttile.store_vector %[[V]], %[[O]][%{{.*}}, %{{.*}}, %{{.*}}] mask %{{.*}} : vector<8xbf16>, memref<8x1024x768xbf16>
// CHECK-COUNT-3: ttile.store_vector
// CHECK-NEXT:   ttile.return
// CHECK:      func.func @rows(
// CHECK:        ttile.launch @rows_broadcast_0(%{{.*}}, %{{.*}}) grid = [768, 1, 1]

func.func @heads(%x: tensor<1x197x768xbf16>) -> tensor<8x197x768xbf16> {
  %0 = tgraph.broadcast %x : (tensor<1x197x768xbf16>) -> tensor<8x197x768xbf16>
  func.return %0 : tensor<8x197x768xbf16>
}
// CHECK:      ttile.kernel @heads_broadcast_0(%[[O:.*]]: memref<8x197x768xbf16>, %[[I:.*]]: memref<1x197x768xbf16>) group_size = 256 {
// CHECK-NOT:    vector.broadcast
// CHECK:        %[[V:.*]] = ttile.load_vector %[[I]][%{{.*}}, %[[S:.*]], %[[D:.*]]] mask %{{.*}} : memref<1x197x768xbf16> -> vector<8xbf16>
// CHECK:        ttile.store_vector %[[V]], %[[O]][%{{.*}}, %[[S]], %[[D]]] mask %{{.*}} : vector<8xbf16>, memref<8x197x768xbf16>

func.func @huge(%x: tensor<128x768x209x14x1xbf16>, %z: tensor<bf16>) -> tensor<128x768x209x14x16xbf16> {
  %0 = tgraph.broadcast %z : (tensor<bf16>) -> tensor<128x768x209x14x15xbf16>
  %1 = tgraph.concat %x, %0 axis = 4 : (tensor<128x768x209x14x1xbf16>, tensor<128x768x209x14x15xbf16>) -> tensor<128x768x209x14x16xbf16>
  func.return %1 : tensor<128x768x209x14x16xbf16>
}
// CHECK:      ttile.kernel @huge_broadcast_0(%[[O:.*]]: memref<128x768x209x14x15xbf16>, %[[I:.*]]: memref<bf16>) group_size = 256 {
// CHECK:        %[[Y:.*]] = ttile.tile_id y
// CHECK:        %[[YI:.*]] = arith.index_cast %[[Y]] : index to i32
// CHECK-NEXT:   %[[B:.*]] = arith.index_cast %[[YI]] : i32 to index
// CHECK-NEXT:   %[[N:.*]] = arith.constant 33707520 : i32
// CHECK-NEXT:   arith.cmpi ult, %{{.*}}, %[[N]] : i32
// CHECK:        arith.divui %{{.*}}, %{{.*}} : i32
// CHECK:        ttile.store %{{.*}}, %[[O]][%[[B]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] mask %{{.*}} : bf16, memref<128x768x209x14x15xbf16>
// CHECK:      ttile.kernel @huge_concat_1(%{{.*}}: memref<128x768x209x14x16xbf16>, %{{.*}}: memref<128x768x209x14x15xbf16>) group_size = 256 {
// CHECK:        ttile.tile_id y
// CHECK:      func.func @huge(
// CHECK:        ttile.launch @huge_broadcast_0(%{{.*}}, %{{.*}}) grid = [32918, 128, 1]
// CHECK:        ttile.launch @huge_concat_0(%{{.*}}, %{{.*}}) grid = [280896, 1, 1]
// CHECK:        ttile.launch @huge_concat_1(%{{.*}}, %{{.*}}) grid = [32918, 128, 1]
