// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// The verifiers of tgraph.adamw_update and tgraph.sgd_update name the op, the list and
// the entry that is wrong.

func.func @mixed_dtypes(%p0: tensor<4xf32>, %p1: tensor<4xbf16>, %h: tensor<3xf32>) {
  // expected-error @+1 {{tgraph.sgd_update: params[1] is bf16, expected f32 (one update per element type)}}
  %0:2 = "tgraph.sgd_update"(%p0, %p1, %p0, %p1, %h) <{momentum = 0.0 : f64, weight_decay = 0.0 : f64, operandSegmentSizes = array<i32: 2, 2, 0, 1>, resultSegmentSizes = array<i32: 2, 0>}> : (tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xbf16>, tensor<3xf32>) -> (tensor<4xf32>, tensor<4xbf16>)
  func.return
}

// -----

func.func @grad_shape(%p: tensor<4xf32>, %g: tensor<5xf32>, %h: tensor<3xf32>) {
  // expected-error @+1 {{tgraph.sgd_update: grads[0] has shape [5], expected [4] (that of params[0])}}
  %0 = "tgraph.sgd_update"(%p, %g, %h) <{momentum = 0.0 : f64, weight_decay = 0.0 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 1>, resultSegmentSizes = array<i32: 1, 0>}> : (tensor<4xf32>, tensor<5xf32>, tensor<3xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @count(%p: tensor<4xf32>, %h: tensor<3xf32>) {
  // expected-error @+1 {{tgraph.adamw_update: 2 params but 1 grads}}
  %0:6 = "tgraph.adamw_update"(%p, %p, %p, %p, %p, %p, %p, %h) <{beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, operandSegmentSizes = array<i32: 2, 1, 2, 2, 1>, resultSegmentSizes = array<i32: 2, 2, 2>}> : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<3xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  func.return
}

// -----

func.func @int_params(%p: tensor<4xi32>, %h: tensor<3xf32>) {
  // expected-error @+1 {{tgraph.sgd_update: parameters must be f64, f32, f16 or bf16, got i32}}
  %0 = "tgraph.sgd_update"(%p, %p, %h) <{momentum = 0.0 : f64, weight_decay = 0.0 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 1>, resultSegmentSizes = array<i32: 1, 0>}> : (tensor<4xi32>, tensor<4xi32>, tensor<3xf32>) -> tensor<4xi32>
  func.return
}

// -----

func.func @hyper(%p: tensor<4xf32>, %h: tensor<2xf32>) {
  // expected-error @+1 {{tgraph.sgd_update: hyper must be tensor<3xf32> (lr, buf_scale, grad_scale), got tensor<2xf32>}}
  %0 = "tgraph.sgd_update"(%p, %p, %h) <{momentum = 0.0 : f64, weight_decay = 0.0 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 1>, resultSegmentSizes = array<i32: 1, 0>}> : (tensor<4xf32>, tensor<4xf32>, tensor<2xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @beta(%p: tensor<4xf32>, %h: tensor<3xf32>) {
  // expected-error @+1 {{tgraph.adamw_update: beta2 must be in [0.0, 1.0), got 1.0}}
  %0:3 = tgraph.adamw_update %p grads %p exp_avgs %p exp_avg_sqs %p hyper %h beta1 = 0.9 beta2 = 1.0 eps = 1.0e-8 : tensor<4xf32>
  func.return
}

// -----

func.func @no_buffers(%p: tensor<4xf32>, %h: tensor<3xf32>) {
  // expected-error @+1 {{tgraph.sgd_update: momentum 0.9 needs one momentum buffer per parameter}}
  %0 = tgraph.sgd_update %p grads %p hyper %h momentum = 0.9 weight_decay = 0.0 : tensor<4xf32>
  func.return
}

// -----

func.func @nesterov(%p: tensor<4xf32>, %h: tensor<3xf32>) {
  // expected-error @+1 {{tgraph.sgd_update: nesterov needs a momentum > 0}}
  %0 = tgraph.sgd_update %p grads %p hyper %h momentum = 0.0 weight_decay = 0.0 nesterov : tensor<4xf32>
  func.return
}

// -----

func.func @empty(%h: tensor<3xf32>) {
  // expected-error @+1 {{tgraph.sgd_update: needs at least one parameter tensor}}
  "tgraph.sgd_update"(%h) <{momentum = 0.0 : f64, weight_decay = 0.0 : f64, operandSegmentSizes = array<i32: 0, 0, 0, 1>, resultSegmentSizes = array<i32: 0, 0>}> : (tensor<3xf32>) -> ()
  func.return
}
