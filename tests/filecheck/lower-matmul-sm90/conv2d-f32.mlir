// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true implicit_conv=true}' | filecheck %s
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true implicit_conv=true allow_tf32=true}' | filecheck %s --check-prefix=TF32

// f32 conv2d as the implicit GEMM on tf32 wgmmas: the NHWC copy (channels 6 -> 8, a
// multiple of 4) and the weight copy write TF32 hi and lo planes ([2, N, H, W, Cp],
// [2 O, K]; 8-channel pixels: K-steps of whole 3-tap filter rows padded to 4 taps,
// K = 3 x 4 x 8); each k8 step issues three products, each stage's sum is added into f32
// totals; with allow_tf32 one plane, one product per k8 step, one group kept in flight.

func.func @f(%x: tensor<2x6x9x9xf32>, %w: tensor<16x6x3x3xf32>) -> tensor<2x16x9x9xf32> {
  %y = tgraph.conv2d %x, %w stride = [1, 1] padding = [1, 1] : tensor<2x6x9x9xf32>, tensor<16x6x3x3xf32> -> tensor<2x16x9x9xf32>
  func.return %y : tensor<2x16x9x9xf32>
}

// CHECK:      ttarget.func @f_conv_0(
// CHECK:        ttarget.wgmma "m64n64k8.f32.tf32.tf32"
// CHECK-NEXT:   ttarget.wgmma "m64n64k8.f32.tf32.tf32"
// CHECK-NEXT:   ttarget.wgmma "m64n64k8.f32.tf32.tf32"
// CHECK:        ttarget.wgmma_wait 0
// CHECK:        ttarget.add "rn.f32"
// CHECK:        ttarget.st "global.f32"
// CHECK-LABEL:  func.func @f(
// CHECK:        memref.alloc() : memref<2x2x9x9x8xf32>
// CHECK:        memref.alloc() : memref<32x96xf32>

// TF32:         ttarget.wgmma "m64n64k8.f32.tf32.tf32"
// TF32:         ttarget.wgmma_wait 1
// TF32-LABEL:   func.func @f(
// TF32:         memref.alloc() : memref<1x2x9x9x8xf32>
// TF32:         memref.alloc() : memref<16x96xf32>
