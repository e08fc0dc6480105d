// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// The derivative support ops. Complex tensors are interleaved memref<S x 2 x fT>:
// tgraph.complex writes parts 0 and 1, tgraph.real / tgraph.imag read part 0 / 1, complex
// add (tile_complex) works on the pairs, one lane per element. triangular_solve: one lane per column of B,
// forward substitution for a lower op(A), backward (i = n-1-s) for an upper one, the sum
// over j in order. spmm_transpose (tessera/passes/tile_sparse.py): the entries sorted by
// column (a stable merge sort, in shared memory for 5 entries), column pointers,
// rows and values gathered, then the spmm kernel on Aᵀ. sddmm: a group of 4 lanes (2-wide
// vectors) per 8 consecutive entries, the row by a uniform binary search over indptr
// (again only past the row's end), the partial dot
// products summed by a butterfly (shuffle_xor 2, 1).

func.func @f(%a: tensor<3x5xf32>, %b: tensor<3x5xf32>) -> (tensor<3x5xcomplex<f32>>, tensor<3x5xf32>, tensor<3x5xf32>) {
  %0 = tgraph.complex %a, %b : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xcomplex<f32>>
  %1 = tgraph.add %0, %0 : (tensor<3x5xcomplex<f32>>, tensor<3x5xcomplex<f32>>) -> tensor<3x5xcomplex<f32>>
  %2 = tgraph.real %1 : (tensor<3x5xcomplex<f32>>) -> tensor<3x5xf32>
  %3 = tgraph.imag %0 : (tensor<3x5xcomplex<f32>>) -> tensor<3x5xf32>
  func.return %0, %2, %3 : tensor<3x5xcomplex<f32>>, tensor<3x5xf32>, tensor<3x5xf32>
}
func.func @g(%a: tensor<2x4x4xf64>, %b: tensor<2x4x3xf64>) -> (tensor<2x4x3xf64>, tensor<2x4x3xf64>) {
  %0 = tgraph.triangular_solve %a, %b : (tensor<2x4x4xf64>, tensor<2x4x3xf64>) -> tensor<2x4x3xf64>
  %1 = tgraph.triangular_solve %a, %b upper : (tensor<2x4x4xf64>, tensor<2x4x3xf64>) -> tensor<2x4x3xf64>
  func.return %0, %1 : tensor<2x4x3xf64>, tensor<2x4x3xf64>
}
func.func @h(%ip: tensor<4xi32>, %ix: tensor<5xi32>, %v: tensor<5xf32>, %d: tensor<3x6xf32>, %r: tensor<7x6xf32>) -> (tensor<7x6xf32>, tensor<5xf32>) {
  %0 = tgraph.spmm_transpose %ip, %ix, %v, %d sparse_shape = [3, 7] : (tensor<4xi32>, tensor<5xi32>, tensor<5xf32>, tensor<3x6xf32>) -> tensor<7x6xf32>
  %1 = tgraph.sddmm %ip, %ix, %d, %r sparse_shape = [3, 7] : (tensor<4xi32>, tensor<5xi32>, tensor<3x6xf32>, tensor<7x6xf32>) -> tensor<5xf32>
  func.return %0, %1 : tensor<7x6xf32>, tensor<5xf32>
}
// CHECK:      ttile.kernel @f_complex_0(%[[Z:.*]]: memref<3x5x2xf32>, %[[RE:.*]]: memref<3x5xf32>, %[[IM:.*]]: memref<3x5xf32>) group_size = 32 {
// CHECK:        %[[OK:.*]] = arith.cmpi slt, %{{.*}}, %{{.*}} : index
// CHECK:        %[[R:.*]] = ttile.load %[[RE]][%[[I:.*]], %[[J:.*]]] mask %[[OK]]
// CHECK:        %[[C0:.*]] = arith.constant 0 : index
// CHECK:        ttile.store %[[R]], %[[Z]][%[[I]], %[[J]], %[[C0]]] mask %[[OK]]
// CHECK:        %[[M:.*]] = ttile.load %[[IM]][%[[I]], %[[J]]] mask %[[OK]]
// CHECK:        %[[C1:.*]] = arith.constant 1 : index
// CHECK:        ttile.store %[[M]], %[[Z]][%[[I]], %[[J]], %[[C1]]] mask %[[OK]]
// CHECK:      ttile.kernel @f_cadd_0(%{{.*}}: memref<3x5x2xf32>, %{{.*}}: memref<3x5x2xf32>, %{{.*}}: memref<3x5x2xf32>) group_size = 32 {
// CHECK:        arith.constant 15 : index
// CHECK:        arith.addf %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:   arith.addf %{{.*}}, %{{.*}} : f32
// CHECK:      ttile.kernel @f_real_0(%{{.*}}: memref<3x5xf32>, %[[ZR:.*]]: memref<3x5x2xf32>) group_size = 32 {
// CHECK:        %[[P0:.*]] = arith.constant 0 : index
// CHECK:        ttile.load %[[ZR]][%{{.*}}, %{{.*}}, %[[P0]]]
// CHECK:      ttile.kernel @f_imag_0(%{{.*}}: memref<3x5xf32>, %[[ZI:.*]]: memref<3x5x2xf32>) group_size = 32 {
// CHECK:        %[[P1:.*]] = arith.constant 1 : index
// CHECK:        ttile.load %[[ZI]][%{{.*}}, %{{.*}}, %[[P1]]]
// CHECK:      func.func @f(%a: memref<3x5xf32>, %b: memref<3x5xf32>) -> (memref<3x5x2xf32>, memref<3x5xf32>, memref<3x5xf32>)
// CHECK:        ttile.launch @f_complex_0(%{{.*}}, %a, %b) grid = [1, 1, 1]

// CHECK:      ttile.kernel @g_triangular_solve_0(%[[X:.*]]: memref<2x4x3xf64>, %[[A:.*]]: memref<2x4x4xf64>, %[[B:.*]]: memref<2x4x3xf64>) group_size = 32 {
// CHECK:        arith.constant 6 : index
// CHECK:        scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step
// CHECK:          %[[RHS:.*]] = ttile.load %[[B]][%{{.*}}, %[[ROW]], %{{.*}}]
// CHECK:          scf.for %[[COL:.*]] = %{{.*}} to %[[ROW]] step %{{.*}} iter_args(%{{.*}} = %[[RHS]]) -> (f64) {
// CHECK:            ttile.load %[[X]][%{{.*}}, %[[COL]], %{{.*}}]
// CHECK:            ttile.load %[[A]][%{{.*}}, %[[ROW]], %[[COL]]]
// CHECK:            arith.mulf
// CHECK:            arith.subf
// CHECK:          ttile.load %[[A]][%{{.*}}, %[[ROW]], %[[ROW]]]
// CHECK:          arith.divf
// CHECK:          ttile.store %{{.*}}, %[[X]][%{{.*}}, %[[ROW]], %{{.*}}]
// CHECK:      ttile.kernel @g_triangular_solve_1(
// CHECK:        scf.for %[[S:.*]] = %{{.*}} to %{{.*}} step
// CHECK:          %[[I1:.*]] = arith.subi %{{.*}}, %[[S]] : index
// CHECK:          %[[LO:.*]] = arith.addi %[[I1]], %{{.*}} : index
// CHECK:          scf.for %{{.*}} = %[[LO]] to %{{.*}} step
// CHECK:      func.func @g(
// CHECK:        ttile.launch @g_triangular_solve_0(%{{.*}}, %a, %b) grid = [1, 1, 1]

// CHECK:      ttile.kernel @h_sparse_sort_local_0(%[[KEYS:.*]]: memref<5xi32>, %[[PERM:.*]]: memref<5xi32>, %{{.*}}: memref<5xi32>) group_size = 256 {
// CHECK:        %[[SK:.*]] = ttile.alloc_shared : memref<256xi32, #tessera.smem>
// CHECK:        arith.maxsi
// CHECK:        arith.minsi
// CHECK:        ttile.store %{{.*}}, %[[SK]]
// CHECK:        ttile.barrier
// CHECK:        scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (index, index) {
// CHECK:          ttile.load %[[SK]]
// CHECK:        ttile.barrier
// CHECK:        ttile.store %{{.*}}, %[[KEYS]]
// CHECK:        ttile.store %{{.*}}, %[[PERM]]
// CHECK:      ttile.kernel @h_sparse_colptr_0(%{{.*}}: memref<8xi32>, %{{.*}}: memref<5xi32>) group_size = 128 {
// CHECK:      ttile.kernel @h_sparse_gather_0(
// CHECK:      ttile.kernel @h_spmm_transpose_0(%{{.*}}: memref<7x6xf32>, %{{.*}}: memref<8xi32>, %{{.*}}: memref<5xi32>, %{{.*}}: memref<5xf32>, %{{.*}}: memref<3x6xf32>) group_size = 128 {
// CHECK:        ttile.load_vector {{.*}} : memref<3x6xf32> -> vector<2xf32>
// CHECK-NOT:    ttile.atomic
// CHECK:      ttile.kernel @h_sddmm_0(%[[OUT:.*]]: memref<5xf32>, %[[IP2:.*]]: memref<4xi32>, %{{.*}}: memref<5xi32>, %{{.*}}: memref<3x6xf32>, %{{.*}}: memref<7x6xf32>) group_size = 128 {
// CHECK:        scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (index, index) {
// CHECK:          ttile.load %[[IP2]]
// CHECK:          arith.cmpi sle
// CHECK:          arith.select
// CHECK:        scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// CHECK:          ttile.load_vector {{.*}} : memref<3x6xf32> -> vector<2xf32>
// CHECK:          ttile.load_vector {{.*}} : memref<7x6xf32> -> vector<2xf32>
// CHECK:          arith.mulf
// CHECK:          arith.addf
// CHECK:        ttile.shuffle_xor %{{.*}}, 2 : f32
// CHECK:        ttile.shuffle_xor %{{.*}}, 1 : f32
// CHECK:        ttile.store %{{.*}}, %[[OUT]][%{{.*}}] mask
// CHECK:      func.func @h(
// CHECK:        ttile.launch @h_sparse_sort_local_0(%{{.*}}, %{{.*}}, %ix) grid = [1, 1, 1]
// CHECK-NOT:    ttile.launch @h_sparse_merge
// CHECK:        ttile.launch @h_sparse_colptr_0(
// CHECK:        ttile.launch @h_sparse_gather_0(%{{.*}}, %{{.*}}, %{{.*}}, %ip, %v) grid = [1, 1, 1]
// CHECK:        ttile.launch @h_spmm_transpose_0(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %d) grid = [1, 1, 1]
// CHECK:        ttile.launch @h_sddmm_0(%{{.*}}, %ip, %ix, %d, %r) grid = [1, 1, 1]
