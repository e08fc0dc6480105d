// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true implicit_conv=true split_k=auto}' | filecheck %s
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true implicit_conv=true}' | filecheck %s --check-prefix=OFF

// A weight gradient's convolution: the input with its batch as channels, the output
// gradient as a kernel dilated by the forward's stride. Its 192 x 64 output is three
// tiles over a K of 6400, so with split-K the implicit GEMM stores the f32 partials of
// K ranges ([S, 3, 64, 8, 8]) and one kernel adds them in order and rounds once. The
// gather reads tap (i, j) at pixel (ho + 2 i - 3, wo + 2 j - 3).

func.func @wgrad(%x: tensor<3x16x40x40xbf16>, %g: tensor<64x16x20x20xbf16>) -> tensor<3x64x8x8xbf16> {
  %y = tgraph.conv2d %x, %g stride = [1, 1] padding = [3, 3] dilation = [2, 2] : tensor<3x16x40x40xbf16>, tensor<64x16x20x20xbf16> -> tensor<3x64x8x8xbf16>
  func.return %y : tensor<3x64x8x8xbf16>
}

// CHECK:      ttarget.func @wgrad_conv_0(
// CHECK:        ttarget.cp_async "cg.shared.global"
// CHECK:        ttarget.wgmma "m64n64k16.f32.bf16.bf16"
// CHECK:        ttarget.st "global.f32"
// CHECK:      ttile.kernel @wgrad_split_k_reduce_0(%{{.*}}: memref<3x64x8x8xbf16>, %{{.*}}: memref<25x3x64x8x8xf32>)
// CHECK-LABEL:  func.func @wgrad(
// CHECK:        ttarget.launch_ex @wgrad_conv_nhwc_0
// CHECK:        ttarget.launch_ex @wgrad_conv_weight_0
// CHECK:        %[[OUT:.*]] = memref.alloc() : memref<3x64x8x8xbf16>
// CHECK:        %[[WS:.*]] = memref.alloc() : memref<25x3x64x8x8xf32>
// CHECK:        ttarget.launch_ex @wgrad_conv_0(%[[WS]], %{{.*}}, %{{.*}}) grid = [75, 1, 1]
// CHECK:        ttile.launch @wgrad_split_k_reduce_0(%[[OUT]], %[[WS]])
// CHECK-NEXT:   func.return %[[OUT]]

// OFF-LABEL:  func.func @wgrad(
// OFF:        ttarget.launch_ex @wgrad_conv_0(%{{.*}}, %{{.*}}, %{{.*}}) grid = [3, 1, 1]
// OFF-NOT:    split_k_reduce
// OFF:        func.return
