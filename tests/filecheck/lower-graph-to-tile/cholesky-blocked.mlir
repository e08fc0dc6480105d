// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// cholesky with n > 64: blocked right-looking, block columns of 32 in panels of 256.
// A copy of the lower triangle, then per block column (the block index a host
// constant) one factor launch of 32 + 128 lanes, one row each (staged in shared memory,
// rows padded by one): every tile factors the diagonal block itself, left-looking, one
// barrier per column but the first (every lane takes the pivot itself from the block's
// row, the block's rows in rows of 36 read as vectors), and takes its 128 rows below in
// the same steps; a barrier before the staged block is overwritten; tile 0 writes the
// block to a scratch buffer.
// Inside a panel an inner update (K = 32) follows each block column but the last; after
// each panel but the last, one trailing update over the panel's 256 columns (8 chunks of
// 32). Both updates are one GEMM kernel of 64x64 output blocks (tiles above the block
// diagonal skip the work). In f32 (n % 4 == 0 here) it runs on the tensor cores: 128
// lanes, the two panels staged by 16-byte copy_async into double-buffered rows of 48,
// the next chunk in flight while 3xTF32 m16n8k8 products (three per product, 8
// accumulators of vector<4xf32> per lane) run on this one. The diagonal blocks are
// scattered into L last.

func.func @f(%a: tensor<2x100x100xf32>) -> tensor<2x100x100xf32> {
  %0 = tgraph.cholesky %a : (tensor<2x100x100xf32>) -> tensor<2x100x100xf32>
  func.return %0 : tensor<2x100x100xf32>
}
// CHECK:      ttile.kernel @f_cholesky_copy_0(%{{.*}}: memref<2x100x100xf32>, %{{.*}}: memref<2x100x100xf32>) group_size = 256 {
// CHECK:      ttile.kernel @f_cholesky_factor_0(%{{.*}}: memref<2x100x100xf32>, %{{.*}}: memref<2x4x32x32xf32>, %{{.*}}: index, %{{.*}}: index) group_size = 160 {
// CHECK:        ttile.alloc_shared : memref<160x33xf32, #tessera.smem>
// CHECK:        ttile.alloc_shared : memref<32x36xf32, #tessera.smem>
// CHECK-NOT:    ttile.alloc_shared
// CHECK:        ttile.barrier
// CHECK-NOT:    ttile.barrier
// CHECK:        math.sqrt
// CHECK:        arith.divf
// CHECK-NOT:    scf.if
// CHECK:        ttile.barrier
// CHECK:        ttile.load_vector {{.*}} -> vector<4xf32>
// CHECK:        math.fma
// CHECK:        math.sqrt
// CHECK:        arith.divf
// CHECK:        ttile.barrier
// CHECK:        ttile.store {{.*}} memref<2x4x32x32xf32>
// CHECK:      ttile.kernel @f_cholesky_update_0(%{{.*}}: memref<2x100x100xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index) group_size = 128 {
// CHECK:        scf.if
// CHECK:          ttile.alloc_shared alignment = 16 : memref<2x64x48xf32, #tessera.smem>
// CHECK-NEXT:     ttile.alloc_shared alignment = 16 : memref<2x64x48xf32, #tessera.smem>
// CHECK:          ttile.copy_async {{.*}} elems = 4 valid {{.*}} : memref<2x64x48xf32, #tessera.smem>, memref<2x100x100xf32>
// CHECK:          ttile.commit_group
// CHECK:          scf.for {{.*}} -> (vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>) {
// CHECK:            ttile.copy_async
// CHECK:            ttile.commit_group
// CHECK-NEXT:       ttile.wait_group 1
// CHECK:            ttile.barrier
// CHECK-COUNT-48:   ttile.mma {{.*}} accum = f32 : vector<4xf32>, vector<2xf32>, vector<4xf32> -> vector<4xf32>
// CHECK:            ttile.barrier
// CHECK:          ttile.wait_group 0
// CHECK-NOT:      ttile.mma
// CHECK:          ttile.store
// CHECK:      ttile.kernel @f_cholesky_scatter_0(%{{.*}}: memref<2x100x100xf32>, %{{.*}}: memref<2x4x32x32xf32>) group_size = 256 {
// CHECK:      func.func @f(
// CHECK:        memref.alloc() : memref<2x4x32x32xf32>
// CHECK:        ttile.launch @f_cholesky_copy_0({{.*}}) grid = [10, 1, 1]
// CHECK:        ttile.launch @f_cholesky_factor_0({{.*}}) grid = [2, 1, 1]
// CHECK:        ttile.launch @f_cholesky_update_0({{.*}}) grid = [8, 1, 1]
// CHECK:        ttile.launch @f_cholesky_factor_0(
// CHECK:        ttile.launch @f_cholesky_update_0({{.*}}) grid = [2, 1, 1]
// CHECK:        ttile.launch @f_cholesky_factor_0(
// CHECK:        ttile.launch @f_cholesky_update_0({{.*}}) grid = [2, 1, 1]
// CHECK:        ttile.launch @f_cholesky_factor_0(
// CHECK-NEXT:   ttile.launch @f_cholesky_scatter_0({{.*}}) grid = [8, 1, 1]
// CHECK-NEXT:   func.return

// Two panels: inner updates end at column 256; the trailing update over columns 256..299
// reads the first panel's 256 columns (8 chunks) from column 0.
func.func @g(%a: tensor<300x300xf64>) -> tensor<300x300xf64> {
  %0 = tgraph.cholesky %a : (tensor<300x300xf64>) -> tensor<300x300xf64>
  func.return %0 : tensor<300x300xf64>
}
// CHECK:      ttile.kernel @g_cholesky_update_0(
// CHECK:        ttile.alloc_shared : memref<32x66xf64, #tessera.smem>
// CHECK:              ttile.load_vector {{.*}} -> vector<2xf64>
// CHECK:      func.func @g(
// CHECK:        %[[CH:.*]] = arith.constant 8 : index
// CHECK-NEXT:   %[[PE:.*]] = arith.constant 256 : index
// CHECK-NEXT:   %[[N:.*]] = arith.constant 300 : index
// CHECK-NEXT:   %[[T:.*]] = arith.constant 1 : index
// CHECK-NEXT:   %{{.*}} = arith.constant 1 : index
// CHECK-NEXT:   ttile.launch @g_cholesky_update_0(%{{.*}}, %{{.*}}, %[[CH]], %[[PE]], %[[N]], %[[T]], %{{.*}}) grid = [1, 1, 1]
// CHECK-NEXT:   %{{.*}} = arith.constant 8 : index
// CHECK:        ttile.launch @g_cholesky_factor_0(
// CHECK:        ttile.launch @g_cholesky_factor_0(
// CHECK-NEXT:   ttile.launch @g_cholesky_scatter_0({{.*}}) grid = [10, 1, 1]
