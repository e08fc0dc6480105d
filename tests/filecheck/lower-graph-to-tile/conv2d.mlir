// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// conv2d: direct convolution, one lane per output element (wo fastest), loops over
// input channels, kernel rows and kernel columns; padding positions are masked loads
// with clamped indices; f32 accumulation for bf16, bias added before the one rounding.

func.func @f(%x: tensor<2x3x11x9xbf16>, %w: tensor<5x3x3x2xbf16>, %b: tensor<5xbf16>) -> tensor<2x5x6x5xbf16> {
  %0 = tgraph.conv2d %x, %w bias %b : tensor<5xbf16> stride = [2, 2] padding = [1, 1] : tensor<2x3x11x9xbf16>, tensor<5x3x3x2xbf16> -> tensor<2x5x6x5xbf16>
  func.return %0 : tensor<2x5x6x5xbf16>
}
// CHECK:      ttile.kernel @f_conv2d_0(%{{.*}}: memref<2x5x6x5xbf16>, %{{.*}}: memref<2x3x11x9xbf16>, %{{.*}}: memref<5x3x3x2xbf16>, %{{.*}}: memref<5xbf16>) group_size = 256 {
// CHECK:        %[[LIN:[0-9]+]] = ttile.linear_id
// CHECK:        %[[OK:[0-9]+]] = arith.cmpi slt, %[[LIN]], %{{.*}} : index
// CHECK:        scf.for %[[C:[0-9]+]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// CHECK:          scf.for %[[I:[0-9]+]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// CHECK:            scf.for %[[J:[0-9]+]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// CHECK:              %[[H:[0-9]+]] = arith.select %[[IN:[0-9]+]], %{{.*}}, %{{.*}} : index
// CHECK:              %[[W:[0-9]+]] = arith.select %[[IN]], %{{.*}}, %{{.*}} : index
// CHECK:              ttile.load %{{.*}}[%{{.*}}, %[[C]], %[[H]], %[[W]]] mask %[[IN]] : memref<2x3x11x9xbf16> -> bf16
// CHECK:              ttile.load %{{.*}}[%{{.*}}, %[[C]], %[[I]], %[[J]]] mask %[[OK]] : memref<5x3x3x2xbf16> -> bf16
// CHECK:              arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK:              arith.addf %{{.*}}, %{{.*}} : f32
// CHECK:        ttile.load %{{.*}}[%{{.*}}] mask %[[OK]] : memref<5xbf16> -> bf16
// CHECK:        arith.addf %{{.*}}, %{{.*}} : f32
// CHECK:        %[[R:[0-9]+]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK:        ttile.store %[[R]], %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] mask %[[OK]] : bf16, memref<2x5x6x5xbf16>
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_conv2d_0(%{{.*}}, %x, %w, %b) grid = [2, 1, 1]
