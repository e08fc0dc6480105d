// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// cholesky: one tile per matrix (grid = batch), working in the output buffer in global
// memory. The lower triangle of A is copied (upper set to 0), then one uniform scf.for
// over the columns: read the pivot, barrier, write sqrt(pivot) (NaN for a pivot that
// is not positive) and scale the column, barrier, update the trailing triangle with
// lanes striding over the (n-k-1)^2 square, barrier.

func.func @f(%a: tensor<2x5x5xf32>, %b: tensor<40x40xf64>) -> (tensor<2x5x5xf32>, tensor<40x40xf64>) {
  %0 = tgraph.cholesky %a : (tensor<2x5x5xf32>) -> tensor<2x5x5xf32>
  %1 = tgraph.cholesky %b : (tensor<40x40xf64>) -> tensor<40x40xf64>
  func.return %0, %1 : tensor<2x5x5xf32>, tensor<40x40xf64>
}
// CHECK:      ttile.kernel @f_cholesky_0(%[[L:.*]]: memref<2x5x5xf32>, %[[A:.*]]: memref<2x5x5xf32>) group_size = 32 {
// CHECK:        ttile.tile_id x
// CHECK:        ttile.load %[[A]]
// CHECK:        arith.select
// CHECK:        ttile.store %{{.*}}, %[[L]]
// CHECK:        ttile.barrier
// CHECK:        scf.for
// CHECK:          %[[D:.*]] = ttile.load %[[L]]
// CHECK:          %[[POS:.*]] = arith.cmpf ogt, %[[D]], %{{.*}} : f32
// CHECK:          %[[SQ:.*]] = math.sqrt %[[D]] : f32
// CHECK:          arith.select %[[POS]], %[[SQ]], %{{.*}} : f32
// CHECK:          arith.divf
// CHECK:          ttile.barrier
// CHECK:          scf.for
// CHECK:            arith.mulf
// CHECK:          ttile.barrier
// CHECK:          scf.for
// CHECK:            arith.mulf
// CHECK:            arith.subf
// CHECK:          ttile.barrier
// CHECK:        ttile.return
// CHECK:      ttile.kernel @f_cholesky_1(%{{.*}}: memref<40x40xf64>, %{{.*}}: memref<40x40xf64>) group_size = 256 {
// CHECK:      func.func @f(%a: memref<2x5x5xf32>, %b: memref<40x40xf64>)
// CHECK:        ttile.launch @f_cholesky_0(%{{.*}}, %a) grid = [2, 1, 1]
// CHECK:        ttile.launch @f_cholesky_1(%{{.*}}, %b) grid = [1, 1, 1]
