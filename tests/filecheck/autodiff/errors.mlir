// RUN: not tessera-opt %s -p autodiff{function=slice} 2>&1 | filecheck %s --check-prefix=SLICE
// RUN: not tessera-opt %s -p 'autodiff{function=amax wrt=0}' 2>&1 | filecheck %s --check-prefix=AMAX

// Differentiating what has no derivative names the op at fault (argument errors
// are covered in tests/test_autodiff_pass.py).

func.func @slice(%a: tensor<4x4xf32>) -> tensor<f32> {
  %0 = tgraph.exp %a : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = tgraph.all_slice %0 axis = "tp" dim = 0 : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = tgraph.sum %1 axes = [] : (tensor<4x4xf32>) -> tensor<f32>
  func.return %2 : tensor<f32>
}
// SLICE: errors.mlir:9:3: error: autodiff: tgraph.all_slice (operation #1 of @slice) is not differentiable: no adjoint rule for tgraph.all_slice

func.func @amax(%a: tensor<4xf32>) -> tensor<f32> attributes {tessera.mesh = #tessera.mesh<dp = 2>} {
  %0 = tgraph.all_reduce %a op = "max" axis = "dp" : (tensor<4xf32>) -> tensor<4xf32>
  %1 = tgraph.sum %0 axes = [] : (tensor<4xf32>) -> tensor<f32>
  func.return %1 : tensor<f32>
}
// AMAX: errors.mlir:16:3: error: autodiff: tgraph.all_reduce with op = max has no adjoint rule (only sum and mean are differentiable) [tgraph.all_reduce (operation #0 of @amax)]
