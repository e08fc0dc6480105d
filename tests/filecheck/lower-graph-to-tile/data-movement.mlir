// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// Data movement (tile_datamove). A reshape is no kernel: a view of its input's buffer
// (memref.collapse_shape / memref.expand_shape on the host). A transpose that keeps
// the last dim, a slice and a concat are vector copies (8 x bf16 = 16 bytes per
// access, four per lane, 32-bit index math). A transpose of the last dim goes through
// a padded shared-memory tile. A returned view of an argument is copied.

func.func @attn(%x: tensor<8x1024x768xbf16>) -> tensor<8x12x1024x64xbf16> {
  %0 = tgraph.reshape %x : (tensor<8x1024x768xbf16>) -> tensor<8x1024x12x64xbf16>
  %1 = tgraph.transpose %0 permutation = [0, 2, 1, 3] : (tensor<8x1024x12x64xbf16>) -> tensor<8x12x1024x64xbf16>
  func.return %1 : tensor<8x12x1024x64xbf16>
}
// CHECK:      ttile.kernel @attn_transpose_0(%[[O:.*]]: memref<8x12x1024x64xbf16>, %[[I:.*]]: memref<8x1024x12x64xbf16>) group_size = 256 {
// CHECK:        arith.remui %{{.*}}, %{{.*}} : i32
// CHECK:        %[[V:.*]] = ttile.load_vector %[[I]][%[[B:.*]], %[[S:.*]], %[[H:.*]], %[[D:.*]]] mask %{{.*}} : memref<8x1024x12x64xbf16> -> vector<8xbf16>
// CHECK-COUNT-3: ttile.load_vector
// CHECK:        ttile.store_vector %[[V]], %[[O]][%[[B]], %[[H]], %[[S]], %[[D]]] mask %{{.*}} : vector<8xbf16>, memref<8x12x1024x64xbf16>
// CHECK-COUNT-3: ttile.store_vector
// CHECK-NEXT:   ttile.return
// CHECK:      func.func @attn(%[[X:.*]]: memref<8x1024x768xbf16>) -> memref<8x12x1024x64xbf16> {
// CHECK-NEXT:   %[[R:.*]] = memref.expand_shape %[[X]] {{\[}}[0 : i64], [1 : i64], [2 : i64, 3 : i64]] output_shape [8, 1024, 12, 64] : memref<8x1024x768xbf16> into memref<8x1024x12x64xbf16>
// CHECK-NEXT:   %[[T:.*]] = memref.alloc() : memref<8x12x1024x64xbf16>
// CHECK-NEXT:   ttile.launch @attn_transpose_0(%[[T]], %[[R]]) grid = [768, 1, 1]
// CHECK-NEXT:   func.return %[[T]]

func.func @chain(%x: tensor<6x35xf32>) -> (tensor<5x42xf32>, tensor<7x30xf32>) {
  %0 = tgraph.add %x, %x : (tensor<6x35xf32>, tensor<6x35xf32>) -> tensor<6x35xf32>
  %1 = tgraph.reshape %0 : (tensor<6x35xf32>) -> tensor<210xf32>
  %2 = tgraph.reshape %1 : (tensor<210xf32>) -> tensor<7x30xf32>
  %3 = tgraph.reshape %x : (tensor<6x35xf32>) -> tensor<5x42xf32>
  func.return %3, %2 : tensor<5x42xf32>, tensor<7x30xf32>
}
// CHECK-NOT:  ttile.kernel @chain_reshape
// CHECK:      func.func @chain(%[[X:.*]]: memref<6x35xf32>) -> (memref<5x42xf32>, memref<7x30xf32>) {
// CHECK-NEXT:   %[[A:.*]] = memref.alloc() : memref<6x35xf32>
// CHECK-NEXT:   %[[XA:.*]] = memref.collapse_shape %[[X]] {{\[}}[0 : i64, 1 : i64]] : memref<6x35xf32> into memref<210xf32>
// CHECK-NEXT:   %[[AF:.*]] = memref.collapse_shape %[[A]] {{\[}}[0 : i64, 1 : i64]] : memref<6x35xf32> into memref<210xf32>
// CHECK-NEXT:   ttile.launch @chain_add_0(%[[AF]], %[[XA]], %[[XA]])
// CHECK-NEXT:   %[[F:.*]] = memref.collapse_shape %[[A]] {{\[}}[0 : i64, 1 : i64]] : memref<6x35xf32> into memref<210xf32>
// CHECK-NEXT:   %[[C:.*]] = memref.expand_shape %[[F]] {{\[}}[0 : i64, 1 : i64]] output_shape [7, 30] : memref<210xf32> into memref<7x30xf32>
// CHECK-NEXT:   %[[XF:.*]] = memref.collapse_shape %[[X]] {{\[}}[0 : i64, 1 : i64]] : memref<6x35xf32> into memref<210xf32>
// CHECK-NEXT:   %[[XV:.*]] = memref.expand_shape %[[XF]] {{.*}} into memref<5x42xf32>
// CHECK-NEXT:   %[[CP:.*]] = memref.alloc() : memref<5x42xf32>
// CHECK-NEXT:   %[[CPF:.*]] = memref.collapse_shape %[[CP]] {{.*}} into memref<210xf32>
// CHECK-NEXT:   %[[XVF:.*]] = memref.collapse_shape %[[XV]] {{.*}} into memref<210xf32>
// CHECK-NEXT:   ttile.launch @chain_copy_0(%[[CPF]], %[[XVF]]) grid = [1, 1, 1]
// CHECK-NEXT:   func.return %[[CP]], %[[C]] : memref<5x42xf32>, memref<7x30xf32>

func.func @t(%x: tensor<33x65xbf16>) -> tensor<65x33xbf16> {
  %0 = tgraph.transpose %x permutation = [1, 0] : (tensor<33x65xbf16>) -> tensor<65x33xbf16>
  func.return %0 : tensor<65x33xbf16>
}
// CHECK:      ttile.kernel @t_transpose_0(%[[O:.*]]: memref<65x33xbf16>, %[[I:.*]]: memref<33x65xbf16>) group_size = 256 {
// CHECK-NEXT:   %[[SM:.*]] = ttile.alloc_shared : memref<4160xbf16, #tessera.smem>
// CHECK:        %[[L:.*]] = ttile.load %[[I]][%{{.*}}, %{{.*}}] mask %{{.*}} : memref<33x65xbf16> -> bf16
// CHECK:        arith.constant 65 : index
// CHECK:        ttile.store %[[L]], %[[SM]][%{{.*}}] : bf16, memref<4160xbf16, #tessera.smem>
// CHECK:        ttile.barrier
// CHECK:        %[[S:.*]] = ttile.load %[[SM]][%{{.*}}] : memref<4160xbf16, #tessera.smem> -> bf16
// CHECK-NEXT:   ttile.store %[[S]], %[[O]][%{{.*}}, %{{.*}}] mask %{{.*}} : bf16, memref<65x33xbf16>
// CHECK:      func.func @t(
// CHECK-NEXT:   memref.alloc() : memref<65x33xbf16>
// CHECK-NEXT:   ttile.launch @t_transpose_0({{.*}}) grid = [2, 1, 1]

func.func @sc(%x: tensor<4x40xbf16>, %y: tensor<4x24xbf16>) -> (tensor<2x32xbf16>, tensor<4x64xbf16>, tensor<4x3xbf16>) {
  %0 = tgraph.slice %x start = [1, 8] limit = [3, 40] stride = [1, 1] : (tensor<4x40xbf16>) -> tensor<2x32xbf16>
  %1 = tgraph.concat %x, %y axis = 1 : (tensor<4x40xbf16>, tensor<4x24xbf16>) -> tensor<4x64xbf16>
  %2 = tgraph.slice %x start = [0, 1] limit = [4, 4] stride = [1, 1] : (tensor<4x40xbf16>) -> tensor<4x3xbf16>
  func.return %0, %1, %2 : tensor<2x32xbf16>, tensor<4x64xbf16>, tensor<4x3xbf16>
}
// CHECK:      ttile.kernel @sc_slice_0(
// CHECK:        ttile.load_vector {{.*}} : memref<4x40xbf16> -> vector<8xbf16>
// CHECK:      ttile.kernel @sc_concat_0(
// CHECK:        ttile.load_vector {{.*}} : memref<4x40xbf16> -> vector<8xbf16>
// CHECK:        ttile.store_vector {{.*}} : vector<8xbf16>, memref<4x64xbf16>
// CHECK:      ttile.kernel @sc_concat_1(
// CHECK:        arith.constant 40 : index
// CHECK:        ttile.store_vector {{.*}} : vector<8xbf16>, memref<4x64xbf16>
// CHECK:      ttile.kernel @sc_slice_1(
// CHECK-NOT:    ttile.load_vector
// CHECK:        ttile.load {{.*}} : memref<4x40xbf16> -> bf16
// CHECK:        ttile.return
