// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true implicit_conv=true}' | filecheck %s

// The input gradient of a 3x3/2 convolution of a 13x13 input (tessera.autodiff.conv_grad):
// one stride-1 convolution whose 32 output channels are (row phase, column phase, channel),
// then its phases interleaved (reshape, transpose, crop of whole phase rows, reshape) and
// the odd input's last row and column cropped. The implicit GEMM's epilogue stores each
// accumulator at its place in dx (channel ((a*2 + b)*8 + c) at (r, q) to dx[.., c, 2r + a
// - 2, 2q + b - 2]): no slice kernel, no 2x32x8x8 intermediate.

func.func @dgrad(%g: tensor<2x16x7x7xbf16>, %wc: tensor<32x16x2x2xbf16>) -> tensor<2x8x13x13xbf16> {
  %y = tgraph.conv2d %g, %wc stride = [1, 1] padding = [1, 1] : tensor<2x16x7x7xbf16>, tensor<32x16x2x2xbf16> -> tensor<2x32x8x8xbf16>
  %r = tgraph.reshape %y : (tensor<2x32x8x8xbf16>) -> tensor<2x1x2x2x8x8x8xbf16>
  %t = tgraph.transpose %r permutation = [0, 1, 4, 5, 2, 6, 3] : (tensor<2x1x2x2x8x8x8xbf16>) -> tensor<2x1x8x8x2x8x2xbf16>
  %s = tgraph.slice %t start = [0, 0, 0, 1, 0, 1, 0] limit = [2, 1, 8, 8, 2, 8, 2] stride = [1, 1, 1, 1, 1, 1, 1] : (tensor<2x1x8x8x2x8x2xbf16>) -> tensor<2x1x8x7x2x7x2xbf16>
  %i = tgraph.reshape %s : (tensor<2x1x8x7x2x7x2xbf16>) -> tensor<2x8x14x14xbf16>
  %dx = tgraph.slice %i start = [0, 0, 0, 0] limit = [2, 8, 13, 13] stride = [1, 1, 1, 1] : (tensor<2x8x14x14xbf16>) -> tensor<2x8x13x13xbf16>
  func.return %dx : tensor<2x8x13x13xbf16>
}

// CHECK:      ttarget.func @dgrad_conv_0(
// CHECK:        ttarget.wgmma "m64n{{[0-9]+}}k16.f32.bf16.bf16"
// the phase convolution's first row and column reach no place of dx: the GEMM computes
// its 7 x 7 other pixels (M = 98), gathered with no padding. A row's image and pixel
// (49 of them) once it is below M, its row and column (of 7), each times 2, minus 0
// CHECK:        %[[M:.*]] = ttarget.imm 98
// CHECK-NEXT:   ttarget.setp "lt.u32" %{{.*}}, %{{.*}}, %[[M]]
// CHECK:        %[[RQ:.*]] = ttarget.imm 49
// CHECK-NEXT:   ttarget.div "u32" %{{.*}}, %{{.*}}, %[[RQ]]
// CHECK:        %[[Q:.*]] = ttarget.imm 7
// CHECK-NEXT:   ttarget.div "u32" %{{.*}}, %{{.*}}, %[[Q]]
// CHECK:        ttarget.mul "lo.u32"
// CHECK:        %[[OH:.*]] = ttarget.imm 0
// CHECK-NEXT:   ttarget.sub "u32" %{{.*}}, %{{.*}}, %[[OH]]
// only places inside dx (13 x 13) are stored
// CHECK:        ttarget.and "pred" %[[OK:.*]], %{{.*}}, %{{.*}}
// CHECK-NEXT:   ttarget.reg "pred"
// CHECK-NEXT:   %[[H:.*]] = ttarget.imm 13
// CHECK-NEXT:   ttarget.setp "lt.u32" %[[IN:.*]], %{{.*}}, %[[H]]
// CHECK-NEXT:   ttarget.and "pred" %[[OK]], %[[OK]], %[[IN]]
// CHECK:        ttarget.st "global.b16" [%{{.*}} + 0]
// CHECK-NOT:    ttarget.st "global.b16" [%{{.*}} + {{[1-9]}}
// CHECK:        ttarget.ret
// CHECK-LABEL:  func.func @dgrad(
// CHECK:        ttarget.launch_ex @dgrad_conv_nhwc_0
// CHECK:        %[[DX:.*]] = memref.alloc() : memref<2x8x13x13xbf16>
// CHECK-NEXT:   ttarget.launch_ex @dgrad_conv_weight_0
// CHECK-NEXT:   ttarget.launch_ex @dgrad_conv_0(%[[DX]], %{{.*}}, %{{.*}})
// CHECK-NOT:    ttile.launch
// CHECK-NOT:    memref.alloc
// CHECK:        func.return %[[DX]]
