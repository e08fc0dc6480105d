// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true implicit_conv=true}' | filecheck %s

// The input gradient of a 1x1 convolution (256 -> 64 channels): dx[n] (256 x HW) =
// w^T (256 x 64) @ dy[n] (64 x HW), one batched GEMM on views of the buffers. Its A is
// the forward weight [64, 256] as stored, read M-major (wgmma trans_a = 1): no transpose
// kernel.

func.func @dgrad(%dy: tensor<2x64x8x8xbf16>, %w: tensor<64x256x1x1xbf16>) -> tensor<2x256x8x8xbf16> {
  %wt = tgraph.transpose %w permutation = [1, 0, 2, 3] : (tensor<64x256x1x1xbf16>) -> tensor<256x64x1x1xbf16>
  %dx = tgraph.conv2d %dy, %wt stride = [1, 1] padding = [0, 0] : tensor<2x64x8x8xbf16>, tensor<256x64x1x1xbf16> -> tensor<2x256x8x8xbf16>
  func.return %dx : tensor<2x256x8x8xbf16>
}

// CHECK:      ttarget.func @dgrad_matmul_0(
// CHECK:        ttarget.wgmma "m64n{{[0-9]+}}k16.f32.bf16.bf16" {{.*}} trans_a = 1 trans_b = 1
// CHECK-LABEL:  func.func @dgrad(
// CHECK-SAME:     %[[DY:[^:]*]]: memref<2x64x8x8xbf16>, %[[W:[^:]*]]: memref<64x256x1x1xbf16>
// CHECK-NEXT:   %[[DX:.*]] = memref.alloc() : memref<2x256x8x8xbf16>
// CHECK-NEXT:   %[[C:.*]] = memref.collapse_shape %[[DX]] {{.*}} into memref<512x64xbf16>
// CHECK-NEXT:   %[[A:.*]] = memref.collapse_shape %[[W]] {{.*}} into memref<64x256xbf16>
// CHECK-NEXT:   %[[B:.*]] = memref.collapse_shape %[[DY]] {{.*}} into memref<128x64xbf16>
// CHECK-NEXT:   ttarget.launch_ex @dgrad_matmul_0(%[[C]], %[[A]], %[[B]])
// CHECK-NEXT:   func.return %[[DX]]
