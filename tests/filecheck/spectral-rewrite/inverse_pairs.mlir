// RUN: tessera-opt %s -p spectral-rewrite | filecheck %s
// RUN: tessera-opt %s -p 'spectral-rewrite{fold-inverse-pairs=false}' | filecheck %s --check-prefix=OFF

// ifft(fft(x)) -> x and fft(ifft(z)) -> z; a real x comes back as complex(x, 0), and
// real(complex(a, b)) -> a, so real(ifft(fft(x))) is x.
func.func @pairs(%x: tensor<3x8xf32>, %z: tensor<4xcomplex<f64>>, %y: tensor<2x4x6xf64>) -> (tensor<3x8xf32>, tensor<4xcomplex<f64>>, tensor<2x4x6xcomplex<f64>>) {
  %0 = tgraph.fft %x : (tensor<3x8xf32>) -> tensor<3x8xcomplex<f32>>
  %1 = tgraph.fft %0 inverse : (tensor<3x8xcomplex<f32>>) -> tensor<3x8xcomplex<f32>>
  %2 = tgraph.real %1 : (tensor<3x8xcomplex<f32>>) -> tensor<3x8xf32>
  %3 = tgraph.fft %z inverse : (tensor<4xcomplex<f64>>) -> tensor<4xcomplex<f64>>
  %4 = tgraph.fft %3 : (tensor<4xcomplex<f64>>) -> tensor<4xcomplex<f64>>
  %5 = tgraph.fft2d %y : (tensor<2x4x6xf64>) -> tensor<2x4x6xcomplex<f64>>
  %6 = tgraph.fft2d %5 inverse : (tensor<2x4x6xcomplex<f64>>) -> tensor<2x4x6xcomplex<f64>>
  func.return %2, %4, %6 : tensor<3x8xf32>, tensor<4xcomplex<f64>>, tensor<2x4x6xcomplex<f64>>
}
// CHECK-LABEL: func.func @pairs
// CHECK-NEXT:    %[[Z0:.*]] = tgraph.constant dense<0.000000e+00> : tensor<f64> -> tensor<2x4x6xf64>
// CHECK-NEXT:    %[[C:.*]] = tgraph.complex %y, %[[Z0]] : (tensor<2x4x6xf64>, tensor<2x4x6xf64>) -> tensor<2x4x6xcomplex<f64>>
// CHECK-NEXT:    func.return %x, %z, %[[C]]
// CHECK-NOT:     tgraph.fft

// OFF-LABEL: func.func @pairs
// OFF-COUNT-2: tgraph.fft %
// OFF:         tgraph.real
// OFF:         tgraph.fft %
// OFF:         tgraph.fft2d
// OFF:         tgraph.fft2d

// Transforms of different kinds or the same direction are not a pair.
func.func @not_pairs(%x: tensor<8xf32>, %y: tensor<4x8xf32>) -> (tensor<8xcomplex<f32>>, tensor<4x8xcomplex<f32>>) {
  %0 = tgraph.fft %x : (tensor<8xf32>) -> tensor<8xcomplex<f32>>
  %1 = tgraph.fft %0 : (tensor<8xcomplex<f32>>) -> tensor<8xcomplex<f32>>
  %2 = tgraph.fft2d %y : (tensor<4x8xf32>) -> tensor<4x8xcomplex<f32>>
  %3 = tgraph.fft %2 inverse : (tensor<4x8xcomplex<f32>>) -> tensor<4x8xcomplex<f32>>
  func.return %1, %3 : tensor<8xcomplex<f32>>, tensor<4x8xcomplex<f32>>
}
// CHECK-LABEL: func.func @not_pairs
// CHECK-NEXT:    tgraph.fft %x
// CHECK-NEXT:    tgraph.fft %
// CHECK-NEXT:    tgraph.fft2d %y
// CHECK-NEXT:    tgraph.fft %{{.*}} inverse
