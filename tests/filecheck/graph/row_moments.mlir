// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s

// Each (sample, channel) plane's mean and sum of squared deviations, in f32.
// CHECK-LABEL: func.func @planes
// CHECK:       %{{.*}}, %{{.*}} = tgraph.row_moments %x dims = 2 : tensor<4x8x7x7xbf16> -> (tensor<4x8xf32>, tensor<4x8xf32>)
func.func @planes(%x: tensor<4x8x7x7xbf16>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %m, %q = tgraph.row_moments %x dims = 2 : tensor<4x8x7x7xbf16> -> (tensor<4x8xf32>, tensor<4x8xf32>)
  func.return %m, %q : tensor<4x8xf32>, tensor<4x8xf32>
}

// The whole tensor as one row: scalar moments.
// CHECK-LABEL: func.func @all
// CHECK:       tgraph.row_moments %x dims = 2 : tensor<3x5xf32> -> (tensor<f32>, tensor<f32>)
func.func @all(%x: tensor<3x5xf32>) -> (tensor<f32>, tensor<f32>) {
  %m, %q = tgraph.row_moments %x dims = 2 : tensor<3x5xf32> -> (tensor<f32>, tensor<f32>)
  func.return %m, %q : tensor<f32>, tensor<f32>
}
