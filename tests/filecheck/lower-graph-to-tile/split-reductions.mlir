// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// A reduction to few outputs over many elements (tile_splitreduce): the mean of a whole
// [128, 768, 14, 14] activation (a loss) runs on 1056 tiles of 256 lanes along grid y,
// each over its chunk of 18,246 elements (32-bit index math, a tile-wide reduce), and a
// second kernel adds the 1056 f32 partials in order and divides by the count.

func.func @loss(%x: tensor<128x768x14x14xf32>) -> tensor<f32> {
  %0 = tgraph.mean %x axes = [0, 1, 2, 3] : (tensor<128x768x14x14xf32>) -> tensor<f32>
  func.return %0 : tensor<f32>
}
// CHECK:      ttile.kernel @loss_mean_0(%[[P:.*]]: memref<1x1056xf32>, %[[X:.*]]: memref<128x768x14x14xf32>) group_size = 256 {
// CHECK:        ttile.tile_id y
// CHECK:        %[[N:.*]] = arith.constant 72 : index
// CHECK:        %[[S:.*]] = scf.for %{{.*}} = %{{.*}} to %[[N]] step %{{.*}} iter_args(%[[A:.*]] = %{{.*}}) -> (f32) {
// CHECK:          arith.divui %{{.*}}, %{{.*}} : i32
// CHECK:          ttile.load %[[X]][%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] mask %{{.*}} : memref<128x768x14x14xf32> -> f32
// CHECK:          arith.addf %[[A]], %{{.*}} : f32
// CHECK:        %[[R:.*]] = ttile.reduce %[[S]] kind = sum scope = group : f32
// CHECK:        ttile.store %[[R]], %[[P]][%{{.*}}, %{{.*}}] mask %{{.*}} : f32, memref<1x1056xf32>
// CHECK:      ttile.kernel @loss_mean_combine_0(%[[O:.*]]: memref<f32>, %[[P2:.*]]: memref<1x1056xf32>) group_size = 256 {
// CHECK:        scf.for
// CHECK-NEXT:     ttile.load %[[P2]][%{{.*}}, %{{.*}}] mask %{{.*}} : memref<1x1056xf32> -> f32
// CHECK:        arith.divf
// CHECK-NEXT:   ttile.store %{{.*}}, %[[O]][] mask %{{.*}} : f32, memref<f32>
// CHECK:      func.func @loss(
// CHECK:        ttile.launch @loss_mean_0(%{{.*}}, %{{.*}}) grid = [1, 1056, 1]
// CHECK-NEXT:   ttile.launch @loss_mean_combine_0(%{{.*}}, %{{.*}}) grid = [1, 1, 1]
