// RUN: tessera-opt %s -p autodiff | filecheck %s

// Effect-aware adjoints. Collectives are transposed: all_gather <-> reduce_scatter,
// all_reduce(sum) -> all_reduce(sum), all_to_all -> all_to_all with split and
// concat dims exchanged. Random ops are recomputed with the same seed and
// offset, so the backward pass sees the forward samples; poisson has a zero
// gradient with respect to its rate.

func.func @distributed_loss(%x: tensor<4x3xf32>, %W: tensor<3x2xf32>) -> tensor<f32> attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  %y = tgraph.matmul %x, %W : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %g = tgraph.all_gather %y axis = "tp" dim = 0 : (tensor<4x2xf32>) -> tensor<8x2xf32>
  %sq = tgraph.mul %g, %g : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
  %l = tgraph.sum %sq axes = [] : (tensor<8x2xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
// CHECK-LABEL: func.func @distributed_loss_grad(%x: tensor<4x3xf32>, %W: tensor<3x2xf32>) -> (tensor<4x3xf32>, tensor<3x2xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
// CHECK:         %[[G:.*]] = tgraph.all_gather %{{.*}} axis = "tp" dim = 0 : (tensor<4x2xf32>) -> tensor<8x2xf32>
// CHECK:         %[[RS:.*]] = tgraph.reduce_scatter %{{.*}} op = "sum" axis = "tp" dim = 0 : (tensor<8x2xf32>) -> tensor<4x2xf32>
// CHECK-DAG:     tgraph.matmul %[[RS]], %W transpose_rhs
// CHECK-DAG:     tgraph.matmul %x, %[[RS]] transpose_lhs

func.func @collectives(%x: tensor<4x6xf32>) -> tensor<f32> attributes {tessera.mesh = #tessera.mesh<dp = 2>} {
  %a = tgraph.all_reduce %x op = "sum" axis = "dp" : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %b = tgraph.all_to_all %a axis = "dp" split_dim = 1 concat_dim = 0 : (tensor<4x6xf32>) -> tensor<8x3xf32>
  %c = tgraph.reduce_scatter %b op = "sum" axis = "dp" dim = 0 : (tensor<8x3xf32>) -> tensor<4x3xf32>
  %l = tgraph.sum %c axes = [] : (tensor<4x3xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
// CHECK-LABEL: func.func @collectives_grad(%x: tensor<4x6xf32>) -> tensor<4x6xf32>
// CHECK:         %[[B:.*]] = tgraph.broadcast %{{.*}} : (tensor<f32>) -> tensor<4x3xf32>
// CHECK-NEXT:    %[[AG:.*]] = tgraph.all_gather %[[B]] axis = "dp" dim = 0 : (tensor<4x3xf32>) -> tensor<8x3xf32>
// CHECK-NEXT:    %[[AA:.*]] = tgraph.all_to_all %[[AG]] axis = "dp" split_dim = 0 concat_dim = 1 : (tensor<8x3xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:    %[[AR:.*]] = tgraph.all_reduce %[[AA]] op = "sum" axis = "dp" : (tensor<4x6xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:    func.return %[[AR]] : tensor<4x6xf32>

func.func @noisy(%x: tensor<8xf32>, %lam: tensor<8xf32>) -> tensor<f32> {
  %n = tgraph.randn seed = 7 offset = 3 : tensor<8xf32>
  %y = tgraph.mul %x, %n : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %k = tgraph.poisson %lam seed = 11 : (tensor<8xf32>) -> tensor<8xf32>
  %z = tgraph.mul %y, %k : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %l = tgraph.sum %z axes = [0] : (tensor<8xf32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
// CHECK-LABEL: func.func @noisy_grad(%x: tensor<8xf32>, %lam: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>)
// CHECK-NEXT:    %[[N:.*]] = tgraph.randn seed = 7 offset = 3 : tensor<8xf32>
// CHECK-NEXT:    %[[K:.*]] = tgraph.poisson %lam seed = 11
// CHECK:         %[[GY:.*]] = tgraph.mul %{{.*}}, %[[K]]
// CHECK-NEXT:    %[[GX:.*]] = tgraph.mul %[[GY]], %[[N]]
// CHECK-NEXT:    %[[ZERO:.*]] = tgraph.constant dense<0.000000e+00> : tensor<f32> -> tensor<8xf32>
// CHECK-NEXT:    func.return %[[GX]], %[[ZERO]] : tensor<8xf32>, tensor<8xf32>
// CHECK-NOT:     tgraph.randn
