// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true implicit_conv=true}' | filecheck %s --check-prefix=SM90

// Grouped conv2d (groups = 2, 8 input channels per group: 72 taps per output, more than
// the plane kernel unrolls): the direct kernel, its channel loop over the 8 channels of
// output channel o's group, from (o / 3) * 8.
func.func @grouped(%x: tensor<2x16x7x9xf32>, %w: tensor<6x8x3x3xf32>) -> tensor<2x6x7x9xf32> {
  %0 = tgraph.conv2d %x, %w stride = [1, 1] padding = [1, 1] groups = 2 : tensor<2x16x7x9xf32>, tensor<6x8x3x3xf32> -> tensor<2x6x7x9xf32>
  func.return %0 : tensor<2x6x7x9xf32>
}
// CHECK:      ttile.kernel @grouped_conv2d_0(
// CHECK:        %[[GROUP:[0-9]+]] = arith.divui %{{.*}}, %{{.*}} : index
// CHECK:        %[[C0:[0-9]+]] = arith.muli %[[GROUP]], %{{.*}} : index
// CHECK:        scf.for %[[C:[0-9]+]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT:     %[[CI:[0-9]+]] = arith.addi %[[C0]], %[[C]] : index
// CHECK:            ttile.load %{{.*}}[%{{.*}}, %[[CI]], %{{.*}}, %{{.*}}] mask %{{.*}} : memref<2x16x7x9xf32> -> f32
// CHECK:            ttile.load %{{.*}}[%{{.*}}, %[[C]], %{{.*}}, %{{.*}}] mask %{{.*}} : memref<6x8x3x3xf32> -> f32
// CHECK:      ttile.launch @grouped_conv2d_0(%{{.*}}, %x, %w) grid = [3, 1, 1]

// Two input channels per group of 3x2 taps (12 per output): the plane kernel stages both
// channels of the group (2 x 10 x 11 staged elements) and unrolls 12 multiply-adds.
func.func @grouped_plane(%x: tensor<1x4x8x9xf32>, %w: tensor<4x2x3x2xf32>) -> tensor<1x4x8x10xf32> {
  %0 = tgraph.conv2d %x, %w stride = [1, 1] padding = [1, 1] groups = 2 : tensor<1x4x8x9xf32>, tensor<4x2x3x2xf32> -> tensor<1x4x8x10xf32>
  func.return %0 : tensor<1x4x8x10xf32>
}
// CHECK:      ttile.kernel @grouped_plane_conv2d_plane_0(
// CHECK:        ttile.alloc_shared alignment = 16 : memref<220xf32, #tessera.smem>
// CHECK-COUNT-12: ttile.load %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] : memref<4x2x3x2xf32> -> f32
// CHECK:        ttile.barrier
// CHECK-COUNT-12: math.fma
// CHECK-NOT:    math.fma
// CHECK:        ttile.return

// Depthwise with a channel multiplier of 2 (one input channel per output channel): the
// plane kernel, one tile per (n, o) plane of 7 output rows, on flat views of the input
// and the result; its lanes stage the 15 x 19 input rows (stride 2, zero padding
// included: masked loads) in shared memory as f32, load the 9 taps and the bias once,
// then after a barrier each output is 9 fused multiply-adds of shared loads.
func.func @depthwise(%x: tensor<2x4x13x17xbf16>, %w: tensor<8x1x3x3xbf16>, %b: tensor<8xbf16>) -> tensor<2x8x7x9xbf16> {
  %0 = tgraph.conv2d %x, %w bias %b : tensor<8xbf16> stride = [2, 2] padding = [1, 1] groups = 4 : tensor<2x4x13x17xbf16>, tensor<8x1x3x3xbf16> -> tensor<2x8x7x9xbf16>
  func.return %0 : tensor<2x8x7x9xbf16>
}
// CHECK:      ttile.kernel @depthwise_conv2d_plane_0(%{{.*}}: memref<1008xbf16>, %{{.*}}: memref<1768xbf16>, %{{.*}}: memref<8x1x3x3xbf16>, %{{.*}}: memref<8xbf16>) group_size = 256 {
// CHECK:        ttile.tile_id x
// CHECK:        %[[SMEM:[0-9]+]] = ttile.alloc_shared alignment = 16 : memref<285xf32, #tessera.smem>
// CHECK:        ttile.load %{{.*}}[%{{.*}}] mask %{{.*}} : memref<1768xbf16> -> bf16
// CHECK:        ttile.load %{{.*}}[%{{.*}}] mask %{{.*}} : memref<1768xbf16> -> bf16
// CHECK-COUNT-9: ttile.load %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] : memref<8x1x3x3xbf16> -> bf16
// CHECK:        ttile.load %{{.*}}[%{{.*}}] : memref<8xbf16> -> bf16
// CHECK:        ttile.store %{{.*}}, %[[SMEM]][%{{.*}}] mask %{{.*}} : f32, memref<285xf32, #tessera.smem>
// CHECK:        ttile.store %{{.*}}, %[[SMEM]][%{{.*}}] mask %{{.*}} : f32, memref<285xf32, #tessera.smem>
// CHECK-NEXT:   ttile.barrier
// CHECK-COUNT-9: math.fma
// CHECK-NOT:    math.fma
// CHECK:        ttile.store %{{.*}}, %{{.*}}[%{{.*}}] mask %{{.*}} : bf16, memref<1008xbf16>
// CHECK-NEXT:   ttile.return
// CHECK:      %[[Y:[0-9]+]] = memref.collapse_shape %{{.*}} : memref<2x8x7x9xbf16> into memref<1008xbf16>
// CHECK-NEXT: %[[X:[0-9]+]] = memref.collapse_shape %x {{.*}} into memref<1768xbf16>
// CHECK-NEXT: ttile.launch @depthwise_conv2d_plane_0(%[[Y]], %[[X]], %w, %b) grid = [16, 1, 1]

// A depthwise weight gradient's shape (the input with 9x10 gradient kernels, 4x4
// outputs per plane): the window kernel, one tile per plane; its 12 x 13 padded input
// plane is staged in shared memory, each lane folds its share of the 90 taps into 16
// partial sums (one scf.for, taps at constant shared offsets), ttile.reduce adds the
// partials over the tile and lane 0 stores the plane.
func.func @wgrad(%x: tensor<1x6x10x11xf32>, %w: tensor<6x1x9x10xf32>) -> tensor<1x6x4x4xf32> {
  %0 = tgraph.conv2d %x, %w stride = [1, 1] padding = [1, 1] groups = 6 : tensor<1x6x10x11xf32>, tensor<6x1x9x10xf32> -> tensor<1x6x4x4xf32>
  func.return %0 : tensor<1x6x4x4xf32>
}
// CHECK:      ttile.kernel @wgrad_conv2d_window_0(%{{.*}}: memref<96xf32>, %{{.*}}: memref<660xf32>, %{{.*}}: memref<540xf32>) group_size = 256 {
// CHECK:        %[[S:[0-9]+]] = ttile.alloc_shared alignment = 16 : memref<156xf32, #tessera.smem>
// CHECK:        ttile.store %{{.*}}, %[[S]][%{{.*}}] mask %{{.*}} : f32, memref<156xf32, #tessera.smem>
// CHECK-NEXT:   ttile.barrier
// CHECK-NEXT:   arith.constant 0.0
// CHECK:        scf.for
// CHECK:          ttile.load %{{.*}}[%{{.*}}] mask %{{.*}} : memref<540xf32> -> f32
// CHECK-COUNT-16: math.fma
// CHECK:        scf.yield
// CHECK-COUNT-16: ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK-COUNT-16: ttile.store %{{.*}}, %{{.*}}[%{{.*}}] mask %{{.*}} : f32, memref<96xf32>
// CHECK:      ttile.launch @wgrad_conv2d_window_0(%{{.*}}, %{{.*}}, %{{.*}}) grid = [6, 1, 1]

// A 110x110 bf16 plane is too large for shared memory in f32 (48 KiB): it is staged as
// bf16 and widened as each tap is read.
func.func @wgrad_wide(%x: tensor<1x2x110x110xbf16>, %w: tensor<2x1x107x107xbf16>) -> tensor<1x2x4x4xbf16> {
  %0 = tgraph.conv2d %x, %w stride = [1, 1] padding = [0, 0] groups = 2 : tensor<1x2x110x110xbf16>, tensor<2x1x107x107xbf16> -> tensor<1x2x4x4xbf16>
  func.return %0 : tensor<1x2x4x4xbf16>
}
// CHECK:      ttile.kernel @wgrad_wide_conv2d_window_0(
// CHECK:        %[[S:[0-9]+]] = ttile.alloc_shared alignment = 16 : memref<12100xbf16, #tessera.smem>
// CHECK:        scf.for
// CHECK:          %[[V:[0-9]+]] = ttile.load %[[S]][%{{.*}}] mask %{{.*}} : memref<12100xbf16, #tessera.smem> -> bf16
// CHECK-NEXT:     %[[B:[0-9]+]] = arith.bitcast %[[V]] : bf16 to i16
// CHECK-NEXT:     %[[U:[0-9]+]] = arith.extui %[[B]] : i16 to i32
// CHECK:          arith.shli %[[U]], %{{.*}} : i32
// CHECK:          math.fma

// A grouped bf16 convolution with O a multiple of 8 is no GEMM for the sm90 paths: it
// stays on the direct kernels (sm90/conv.py and conv_implicit.py say why).
func.func @grouped_bf16(%x: tensor<2x16x9x9xbf16>, %w: tensor<16x8x3x3xbf16>) -> tensor<2x16x9x9xbf16> {
  %0 = tgraph.conv2d %x, %w stride = [1, 1] padding = [1, 1] groups = 2 : tensor<2x16x9x9xbf16>, tensor<16x8x3x3xbf16> -> tensor<2x16x9x9xbf16>
  func.return %0 : tensor<2x16x9x9xbf16>
}
// SM90-NOT:   ttarget.func
// SM90:       ttile.kernel @grouped_conv2d_0(
// SM90:       ttile.kernel @grouped_plane_conv2d_plane_0(
// SM90:       ttile.kernel @depthwise_conv2d_plane_0(
// SM90:       ttile.kernel @wgrad_conv2d_window_0(
// SM90:       ttile.kernel @wgrad_wide_conv2d_window_0(
// SM90:       ttile.kernel @grouped_bf16_conv2d_0(
// SM90-NOT:   wgmma
