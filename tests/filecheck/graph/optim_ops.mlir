// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// tgraph.adamw_update and tgraph.sgd_update: one update of many tensors of one element
// type. Every list has the parameters' types, so the types are written once; printed
// back identically and through the generic form.

func.func @f(%p0: tensor<4x8xf32>, %p1: tensor<3xf32>, %g0: tensor<4x8xf32>, %g1: tensor<3xf32>,
             %m0: tensor<4x8xf32>, %m1: tensor<3xf32>, %v0: tensor<4x8xf32>, %v1: tensor<3xf32>,
             %h: tensor<3xf32>, %b: tensor<5xbf16>, %gb: tensor<5xbf16>) {
  %0:6 = tgraph.adamw_update %p0, %p1 grads %g0, %g1 exp_avgs %m0, %m1 exp_avg_sqs %v0, %v1 hyper %h beta1 = 9.000000e-01 beta2 = 9.990000e-01 eps = 1.000000e-08 : tensor<4x8xf32>, tensor<3xf32>
  %1:4 = tgraph.sgd_update %p0, %p1 grads %g0, %g1 momentum_buffers %m0, %m1 hyper %h momentum = 9.000000e-01 weight_decay = 1.000000e-02 nesterov : tensor<4x8xf32>, tensor<3xf32>
  %2 = tgraph.sgd_update %b grads %gb hyper %h momentum = 0.000000e+00 weight_decay = 0.000000e+00 : tensor<5xbf16>
  func.return
}
// CHECK:      %0, %1, %2, %3, %4, %5 = tgraph.adamw_update %p0, %p1 grads %g0, %g1 exp_avgs %m0, %m1 exp_avg_sqs %v0, %v1 hyper %h beta1 = 9.000000e-01 beta2 = 9.990000e-01 eps = 1.000000e-08 : tensor<4x8xf32>, tensor<3xf32>
// CHECK-NEXT: %6, %7, %8, %9 = tgraph.sgd_update %p0, %p1 grads %g0, %g1 momentum_buffers %m0, %m1 hyper %h momentum = 9.000000e-01 weight_decay = 1.000000e-02 nesterov : tensor<4x8xf32>, tensor<3xf32>
// CHECK-NEXT: %10 = tgraph.sgd_update %b grads %gb hyper %h momentum = 0.000000e+00 weight_decay = 0.000000e+00 : tensor<5xbf16>

// GENERIC: "tgraph.adamw_update"(%p0, %p1, %g0, %g1, %m0, %m1, %v0, %v1, %h) <{beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, eps = 1.000000e-08 : f64, operandSegmentSizes = array<i32: 2, 2, 2, 2, 1>, resultSegmentSizes = array<i32: 2, 2, 2>}>
// GENERIC: "tgraph.sgd_update"(%b, %gb, %h) <{momentum = 0.000000e+00 : f64, weight_decay = 0.000000e+00 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 1>, resultSegmentSizes = array<i32: 1, 0>}>
