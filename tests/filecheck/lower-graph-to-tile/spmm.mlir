// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// spmm, N = 64 f32: 16-byte vectors (4 f32), 16 lanes per row (8 rows per 128-lane
// tile), one vector per lane. The row extent is clamped to [0, nnz]; the row's entries
// go eight at a time (4 accumulators a lane: eight (column, value) pairs, then eight
// vector loads of dense rows, then the products added in CSR order), entries past the
// row's end and columns outside [0, K) masked.

func.func @f(%p: tensor<14xi32>, %i: tensor<40xi32>, %v: tensor<40xf32>, %d: tensor<17x64xf32>) -> tensor<13x64xf32> {
  %0 = tgraph.spmm %p, %i, %v, %d sparse_shape = [13, 17] : (tensor<14xi32>, tensor<40xi32>, tensor<40xf32>, tensor<17x64xf32>) -> tensor<13x64xf32>
  func.return %0 : tensor<13x64xf32>
}
// CHECK:      ttile.kernel @f_spmm_0(%[[O:.*]]: memref<13x64xf32>, %[[IP:.*]]: memref<14xi32>, %[[IX:.*]]: memref<40xi32>, %[[V:.*]]: memref<40xf32>, %[[D:.*]]: memref<17x64xf32>) group_size = 128 {
// CHECK:        %[[LID:.*]] = ttile.local_id
// CHECK:        %[[C4:.*]] = arith.constant 4 : index
// CHECK:        arith.shrui %[[LID]], %{{.*}} : index
// CHECK:        %[[ROW:.*]] = arith.addi
// CHECK:        ttile.tile_id y
// CHECK:        %[[OK:.*]] = arith.andi %{{.*}}, %{{.*}} : i1
// CHECK:        ttile.load %[[IP]][%{{.*}}] : memref<14xi32> -> i32
// CHECK:        arith.minsi
// CHECK:        ttile.load %[[IP]][%{{.*}}] : memref<14xi32> -> i32
// CHECK:        scf.for %[[P:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[A0:.*]] = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (f32, f32, f32, f32) {
// CHECK-COUNT-8: ttile.load %[[IX]][%{{.*}}] mask
// CHECK-COUNT-8: ttile.load_vector %[[D]][%{{.*}}, %{{.*}}] mask %{{.*}} : memref<17x64xf32> -> vector<4xf32>
// CHECK-NOT:      ttile.load_vector
// CHECK:          %[[T:.*]] = arith.mulf
// CHECK-NEXT:     arith.addf %[[A0]], %[[T]] : f32
// CHECK:          scf.yield
// CHECK-NOT:    scf.for
// CHECK:        ttile.store_vector %{{.*}}, %[[O]][%[[ROW]], %{{.*}}] mask %[[OK]] : vector<4xf32>, memref<13x64xf32>
// CHECK:        ttile.launch @f_spmm_0(%{{.*}}, %p, %i, %v, %d) grid = [2, 1, 1]

// bf16, N = 45: one element per access (45 is odd), 32 lanes of two columns per row, f32
// accumulation rounded once to bf16.

func.func @g(%p: tensor<14xi32>, %i: tensor<40xi32>, %v: tensor<40xbf16>, %d: tensor<17x45xbf16>) -> tensor<13x45xbf16> {
  %0 = tgraph.spmm %p, %i, %v, %d sparse_shape = [13, 17] : (tensor<14xi32>, tensor<40xi32>, tensor<40xbf16>, tensor<17x45xbf16>) -> tensor<13x45xbf16>
  func.return %0 : tensor<13x45xbf16>
}
// CHECK:      ttile.kernel @g_spmm_0(
// CHECK:        scf.for {{.*}} -> (f32, f32) {
// CHECK:          arith.extf %{{.*}} : bf16 to f32
// CHECK:          ttile.load_vector {{.*}} -> vector<1xbf16>
// CHECK:        arith.truncf %{{.*}} : f32 to bf16
// CHECK:        ttile.store_vector {{.*}} : vector<1xbf16>, memref<13x45xbf16>
// CHECK:        ttile.launch @g_spmm_0(%{{.*}}, %p, %i, %v, %d) grid = [4, 1, 1]
