// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true implicit_conv=true}' | filecheck %s
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true implicit_conv=false}' | filecheck %s --check-prefix=OFF

// The input gradient of a 3x3/2 convolution (tessera.autodiff.conv_grad) as ts.grad builds
// it: the phase kernel made from w by zero pads, a reshape into [taps, phases], a reverse
// and a transpose; one stride-1 convolution; the phases interleaved. With the implicit GEMM
// the weight relayout reads the phase kernel from w itself (the row of phase a at window
// row u is rows[a][u] = [[-1, 1], [2, 0]] here, the same for columns) and the convolution
// stores dx: three kernels, none for the pads, reverse, transpose or interleave.

func.func @dgrad(%dy: tensor<2x16x7x7xbf16>, %w: tensor<16x8x3x3xbf16>) -> tensor<2x8x14x14xbf16> {
  %z1 = tgraph.constant dense<0.000000e+00> : tensor<bf16> -> tensor<16x8x1x3xbf16>
  %p1 = tgraph.concat %z1, %w axis = 2 : (tensor<16x8x1x3xbf16>, tensor<16x8x3x3xbf16>) -> tensor<16x8x4x3xbf16>
  %z2 = tgraph.constant dense<0.000000e+00> : tensor<bf16> -> tensor<16x8x4x1xbf16>
  %p2 = tgraph.concat %z2, %p1 axis = 3 : (tensor<16x8x4x1xbf16>, tensor<16x8x4x3xbf16>) -> tensor<16x8x4x4xbf16>
  %w7 = tgraph.reshape %p2 : (tensor<16x8x4x4xbf16>) -> tensor<1x16x8x2x2x2x2xbf16>
  %rv = tgraph.reverse %w7 dims = [3, 5] : (tensor<1x16x8x2x2x2x2xbf16>) -> tensor<1x16x8x2x2x2x2xbf16>
  %tr = tgraph.transpose %rv permutation = [0, 4, 6, 2, 1, 3, 5] : (tensor<1x16x8x2x2x2x2xbf16>) -> tensor<1x2x2x8x16x2x2xbf16>
  %wc = tgraph.reshape %tr : (tensor<1x2x2x8x16x2x2xbf16>) -> tensor<32x16x2x2xbf16>
  %y = tgraph.conv2d %dy, %wc stride = [1, 1] padding = [1, 1] : tensor<2x16x7x7xbf16>, tensor<32x16x2x2xbf16> -> tensor<2x32x8x8xbf16>
  %r = tgraph.reshape %y : (tensor<2x32x8x8xbf16>) -> tensor<2x1x2x2x8x8x8xbf16>
  %t = tgraph.transpose %r permutation = [0, 1, 4, 5, 2, 6, 3] : (tensor<2x1x2x2x8x8x8xbf16>) -> tensor<2x1x8x8x2x8x2xbf16>
  %s = tgraph.slice %t start = [0, 0, 0, 1, 0, 1, 0] limit = [2, 1, 8, 8, 2, 8, 2] stride = [1, 1, 1, 1, 1, 1, 1] : (tensor<2x1x8x8x2x8x2xbf16>) -> tensor<2x1x8x7x2x7x2xbf16>
  %dx = tgraph.reshape %s : (tensor<2x1x8x7x2x7x2xbf16>) -> tensor<2x8x14x14xbf16>
  func.return %dx : tensor<2x8x14x14xbf16>
}

// CHECK:      ttarget.func @dgrad_conv_weight_0(
// a row's table: three taps reach (phase 0 at window row 1, phase 1 at both), each
// guarded by its (phase, row); then the columns' the same
// CHECK:        ttarget.mov "b32" %[[I:[0-9]+]], %{{[0-9]+}}{{$}}
// CHECK-COUNT-3: ttarget.mov "b32" %[[I]], %{{[0-9]+}} if %{{[0-9]+}}
// CHECK:        ttarget.mov "b32" %[[J:[0-9]+]], %{{[0-9]+}}{{$}}
// CHECK-COUNT-3: ttarget.mov "b32" %[[J]], %{{[0-9]+}} if %{{[0-9]+}}
// CHECK-NOT:    ttarget.mov "b32" %[[J]]
// CHECK:        ttarget.ld "global.b16"
// CHECK:        ttarget.st "global.b16"
// CHECK-LABEL:  func.func @dgrad(
// CHECK-SAME:     %[[DY:[^:]*]]: memref<2x16x7x7xbf16>, %[[W:[^:]*]]: memref<16x8x3x3xbf16>
// CHECK-NEXT:   memref.alloc() : memref<2x7x7x16xbf16>
// CHECK-NEXT:   ttarget.launch_ex @dgrad_conv_nhwc_0
// CHECK-NEXT:   %[[WK:.*]] = memref.alloc() : memref<32x64xbf16>
// CHECK-NEXT:   %[[DX:.*]] = memref.alloc() : memref<2x8x14x14xbf16>
// CHECK-NEXT:   ttarget.launch_ex @dgrad_conv_weight_0(%[[WK]], %[[W]])
// CHECK-NEXT:   ttarget.launch_ex @dgrad_conv_0(%[[DX]], %{{.*}}, %[[WK]])
// CHECK-NEXT:   func.return %[[DX]]

// Without the implicit GEMM every op is made (the im2col path).
// OFF-LABEL:  func.func @dgrad(
// OFF:        ttile.launch @dgrad_concat_0
// OFF:        ttile.launch @dgrad_reverse_0
// OFF:        func.return
