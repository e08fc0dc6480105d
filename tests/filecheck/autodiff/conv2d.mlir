// RUN: tessera-opt %s -p autodiff | filecheck %s

// conv2d's adjoint, stride 2 and padding 1:
// * input: the cotangent is dilated by the stride and padded by k-1 (zeros
//   interleaved and concatenated), then a stride-1 conv2d with the weight
//   flipped in H and W (products with anti-identity matrices) and with O and C
//   swapped, cropped by the padding;
// * weight: a conv2d of the input (N and C swapped) with the cotangent as its
//   kernel, dilated by the forward's stride (no dilated copy of the cotangent),
//   padding 1, transposed back to OIHW;
// * bias: the sum of the cotangent over N, H, W.

func.func @conv(%x: tensor<1x2x5x5xf64>, %w: tensor<3x2x3x3xf64>, %b: tensor<3xf64>) -> tensor<1x3x3x3xf64> {
  %y = tgraph.conv2d %x, %w bias %b : tensor<3xf64> stride = [2, 2] padding = [1, 1] : tensor<1x2x5x5xf64>, tensor<3x2x3x3xf64> -> tensor<1x3x3x3xf64>
  func.return %y : tensor<1x3x3x3xf64>
}
// CHECK-LABEL: func.func @conv_grad(%x: tensor<1x2x5x5xf64>, %w: tensor<3x2x3x3xf64>, %b: tensor<3xf64>, %0: tensor<1x3x3x3xf64>) -> (tensor<1x2x5x5xf64>, tensor<3x2x3x3xf64>, tensor<3xf64>) {
// CHECK:         %[[PADDED:.*]] = tgraph.concat %{{.*}}, %{{.*}}, %{{.*}} axis = 3 : ({{.*}}) -> tensor<1x3x9x9xf64>
// CHECK-NEXT:    %[[J:.*]] = tgraph.constant dense<{{\[}}[0.000000e+00, 0.000000e+00, 1.000000e+00], [0.000000e+00, 1.000000e+00, 0.000000e+00], [1.000000e+00, 0.000000e+00, 0.000000e+00]]>
// CHECK-NEXT:    %[[FH:.*]] = tgraph.matmul %[[J]], %w : (tensor<3x3xf64>, tensor<3x2x3x3xf64>) -> tensor<3x2x3x3xf64>
// CHECK-NEXT:    %[[J2:.*]] = tgraph.constant
// CHECK-NEXT:    %[[FHW:.*]] = tgraph.matmul %[[FH]], %[[J2]]
// CHECK-NEXT:    %[[WT:.*]] = tgraph.transpose %[[FHW]] permutation = [1, 0, 2, 3] : (tensor<3x2x3x3xf64>) -> tensor<2x3x3x3xf64>
// CHECK-NEXT:    %[[DXP:.*]] = tgraph.conv2d %[[PADDED]], %[[WT]] stride = [1, 1] padding = [0, 0] : tensor<1x3x9x9xf64>, tensor<2x3x3x3xf64> -> tensor<1x2x7x7xf64>
// CHECK-NEXT:    %[[DX:.*]] = tgraph.slice %[[DXP]] start = [0, 0, 1, 1] limit = [1, 2, 6, 6] stride = [1, 1, 1, 1] : (tensor<1x2x7x7xf64>) -> tensor<1x2x5x5xf64>
// CHECK-NEXT:    %[[XT:.*]] = tgraph.transpose %x permutation = [1, 0, 2, 3] : (tensor<1x2x5x5xf64>) -> tensor<2x1x5x5xf64>
// CHECK-NEXT:    %[[CT:.*]] = tgraph.transpose %0 permutation = [1, 0, 2, 3] : (tensor<1x3x3x3xf64>) -> tensor<3x1x3x3xf64>
// CHECK-NEXT:    %[[DWT:.*]] = tgraph.conv2d %[[XT]], %[[CT]] stride = [1, 1] padding = [1, 1] dilation = [2, 2] : tensor<2x1x5x5xf64>, tensor<3x1x3x3xf64> -> tensor<2x3x3x3xf64>
// CHECK-NEXT:    %[[DW:.*]] = tgraph.transpose %[[DWT]] permutation = [1, 0, 2, 3] : (tensor<2x3x3x3xf64>) -> tensor<3x2x3x3xf64>
// CHECK-NEXT:    %[[DB:.*]] = tgraph.sum %0 axes = [0, 2, 3] : (tensor<1x3x3x3xf64>) -> tensor<3xf64>
// CHECK-NEXT:    func.return %[[DX]], %[[DW]], %[[DB]] : tensor<1x2x5x5xf64>, tensor<3x2x3x3xf64>, tensor<3xf64>

// A depthwise conv2d (groups = C = O = 3): the input gradient is the same grouped
// convolution of the padded cotangent with the flipped weight (its per-group O/C swap
// moves size-1 axes: no transpose); the weight gradient convolves the input as
// [1, N*C, H, W] with the cotangent as N*C kernels [N*C, 1, Ho, Wo] in N*C groups (both
// reshapes, no copies): one image's partial gradient per (n, c), summed over N.
func.func @dw(%x: tensor<2x3x6x6xf64>, %w: tensor<3x1x3x3xf64>) -> tensor<2x3x6x6xf64> {
  %y = tgraph.conv2d %x, %w stride = [1, 1] padding = [1, 1] groups = 3 : tensor<2x3x6x6xf64>, tensor<3x1x3x3xf64> -> tensor<2x3x6x6xf64>
  func.return %y : tensor<2x3x6x6xf64>
}
// CHECK-LABEL: func.func @dw_grad(%x: tensor<2x3x6x6xf64>, %w: tensor<3x1x3x3xf64>, %0: tensor<2x3x6x6xf64>)
// CHECK:         %[[FLIP:.*]] = tgraph.matmul %{{.*}}, %{{.*}} : (tensor<3x1x3x3xf64>, tensor<3x3xf64>) -> tensor<3x1x3x3xf64>
// CHECK-NEXT:    %[[DXP:.*]] = tgraph.conv2d %{{.*}}, %[[FLIP]] stride = [1, 1] padding = [0, 0] groups = 3 : tensor<2x3x10x10xf64>, tensor<3x1x3x3xf64> -> tensor<2x3x8x8xf64>
// CHECK-NEXT:    %[[DX:.*]] = tgraph.slice %[[DXP]] start = [0, 0, 1, 1] limit = [2, 3, 7, 7]
// CHECK-NEXT:    %[[XR:.*]] = tgraph.reshape %x : (tensor<2x3x6x6xf64>) -> tensor<1x6x6x6xf64>
// CHECK-NEXT:    %[[CR:.*]] = tgraph.reshape %0 : (tensor<2x3x6x6xf64>) -> tensor<6x1x6x6xf64>
// CHECK-NEXT:    %[[P:.*]] = tgraph.conv2d %[[XR]], %[[CR]] stride = [1, 1] padding = [1, 1] groups = 6 : tensor<1x6x6x6xf64>, tensor<6x1x6x6xf64> -> tensor<1x6x3x3xf64>
// CHECK-NEXT:    %[[P5:.*]] = tgraph.reshape %[[P]] : (tensor<1x6x3x3xf64>) -> tensor<1x2x3x3x3xf64>
// CHECK-NEXT:    %[[S:.*]] = tgraph.sum %[[P5]] axes = [1] : (tensor<1x2x3x3x3xf64>) -> tensor<1x3x3x3xf64>
// CHECK-NEXT:    %[[DW:.*]] = tgraph.reshape %[[S]] : (tensor<1x3x3x3xf64>) -> tensor<3x1x3x3xf64>
// CHECK-NEXT:    func.return %[[DX]], %[[DW]]
