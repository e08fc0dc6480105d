// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true implicit_conv=true}' | filecheck %s
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true}' | filecheck %s --check-prefix=IM2COL

// bf16 conv2d with implicit_conv: an NHWC copy (channels 3 -> 8), the weight as a K-major
// [O, kh*8*Cp] operand (the stem gathers 128-byte filter rows of 8 pixels, the 7-tap
// rows padded with a zero tap), and one wgmma kernel whose producer gathers the A tile with
// 16-byte cp.async copies (zero-filled in the padding) and whose consumers store NCHW;
// no im2col buffer. A pointwise convolution is one batched GEMM on views of its buffers.
// Without the option: im2col, weight, GEMM, store.

func.func @stem(%x: tensor<2x3x33x31xbf16>, %w: tensor<16x3x7x7xbf16>) -> tensor<2x16x17x16xbf16> {
  %y = tgraph.conv2d %x, %w stride = [2, 2] padding = [3, 3] : tensor<2x3x33x31xbf16>, tensor<16x3x7x7xbf16> -> tensor<2x16x17x16xbf16>
  func.return %y : tensor<2x16x17x16xbf16>
}

func.func @pointwise(%x: tensor<3x128x4x10xbf16>, %w: tensor<64x128x1x1xbf16>) -> tensor<3x64x4x10xbf16> {
  %y = tgraph.conv2d %x, %w stride = [1, 1] padding = [0, 0] : tensor<3x128x4x10xbf16>, tensor<64x128x1x1xbf16> -> tensor<3x64x4x10xbf16>
  func.return %y : tensor<3x64x4x10xbf16>
}

// CHECK:      ttarget.func @stem_conv_nhwc_0(%{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<u64>) maxntid = 256
// CHECK:        ttarget.st "global.v4.b32"
// CHECK:      ttarget.func @stem_conv_weight_0(
// CHECK:      ttarget.func @stem_conv_0(%{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<tmap>) maxntid = 256
// CHECK:        ttarget.mbarrier_init [%{{.*}}], %{{.*}}
// CHECK:        ttarget.cp_async "cg.shared.global"
// CHECK-SAME:     src_size
// CHECK:        ttarget.cp_async_mbarrier_arrive
// CHECK:        ttarget.wgmma "m64n64k16.f32.bf16.bf16"
// CHECK:        ttarget.st "global.b16"
// CHECK-LABEL:  func.func @stem(
// CHECK:        memref.alloc() : memref<2x33x31x8xbf16>
// CHECK:        ttarget.launch_ex @stem_conv_nhwc_0
// CHECK:        memref.alloc() : memref<16x448xbf16>
// CHECK:        ttarget.launch_ex @stem_conv_weight_0
// CHECK:        ttarget.launch_ex @stem_conv_0(
// CHECK-NOT:    ttarget.launch
// CHECK:        func.return

// CHECK:      ttarget.func @pointwise_matmul_0(
// CHECK-LABEL:  func.func @pointwise(
// CHECK:        memref.collapse_shape
// CHECK:        ttarget.launch_ex @pointwise_matmul_0(
// CHECK-NOT:    ttarget.launch
// CHECK:        func.return

// IM2COL:       ttile.kernel @stem_conv2d_im2col_0
// IM2COL:       ttile.kernel @stem_conv2d_weight_0
// IM2COL:       ttarget.func @stem_matmul_0
// IM2COL:       ttile.kernel @stem_conv2d_store_0
