// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// Reductions that keep the last axis (tile_colreduce): one lane per kept element
// (neighbouring lanes, neighbouring addresses), the reduced elements cut into chunks
// along grid y whose f32 partials a second kernel adds in order. With enough columns
// (the position-embedding gradient: 197 x 768) one chunk: a single kernel.

func.func @bias(%x: tensor<128x197x768xbf16>) -> (tensor<768xbf16>, tensor<1x197x768xbf16>) {
  %0 = tgraph.sum %x axes = [0, 1] : (tensor<128x197x768xbf16>) -> tensor<768xbf16>
  %1 = tgraph.sum %x axes = [0] keepdims : (tensor<128x197x768xbf16>) -> tensor<1x197x768xbf16>
  func.return %0, %1 : tensor<768xbf16>, tensor<1x197x768xbf16>
}
// CHECK:      ttile.kernel @bias_sum_0(%[[P:.*]]: memref<170x768xf32>, %[[X:.*]]: memref<128x197x768xbf16>) group_size = 256 {
// CHECK:        %[[C:.*]] = arith.index_cast %{{.*}} : i32 to index
// CHECK:        ttile.tile_id y
// CHECK:        %[[N:.*]] = arith.constant 149 : index
// CHECK:        %[[S:.*]] = scf.for %{{.*}} = %{{.*}} to %[[N]] step %{{.*}} iter_args(%[[A:.*]] = %{{.*}}) -> (f32) {
// CHECK:          arith.divui %{{.*}}, %{{.*}} : i32
// CHECK:          %[[L:.*]] = ttile.load %[[X]][%{{.*}}, %{{.*}}, %[[C]]] mask %{{.*}} : memref<128x197x768xbf16> -> bf16
// CHECK:          arith.addf %[[A]], %{{.*}} : f32
// CHECK:        %[[Y:.*]] = ttile.tile_id y
// CHECK-NEXT:   ttile.store %[[S]], %[[P]][%[[Y]], %[[C]]] mask %{{.*}} : f32, memref<170x768xf32>
// CHECK:      ttile.kernel @bias_sum_combine_0(%[[O:.*]]: memref<768xbf16>, %[[P2:.*]]: memref<170x768xf32>) group_size = 256 {
// CHECK:        scf.for
// CHECK-NEXT:     ttile.load %[[P2]][%{{.*}}, %{{.*}}] mask %{{.*}} : memref<170x768xf32> -> f32
// CHECK:        arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT:   ttile.store %{{.*}}, %[[O]][%{{.*}}] mask %{{.*}} : bf16, memref<768xbf16>
// CHECK:      ttile.kernel @bias_sum_1(%{{.*}}: memref<1x197x768xbf16>, %{{.*}}: memref<128x197x768xbf16>) group_size = 256 {
// CHECK-NOT:    ttile.tile_id y
// CHECK:        ttile.return
// CHECK:      func.func @bias(
// CHECK:        ttile.launch @bias_sum_0(%{{.*}}, %{{.*}}) grid = [3, 170, 1]
// CHECK-NEXT:   ttile.launch @bias_sum_combine_0(%{{.*}}, %{{.*}}) grid = [3, 1, 1]
// CHECK:        ttile.launch @bias_sum_1(%{{.*}}, %{{.*}}) grid = [591, 1, 1]
