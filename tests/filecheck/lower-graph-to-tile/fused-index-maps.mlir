// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// A fused body holding index maps (tessera.passes.tile_fused_maps) is one kernel over
// its result. Here: cat(-x[..., 4:], x[..., :4]) of a transposed x, times s. Each lane
// owns 4 consecutive f32 outputs; the halves of the concat are 4-aligned, so each is
// one vector load at the transposed index, its mask the lane's bound and the half's
// condition, and the halves are chosen by a select; s is read as a vector, the result
// stored as one. 2*3*5*8/4 = 60 lanes = 1 tile of 256.
func.func @rot(%x: tensor<2x5x3x8xf32>, %s: tensor<5x8xf32>) -> tensor<2x3x5x8xf32> {
  %0 = tgraph.fused %x, %s : (tensor<2x5x3x8xf32>, tensor<5x8xf32>) -> tensor<2x3x5x8xf32> {
  ^bb0(%1: tensor<2x5x3x8xf32>, %2: tensor<5x8xf32>):
    %t = tgraph.transpose %1 permutation = [0, 2, 1, 3] : (tensor<2x5x3x8xf32>) -> tensor<2x3x5x8xf32>
    %a = tgraph.slice %t start = [0, 0, 0, 4] limit = [2, 3, 5, 8] stride = [1, 1, 1, 1] : (tensor<2x3x5x8xf32>) -> tensor<2x3x5x4xf32>
    %b = tgraph.slice %t start = [0, 0, 0, 0] limit = [2, 3, 5, 4] stride = [1, 1, 1, 1] : (tensor<2x3x5x8xf32>) -> tensor<2x3x5x4xf32>
    %n = tgraph.neg %a : (tensor<2x3x5x4xf32>) -> tensor<2x3x5x4xf32>
    %c = tgraph.concat %n, %b axis = 3 : (tensor<2x3x5x4xf32>, tensor<2x3x5x4xf32>) -> tensor<2x3x5x8xf32>
    %r = tgraph.mul %c, %2 : (tensor<2x3x5x8xf32>, tensor<5x8xf32>) -> tensor<2x3x5x8xf32>
    tgraph.yield %r : tensor<2x3x5x8xf32>
  }
  func.return %0 : tensor<2x3x5x8xf32>
}
// CHECK:      ttile.kernel @rot_fused_0(%[[O:.*]]: memref<2x3x5x8xf32>, %[[X:.*]]: memref<2x5x3x8xf32>, %[[S:.*]]: memref<5x8xf32>) group_size = 256 {
// CHECK:        %[[OK:.*]] = arith.cmpi slt, %{{.*}}, %{{.*}} : index
// CHECK-COUNT-2: ttile.load_vector %[[X]]
// CHECK:        ttile.load_vector %[[S]]
// CHECK-NOT:    ttile.load
// CHECK:        arith.select
// CHECK:        ttile.store_vector %{{.*}}, %[[O]]
// CHECK:      ttile.launch @rot_fused_0(%{{.*}}) grid = [1, 1, 1]
