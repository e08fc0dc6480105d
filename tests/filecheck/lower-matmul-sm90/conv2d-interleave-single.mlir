// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true implicit_conv=true}' | filecheck %s

// The input gradient of a 1x1/2 convolution of a 13x13 input (tessera.autodiff.conv_grad):
// the product with the channel-swapped weight at the gradient's 7x7 pixels, then the
// other three places of each pixel's 2x2 block zeroed by one select of a constant mask,
// the odd input's last row and column cropped. The implicit GEMM's epilogue stores each
// accumulator at its block's first place and zeros at the other three (those inside dx):
// no select kernel, no 2x16x7x7 intermediate, no mask or zero constants.

func.func @dgrad(%dy: tensor<2x32x7x7xbf16>, %w: tensor<32x16x1x1xbf16>) -> tensor<2x16x13x13xbf16> {
  %wt = tgraph.transpose %w permutation = [1, 0, 2, 3] : (tensor<32x16x1x1xbf16>) -> tensor<16x32x1x1xbf16>
  %y = tgraph.conv2d %dy, %wt stride = [1, 1] padding = [0, 0] : tensor<2x32x7x7xbf16>, tensor<16x32x1x1xbf16> -> tensor<2x16x7x7xbf16>
  %r = tgraph.reshape %y : (tensor<2x16x7x7xbf16>) -> tensor<2x16x7x1x7x1xbf16>
  %keep = tgraph.constant dense<[[[[[[true, false]], [[false, false]]]]]]> : tensor<1x1x1x2x1x2xi1> -> tensor<1x1x1x2x1x2xi1>
  %zero = tgraph.constant dense<0.000000e+00> : tensor<f64> -> tensor<bf16>
  %s = tgraph.select %keep, %r, %zero : (tensor<1x1x1x2x1x2xi1>, tensor<2x16x7x1x7x1xbf16>, tensor<bf16>) -> tensor<2x16x7x2x7x2xbf16>
  %i = tgraph.reshape %s : (tensor<2x16x7x2x7x2xbf16>) -> tensor<2x16x14x14xbf16>
  %dx = tgraph.slice %i start = [0, 0, 0, 0] limit = [2, 16, 13, 13] stride = [1, 1, 1, 1] : (tensor<2x16x14x14xbf16>) -> tensor<2x16x13x13xbf16>
  func.return %dx : tensor<2x16x13x13xbf16>
}

// CHECK:      ttarget.func @dgrad_conv_0(
// CHECK:        ttarget.wgmma "m64n{{[0-9]+}}k16.f32.bf16.bf16"
// CHECK:        %[[ZERO:.*]] = ttarget.reg "b16"
// CHECK-NEXT:   %[[Z:.*]] = ttarget.imm 0
// CHECK-NEXT:   ttarget.mov "b16" %[[ZERO]], %[[Z]]
// a channel's value at its block's place (0, 0), then zeros at (0, 1), (1, 0), (1, 1)
// CHECK:        ttarget.cvt "rn.bf16.f32" %[[V:.*]], %{{.*}}
// CHECK-NEXT:   ttarget.st "global.b16" [%{{.*}} + 0], (%[[V]])
// CHECK-COUNT-2: ttarget.st "global.b16" [%{{.*}} + 0], (%[[ZERO]])
// CHECK:        ttarget.st "global.b16" [%{{.*}} + 0], (%[[ZERO]])
// CHECK-LABEL:  func.func @dgrad(
// CHECK-SAME:     %[[W:[^:]*]]: memref<32x16x1x1xbf16>
// CHECK-NEXT:   memref.alloc() : memref<2x7x7x32xbf16>
// CHECK-NEXT:   ttarget.launch_ex @dgrad_conv_nhwc_0
// CHECK-NEXT:   %[[WK:.*]] = memref.alloc() : memref<16x32xbf16>
// CHECK-NEXT:   %[[DX:.*]] = memref.alloc() : memref<2x16x13x13xbf16>
// CHECK-NEXT:   ttarget.launch_ex @dgrad_conv_weight_0(%[[WK]], %[[W]])
// CHECK-NEXT:   ttarget.launch_ex @dgrad_conv_0(%[[DX]], %{{.*}}, %[[WK]])
// CHECK-NEXT:   func.return %[[DX]]
