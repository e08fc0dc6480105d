// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// fft / fft2d: one tile per transform. A complex tensor is stored as interleaved
// (real, imaginary) pairs: tensor<3x8xcomplex<f32>> is memref<3x8x2xf32>. Twiddles are a
// constant global computed in float64 (conjugated for inverse). Length 8 (a power of
// two): three radix-2 Stockham stages between two shared buffers, a barrier before
// each. Length 6: the direct DFT, one scf.for over the inputs per output. fft2d is a
// pass along the last axis into a temporary, then one along the axis before it.

func.func @f(%x: tensor<3x8xf32>, %y: tensor<2x6xf64>, %z: tensor<4x6xf32>) -> (tensor<3x8xcomplex<f32>>, tensor<2x6xcomplex<f64>>, tensor<4x6xcomplex<f32>>) {
  %0 = tgraph.fft %x : (tensor<3x8xf32>) -> tensor<3x8xcomplex<f32>>
  %1 = tgraph.fft %y inverse : (tensor<2x6xf64>) -> tensor<2x6xcomplex<f64>>
  %2 = tgraph.fft2d %z : (tensor<4x6xf32>) -> tensor<4x6xcomplex<f32>>
  func.return %0, %1, %2 : tensor<3x8xcomplex<f32>>, tensor<2x6xcomplex<f64>>, tensor<4x6xcomplex<f32>>
}
// CHECK:      "memref.global"() <{sym_name = "f_cst_0", type = memref<8x2xf32>, initial_value = dense<[[1.000000e+00, -0.000000e+00], [0.707106769, -0.707106769]
// CHECK-SAME:   constant
// CHECK:      ttile.kernel @f_fft_0(%{{.*}}: memref<3x8x2xf32>, %{{.*}}: memref<3x8xf32>, %{{.*}}: memref<8x2xf32>) group_size = 32 {
// CHECK:        ttile.tile_id x
// CHECK:        ttile.alloc_shared : memref<8x2xf32, #tessera.smem>
// CHECK:        ttile.alloc_shared : memref<8x2xf32, #tessera.smem>
// CHECK-COUNT-3: ttile.barrier
// CHECK:        ttile.barrier
// CHECK-NOT:    ttile.barrier
// CHECK:        ttile.return
// CHECK:      "memref.global"() <{sym_name = "f_cst_1", type = memref<6x2xf64>, initial_value = dense<[[1.000000e+00, 0.000000e+00], [0.50000000000000011, 0.8660254037844386]
// CHECK:      ttile.kernel @f_fft_1(%{{.*}}: memref<2x6x2xf64>, %{{.*}}: memref<2x6xf64>, %{{.*}}: memref<6x2xf64>) group_size = 32 {
// CHECK:        ttile.barrier
// CHECK:        scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (f64, f64, index) {
// CHECK:        ttile.barrier
// CHECK:        arith.mulf %{{.*}}, %{{.*}} : f64
// CHECK:        ttile.return
// CHECK:      ttile.kernel @f_fft2d_0(%{{.*}}: memref<4x6x2xf32>, %{{.*}}: memref<4x6xf32>, %{{.*}}: memref<6x2xf32>) group_size = 32 {
// CHECK:      ttile.kernel @f_fft2d_1(%{{.*}}: memref<4x6x2xf32>, %{{.*}}: memref<4x6x2xf32>, %{{.*}}: memref<4x2xf32>) group_size = 32 {
// CHECK:      func.func @f(%x: memref<3x8xf32>, %y: memref<2x6xf64>, %z: memref<4x6xf32>) -> (memref<3x8x2xf32>, memref<2x6x2xf64>, memref<4x6x2xf32>) {
// CHECK:        %[[F:.*]] = memref.alloc() : memref<3x8x2xf32>
// CHECK-NEXT:   %[[T0:.*]] = memref.get_global @f_cst_0 : memref<8x2xf32>
// CHECK-NEXT:   ttile.launch @f_fft_0(%[[F]], %x, %[[T0]]) grid = [3, 1, 1]
// CHECK:        ttile.launch @f_fft_1(%{{.*}}, %y, %{{.*}}) grid = [2, 1, 1]
// CHECK:        %[[O:.*]] = memref.alloc() : memref<4x6x2xf32>
// CHECK-NEXT:   %[[TMP:.*]] = memref.alloc() : memref<4x6x2xf32>
// CHECK:        ttile.launch @f_fft2d_0(%[[TMP]], %z, %{{.*}}) grid = [4, 1, 1]
// CHECK:        ttile.launch @f_fft2d_1(%[[O]], %[[TMP]], %{{.*}}) grid = [6, 1, 1]
// CHECK:        func.return %[[F]], %{{.*}}, %[[O]] : memref<3x8x2xf32>, memref<2x6x2xf64>, memref<4x6x2xf32>
