// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true implicit_conv=true}' | filecheck %s

// The input gradient of a 1x1/2 convolution of a 7x7 gradient (49 pixels: no 16-byte
// rows for the batched pointwise GEMM, so the implicit GEMM): its kernel is the forward
// weight with its channels swapped, which the weight relayout reads as stored (no
// transpose kernel).

func.func @dgrad(%dy: tensor<2x64x7x7xbf16>, %w: tensor<64x32x1x1xbf16>) -> tensor<2x32x7x7xbf16> {
  %wt = tgraph.transpose %w permutation = [1, 0, 2, 3] : (tensor<64x32x1x1xbf16>) -> tensor<32x64x1x1xbf16>
  %y = tgraph.conv2d %dy, %wt stride = [1, 1] padding = [0, 0] : tensor<2x64x7x7xbf16>, tensor<32x64x1x1xbf16> -> tensor<2x32x7x7xbf16>
  func.return %y : tensor<2x32x7x7xbf16>
}

// CHECK:      ttarget.func @dgrad_conv_weight_0(
// w[c, o] for wk[o, c]: the row is c * 32 + o
// CHECK:        %[[O:.*]] = ttarget.imm 32
// CHECK-NEXT:   ttarget.mad "lo.u32" %{{.*}}, %{{.*}}, %[[O]], %{{.*}}
// CHECK-LABEL:  func.func @dgrad(
// CHECK-SAME:     %[[W:[^:]*]]: memref<64x32x1x1xbf16>
// CHECK-NOT:    transpose
// CHECK:        ttarget.launch_ex @dgrad_conv_nhwc_0
// CHECK-NEXT:   %[[WK:.*]] = memref.alloc() : memref<32x64xbf16>
// CHECK-NEXT:   ttarget.launch_ex @dgrad_conv_weight_0(%[[WK]], %[[W]])
// CHECK-NOT:    transpose
// CHECK:        ttarget.launch_ex @dgrad_conv_0(
