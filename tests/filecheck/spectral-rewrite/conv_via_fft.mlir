// RUN: tessera-opt %s -p 'spectral-rewrite{conv-via-fft=true}' | filecheck %s
// RUN: tessera-opt %s -p spectral-rewrite | filecheck %s --check-prefix=OFF

// A 15x15 kernel over an 18x18 input padded by 7 (P = Q = 32): the cost rule counts
// 540672 operations through FFTs against 583200 direct, so the conv is rewritten.
func.func @big_kernel(%x: tensor<1x2x18x18xf32>, %w: tensor<2x2x15x15xf32>, %b: tensor<2xf32>) -> tensor<1x2x18x18xf32> {
  %0 = tgraph.conv2d %x, %w bias %b : tensor<2xf32> stride = [1, 1] padding = [7, 7] : tensor<1x2x18x18xf32>, tensor<2x2x15x15xf32> -> tensor<1x2x18x18xf32>
  func.return %0 : tensor<1x2x18x18xf32>
}
// CHECK-LABEL: func.func @big_kernel
// CHECK:         %[[XP:.*]] = tgraph.concat %{{.*}}, %{{.*}}, %{{.*}} axis = 3 : ({{.*}}) -> tensor<1x2x32x32xf32>
// CHECK:         %[[WP:.*]] = tgraph.concat %{{.*}}, %{{.*}} axis = 3 : ({{.*}}) -> tensor<2x2x32x32xf32>
// CHECK:         %[[X5:.*]] = tgraph.reshape %[[XP]] : (tensor<1x2x32x32xf32>) -> tensor<1x1x2x32x32xf32>
// CHECK-NEXT:    %[[XF:.*]] = tgraph.fft2d %[[X5]]
// CHECK-NEXT:    %[[WF:.*]] = tgraph.fft2d %[[WP]]
// CHECK:         %[[CJ:.*]] = tgraph.complex
// CHECK-NEXT:    %[[PR:.*]] = tgraph.mul %[[XF]], %[[CJ]] : (tensor<1x1x2x32x32xcomplex<f32>>, tensor<2x2x32x32xcomplex<f32>>) -> tensor<1x2x2x32x32xcomplex<f32>>
// CHECK-NEXT:    %[[Y:.*]] = tgraph.fft2d %[[PR]] inverse
// CHECK-NEXT:    %[[RE:.*]] = tgraph.real %[[Y]]
// CHECK-NEXT:    %[[S:.*]] = tgraph.sum %[[RE]] axes = [2] : (tensor<1x2x2x32x32xf32>) -> tensor<1x2x32x32xf32>
// CHECK-NEXT:    %[[SL:.*]] = tgraph.slice %[[S]] start = [0, 0, 0, 0] limit = [1, 2, 18, 18]
// CHECK-NEXT:    %[[B:.*]] = tgraph.reshape %b
// CHECK-NEXT:    tgraph.add %[[SL]], %[[B]]
// CHECK-NOT:     tgraph.conv2d
// OFF-LABEL: func.func @big_kernel
// OFF-NEXT:    tgraph.conv2d

// A 3x3 kernel: direct is cheaper; a stride of 2 or an f16 conv is never rewritten.
func.func @kept(%x: tensor<1x4x32x32xf32>, %w: tensor<4x4x3x3xf32>, %h: tensor<1x2x18x18xf16>, %v: tensor<2x2x15x15xf16>) -> (tensor<1x4x32x32xf32>, tensor<1x4x16x16xf32>, tensor<1x2x18x18xf16>) {
  %0 = tgraph.conv2d %x, %w stride = [1, 1] padding = [1, 1] : tensor<1x4x32x32xf32>, tensor<4x4x3x3xf32> -> tensor<1x4x32x32xf32>
  %1 = tgraph.conv2d %x, %w stride = [2, 2] padding = [1, 1] : tensor<1x4x32x32xf32>, tensor<4x4x3x3xf32> -> tensor<1x4x16x16xf32>
  %2 = tgraph.conv2d %h, %v stride = [1, 1] padding = [7, 7] : tensor<1x2x18x18xf16>, tensor<2x2x15x15xf16> -> tensor<1x2x18x18xf16>
  func.return %0, %1, %2 : tensor<1x4x32x32xf32>, tensor<1x4x16x16xf32>, tensor<1x2x18x18xf16>
}
// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    tgraph.conv2d %x, %w stride = [1, 1]
// CHECK-NEXT:    tgraph.conv2d %x, %w stride = [2, 2]
// CHECK-NEXT:    tgraph.conv2d %h, %v
// CHECK-NOT:     tgraph.fft2d

// A grouped convolution (each output channel sums over its group's channels only) is
// never rewritten: the FFT product sums over every input channel.
func.func @grouped(%x: tensor<1x4x18x18xf32>, %w: tensor<4x2x15x15xf32>) -> tensor<1x4x18x18xf32> {
  %0 = tgraph.conv2d %x, %w stride = [1, 1] padding = [7, 7] groups = 2 : tensor<1x4x18x18xf32>, tensor<4x2x15x15xf32> -> tensor<1x4x18x18xf32>
  func.return %0 : tensor<1x4x18x18xf32>
}
// CHECK-LABEL: func.func @grouped
// CHECK-NEXT:    tgraph.conv2d %x, %w stride = [1, 1] padding = [7, 7] groups = 2
// CHECK-NOT:     tgraph.fft2d
