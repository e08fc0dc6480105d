// RUN: tessera-opt %s -p autodiff | filecheck %s

// conv2d's adjoint, stride 2 and padding 1:
// * input: one stride-1 conv2d of the undilated cotangent (no zeros interleaved into
//   it): the weight padded by a zero row and column, cut into its 2 x 2 stride phases
//   ([O, C, 2, 2, 2, 2]: window row, phase), reversed along the window, phases and C
//   as the output channels (8 = 2 x 2 x 2); the phases interleave by one transpose,
//   whole phase rows cropped from it (a slice the lowering reads through the
//   transpose), then the odd 5x5 input's last row and column;
// * weight: a conv2d of the input (N and C swapped) with the cotangent as its
//   kernel, dilated by the forward's stride (no dilated copy of the cotangent),
//   padding 1, transposed back to OIHW;
// * bias: the sum of the cotangent over N, H, W.

func.func @conv(%x: tensor<1x2x5x5xf64>, %w: tensor<3x2x3x3xf64>, %b: tensor<3xf64>) -> tensor<1x3x3x3xf64> {
  %y = tgraph.conv2d %x, %w bias %b : tensor<3xf64> stride = [2, 2] padding = [1, 1] : tensor<1x2x5x5xf64>, tensor<3x2x3x3xf64> -> tensor<1x3x3x3xf64>
  func.return %y : tensor<1x3x3x3xf64>
}
// CHECK-LABEL: func.func @conv_grad(%x: tensor<1x2x5x5xf64>, %w: tensor<3x2x3x3xf64>, %b: tensor<3xf64>, %0: tensor<1x3x3x3xf64>) -> (tensor<1x2x5x5xf64>, tensor<3x2x3x3xf64>, tensor<3xf64>) {
// CHECK:         %[[PH:.*]] = tgraph.concat %{{.*}}, %w axis = 2 : (tensor<3x2x1x3xf64>, tensor<3x2x3x3xf64>) -> tensor<3x2x4x3xf64>
// CHECK:         %[[PW:.*]] = tgraph.concat %{{.*}}, %[[PH]] axis = 3 : (tensor<3x2x4x1xf64>, tensor<3x2x4x3xf64>) -> tensor<3x2x4x4xf64>
// CHECK-NEXT:    %[[W7:.*]] = tgraph.reshape %[[PW]] : (tensor<3x2x4x4xf64>) -> tensor<1x3x2x2x2x2x2xf64>
// CHECK-NEXT:    %[[R:.*]] = tgraph.reverse %[[W7]] dims = [3, 5]
// CHECK-NEXT:    %[[T:.*]] = tgraph.transpose %[[R]] permutation = [0, 4, 6, 2, 1, 3, 5] : (tensor<1x3x2x2x2x2x2xf64>) -> tensor<1x2x2x2x3x2x2xf64>
// CHECK-NEXT:    %[[WC:.*]] = tgraph.reshape %[[T]] : (tensor<1x2x2x2x3x2x2xf64>) -> tensor<8x3x2x2xf64>
// CHECK-NEXT:    %[[Y:.*]] = tgraph.conv2d %0, %[[WC]] stride = [1, 1] padding = [1, 1] : tensor<1x3x3x3xf64>, tensor<8x3x2x2xf64> -> tensor<1x8x4x4xf64>
// CHECK-NEXT:    %[[Y7:.*]] = tgraph.reshape %[[Y]] : (tensor<1x8x4x4xf64>) -> tensor<1x1x2x2x2x4x4xf64>
// CHECK-NEXT:    %[[I:.*]] = tgraph.transpose %[[Y7]] permutation = [0, 1, 4, 5, 2, 6, 3] : (tensor<1x1x2x2x2x4x4xf64>) -> tensor<1x1x2x4x2x4x2xf64>
// CHECK-NEXT:    %[[C:.*]] = tgraph.slice %[[I]] start = [0, 0, 0, 1, 0, 1, 0] limit = [1, 1, 2, 4, 2, 4, 2] stride = [1, 1, 1, 1, 1, 1, 1] : (tensor<1x1x2x4x2x4x2xf64>) -> tensor<1x1x2x3x2x3x2xf64>
// CHECK-NEXT:    %[[Z:.*]] = tgraph.reshape %[[C]] : (tensor<1x1x2x3x2x3x2xf64>) -> tensor<1x2x6x6xf64>
// CHECK-NEXT:    %[[DX:.*]] = tgraph.slice %[[Z]] start = [0, 0, 0, 0] limit = [1, 2, 5, 5] stride = [1, 1, 1, 1] : (tensor<1x2x6x6xf64>) -> tensor<1x2x5x5xf64>
// CHECK-NEXT:    %[[XT:.*]] = tgraph.transpose %x permutation = [1, 0, 2, 3] : (tensor<1x2x5x5xf64>) -> tensor<2x1x5x5xf64>
// CHECK-NEXT:    %[[CT:.*]] = tgraph.transpose %0 permutation = [1, 0, 2, 3] : (tensor<1x3x3x3xf64>) -> tensor<3x1x3x3xf64>
// CHECK-NEXT:    %[[DWT:.*]] = tgraph.conv2d %[[XT]], %[[CT]] stride = [1, 1] padding = [1, 1] dilation = [2, 2] : tensor<2x1x5x5xf64>, tensor<3x1x3x3xf64> -> tensor<2x3x3x3xf64>
// CHECK-NEXT:    %[[DW:.*]] = tgraph.transpose %[[DWT]] permutation = [1, 0, 2, 3] : (tensor<2x3x3x3xf64>) -> tensor<3x2x3x3xf64>
// CHECK-NEXT:    %[[DB:.*]] = tgraph.sum %0 axes = [0, 2, 3] : (tensor<1x3x3x3xf64>) -> tensor<3xf64>
// CHECK-NEXT:    func.return %[[DX]], %[[DW]], %[[DB]] : tensor<1x2x5x5xf64>, tensor<3x2x3x3xf64>, tensor<3xf64>

// A depthwise conv2d (groups = C = O = 3): the input gradient is the same grouped
// convolution of the cotangent with the weight reversed (one tgraph.reverse; its
// per-group O/C swap moves size-1 axes: no transpose); the weight gradient convolves the input as
// [1, N*C, H, W] with the cotangent as N*C kernels [N*C, 1, Ho, Wo] in N*C groups (both
// reshapes, no copies): one image's partial gradient per (n, c), summed over N.
func.func @dw(%x: tensor<2x3x6x6xf64>, %w: tensor<3x1x3x3xf64>) -> tensor<2x3x6x6xf64> {
  %y = tgraph.conv2d %x, %w stride = [1, 1] padding = [1, 1] groups = 3 : tensor<2x3x6x6xf64>, tensor<3x1x3x3xf64> -> tensor<2x3x6x6xf64>
  func.return %y : tensor<2x3x6x6xf64>
}
// CHECK-LABEL: func.func @dw_grad(%x: tensor<2x3x6x6xf64>, %w: tensor<3x1x3x3xf64>, %0: tensor<2x3x6x6xf64>)
// CHECK-NEXT:    %[[FLIP:.*]] = tgraph.reverse %w dims = [2, 3] : (tensor<3x1x3x3xf64>) -> tensor<3x1x3x3xf64>
// CHECK-NEXT:    %[[DX:.*]] = tgraph.conv2d %0, %[[FLIP]] stride = [1, 1] padding = [1, 1] groups = 3 : tensor<2x3x6x6xf64>, tensor<3x1x3x3xf64> -> tensor<2x3x6x6xf64>
// CHECK-NEXT:    %[[XR:.*]] = tgraph.reshape %x : (tensor<2x3x6x6xf64>) -> tensor<1x6x6x6xf64>
// CHECK-NEXT:    %[[CR:.*]] = tgraph.reshape %0 : (tensor<2x3x6x6xf64>) -> tensor<6x1x6x6xf64>
// CHECK-NEXT:    %[[P:.*]] = tgraph.conv2d %[[XR]], %[[CR]] stride = [1, 1] padding = [1, 1] groups = 6 : tensor<1x6x6x6xf64>, tensor<6x1x6x6xf64> -> tensor<1x6x3x3xf64>
// CHECK-NEXT:    %[[P5:.*]] = tgraph.reshape %[[P]] : (tensor<1x6x3x3xf64>) -> tensor<1x2x3x3x3xf64>
// CHECK-NEXT:    %[[S:.*]] = tgraph.sum %[[P5]] axes = [1] : (tensor<1x2x3x3x3xf64>) -> tensor<1x3x3x3xf64>
// CHECK-NEXT:    %[[DW:.*]] = tgraph.reshape %[[S]] : (tensor<1x3x3x3xf64>) -> tensor<3x1x3x3xf64>
// CHECK-NEXT:    func.return %[[DX]], %[[DW]]
