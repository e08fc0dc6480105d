// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// fft / fft2d (tessera/passes/tile_fft.py, fft_plan.py, tile_fft_kernel.py). A complex
// tensor is stored as interleaved (real, imaginary) pairs: tensor<3x8xcomplex<f32>> is
// memref<3x8x2xf32>, which the kernels see flat (memref<24x2xf32>). Twiddles are a
// constant global computed in float64 (conjugated for inverse). A tile holds several
// lines in one shared buffer of two planes (real, imaginary); each Stockham stage is a
// barrier, the butterflies' loads into registers, a barrier, their stores.
// * length 8: one radix-8 stage, two lines per tile (3 lines: 2 tiles);
// * length 6 (inverse, f64): radix 3 then radix 2;
// * fft2d 4x6: rows (length 6) into a temporary, then columns (length 4, adjacent
//   columns in one tile);
// * length 4096 f64 (over one tile's 2048 points): four-step 64 x 64 through a
//   temporary, the first pass multiplying by twiddles from two 64-entry tables;
// * length 17 (prime): Bluestein in one tile: the chirp, then a loop of two forward
//   64-point transforms each followed by a conjugated product (the kernel's transform,
//   then the chirp), from one table of 128 entries.

func.func @f(%x: tensor<3x8xf32>, %y: tensor<2x6xf64>, %z: tensor<4x6xf32>, %u: tensor<2x4096xf64>, %v: tensor<2x17xf32>) -> (tensor<3x8xcomplex<f32>>, tensor<2x6xcomplex<f64>>, tensor<4x6xcomplex<f32>>, tensor<2x4096xcomplex<f64>>, tensor<2x17xcomplex<f32>>) {
  %0 = tgraph.fft %x : (tensor<3x8xf32>) -> tensor<3x8xcomplex<f32>>
  %1 = tgraph.fft %y inverse : (tensor<2x6xf64>) -> tensor<2x6xcomplex<f64>>
  %2 = tgraph.fft2d %z : (tensor<4x6xf32>) -> tensor<4x6xcomplex<f32>>
  %3 = tgraph.fft %u : (tensor<2x4096xf64>) -> tensor<2x4096xcomplex<f64>>
  %4 = tgraph.fft %v : (tensor<2x17xf32>) -> tensor<2x17xcomplex<f32>>
  func.return %0, %1, %2, %3, %4 : tensor<3x8xcomplex<f32>>, tensor<2x6xcomplex<f64>>, tensor<4x6xcomplex<f32>>, tensor<2x4096xcomplex<f64>>, tensor<2x17xcomplex<f32>>
}
// CHECK:      "memref.global"() <{sym_name = "f_cst_0", type = memref<8x2xf32>, initial_value = dense<[[1.000000e+00, 0.000000e+00], [0.707106769, -0.707106769]
// CHECK-SAME:   constant
// CHECK:      ttile.kernel @f_fft_0(%{{.*}}: memref<24x2xf32>, %{{.*}}: memref<24xf32>, %{{.*}}: memref<8x2xf32>) group_size = 32 {
// CHECK:        ttile.tile_id x
// CHECK:        ttile.alloc_shared : memref<2x16xf32, #tessera.smem>
// CHECK-NOT:    ttile.alloc_shared
// CHECK-COUNT-3: ttile.barrier
// CHECK-NOT:    ttile.barrier
// CHECK:        ttile.store_vector
// CHECK:        ttile.return
// CHECK:      "memref.global"() <{sym_name = "f_cst_1", type = memref<6x2xf64>, initial_value = dense<[[1.000000e+00, 0.000000e+00], [0.50000000000000011, 0.8660254037844386]
// CHECK:      ttile.kernel @f_fft_1(%{{.*}}: memref<12x2xf64>, %{{.*}}: memref<12xf64>, %{{.*}}: memref<6x2xf64>) group_size = 32 {
// CHECK-COUNT-5: ttile.barrier
// CHECK-NOT:    ttile.barrier
// CHECK:        ttile.return
// CHECK:      ttile.kernel @f_fft2d_0(%{{.*}}: memref<24x2xf32>, %{{.*}}: memref<24xf32>, %{{.*}}: memref<6x2xf32>) group_size = 32 {
// CHECK:      ttile.kernel @f_fft2d_1(%{{.*}}: memref<24x2xf32>, %{{.*}}: memref<24x2xf32>, %{{.*}}: memref<4x2xf32>) group_size = 32 {
// CHECK:        ttile.load_vector
// CHECK:      ttile.kernel @f_fft_2(%{{.*}}: memref<8192x2xf64>, %{{.*}}: memref<8192xf64>, %{{.*}}: memref<64x2xf64>, %{{.*}}: memref<64x2xf64>, %{{.*}}: memref<64x2xf64>) group_size = 256 {
// CHECK:        ttile.alloc_shared : memref<2x2112xf64, #tessera.smem>
// CHECK:      ttile.kernel @f_fft_3(%{{.*}}: memref<8192x2xf64>, %{{.*}}: memref<8192x2xf64>, %{{.*}}: memref<64x2xf64>) group_size = 256 {
// CHECK:      ttile.kernel @f_fft_4(%{{.*}}: memref<34x2xf32>, %{{.*}}: memref<34xf32>, %{{.*}}: memref<64x2xf32>, %{{.*}}: memref<64x2xf32>, %{{.*}}: memref<128x2xf32>) group_size = 32 {
// CHECK:        ttile.alloc_shared : memref<2x132xf32, #tessera.smem>
// CHECK:        ttile.barrier
// CHECK:        scf.for
// CHECK-COUNT-5:  ttile.barrier
// CHECK:        }
// CHECK-NEXT:   ttile.barrier
// CHECK-NOT:    ttile.barrier
// CHECK:        ttile.return
// CHECK:      func.func @f(%x: memref<3x8xf32>, %y: memref<2x6xf64>, %z: memref<4x6xf32>, %u: memref<2x4096xf64>, %v: memref<2x17xf32>)
// CHECK:        %[[F:.*]] = memref.alloc() : memref<3x8x2xf32>
// CHECK-NEXT:   %[[X:.*]] = memref.collapse_shape %x {{.*}} into memref<24xf32>
// CHECK-NEXT:   %[[FF:.*]] = memref.collapse_shape %[[F]] {{.*}} into memref<24x2xf32>
// CHECK-NEXT:   %[[T0:.*]] = memref.get_global @f_cst_0 : memref<8x2xf32>
// CHECK-NEXT:   ttile.launch @f_fft_0(%[[FF]], %[[X]], %[[T0]]) grid = [2, 1, 1]
// CHECK:        ttile.launch @f_fft_1(%{{.*}}) grid = [1, 1, 1]
// CHECK:        %[[O:.*]] = memref.alloc() : memref<4x6x2xf32>
// CHECK:        %[[OF:.*]] = memref.collapse_shape %[[O]]
// CHECK-NEXT:   %[[TMP:.*]] = memref.alloc() : memref<4x6x2xf32>
// CHECK-NEXT:   %[[TMPF:.*]] = memref.collapse_shape %[[TMP]]
// CHECK:        ttile.launch @f_fft2d_0(%[[TMPF]], %{{.*}}) grid = [1, 1, 1]
// CHECK:        ttile.launch @f_fft2d_1(%[[OF]], %[[TMPF]], %{{.*}}) grid = [2, 1, 1]
// CHECK:        %[[T4:.*]] = memref.alloc() : memref<8192x2xf64>
// CHECK:        ttile.launch @f_fft_2(%[[T4]], %{{.*}}) grid = [4, 1, 1]
// CHECK-NEXT:   ttile.launch @f_fft_3(%{{.*}}, %[[T4]], %{{.*}}) grid = [4, 1, 1]
// CHECK:        ttile.launch @f_fft_4(%{{.*}}) grid = [1, 1, 1]
