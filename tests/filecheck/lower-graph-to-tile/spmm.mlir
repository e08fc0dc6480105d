// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// spmm: one tile per (sparse row, block of output columns), 64 lanes for N = 45; each
// lane walks the row's nonzeros in CSR order with the row extent clamped to [0, nnz]
// and column indices outside [0, K) masked; f32 accumulation for bf16.

func.func @f(%p: tensor<14xi32>, %i: tensor<40xi32>, %v: tensor<40xbf16>, %d: tensor<17x45xbf16>) -> tensor<13x45xbf16> {
  %0 = tgraph.spmm %p, %i, %v, %d sparse_shape = [13, 17] : (tensor<14xi32>, tensor<40xi32>, tensor<40xbf16>, tensor<17x45xbf16>) -> tensor<13x45xbf16>
  func.return %0 : tensor<13x45xbf16>
}
// CHECK:      ttile.kernel @f_spmm_0(%{{.*}}: memref<13x45xbf16>, %{{.*}}: memref<14xi32>, %{{.*}}: memref<40xi32>, %{{.*}}: memref<40xbf16>, %{{.*}}: memref<17x45xbf16>) group_size = 64 {
// CHECK:        %[[ROW:[0-9]+]] = ttile.tile_id y
// CHECK:        %[[OK:[0-9]+]] = arith.cmpi slt, %[[COL:[0-9]+]], %{{.*}} : index
// CHECK:        ttile.load %{{.*}}[%[[ROW]]] : memref<14xi32> -> i32
// CHECK:        arith.minsi
// CHECK:        ttile.load %{{.*}}[%{{.*}}] : memref<14xi32> -> i32
// CHECK:        arith.maxsi
// CHECK:        scf.for %[[P:[0-9]+]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:[0-9]+]] = %{{.*}}) -> (f32) {
// CHECK:          ttile.load %{{.*}}[%[[P]]] : memref<40xi32> -> i32
// CHECK:          %[[K:[0-9]+]] = arith.select %[[IN:[0-9]+]]
// CHECK:          ttile.load %{{.*}}[%[[P]]] : memref<40xbf16> -> bf16
// CHECK:          ttile.load %{{.*}}[%[[K]], %[[COL]]] mask %[[IN]] : memref<17x45xbf16> -> bf16
// CHECK:          %[[M:[0-9]+]] = arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK:          %[[S:[0-9]+]] = arith.addf %[[ACC]], %[[M]] : f32
// CHECK:          scf.yield %[[S]] : f32
// CHECK:        arith.truncf %{{.*}} : f32 to bf16
// CHECK:        ttile.store %{{.*}}, %{{.*}}[%[[ROW]], %[[COL]]] mask %[[OK]] : bf16, memref<13x45xbf16>
// CHECK:        ttile.launch @f_spmm_0(%{{.*}}, %p, %i, %v, %d) grid = [1, 13, 1]
