// RUN: tessera-opt %s -p autodiff | filecheck %s

// The adjoint of cholesky (Murray 2016): Φ(Lᵀ L̄) (lower triangle, diagonal
// halved, as a constant mask), two triangular solves with L giving
// S = L⁻ᵀ Φ L⁻¹ (the second one yields Sᵀ), then the symmetric part (S + Sᵀ) / 2.

func.func @chol(%a: tensor<3x3xf64>) -> tensor<f64> {
  %l = tgraph.cholesky %a : (tensor<3x3xf64>) -> tensor<3x3xf64>
  %s = tgraph.sum %l axes = [] : (tensor<3x3xf64>) -> tensor<f64>
  func.return %s : tensor<f64>
}
// CHECK-LABEL: func.func @chol_grad(%a: tensor<3x3xf64>) -> tensor<3x3xf64> {
// CHECK-NEXT:    %l = tgraph.cholesky %a
// CHECK-NEXT:    %[[ONE:.*]] = tgraph.constant dense<1.000000e+00>
// CHECK-NEXT:    %[[CT:.*]] = tgraph.broadcast %[[ONE]] : (tensor<f64>) -> tensor<3x3xf64>
// CHECK-NEXT:    %[[LTG:.*]] = tgraph.matmul %l, %[[CT]] transpose_lhs
// CHECK-NEXT:    %[[MASK:.*]] = tgraph.constant dense<{{\[}}[5.000000e-01, 0.000000e+00, 0.000000e+00], [1.000000e+00, 5.000000e-01, 0.000000e+00], [1.000000e+00, 1.000000e+00, 5.000000e-01]]>
// CHECK-NEXT:    %[[PHI:.*]] = tgraph.mul %[[LTG]], %[[MASK]]
// CHECK-NEXT:    %[[X:.*]] = tgraph.triangular_solve %l, %[[PHI]] transpose_a : (tensor<3x3xf64>, tensor<3x3xf64>) -> tensor<3x3xf64>
// CHECK-NEXT:    %[[XT:.*]] = tgraph.transpose %[[X]] permutation = [1, 0]
// CHECK-NEXT:    %[[ST:.*]] = tgraph.triangular_solve %l, %[[XT]] transpose_a
// CHECK-NEXT:    %[[S:.*]] = tgraph.transpose %[[ST]] permutation = [1, 0]
// CHECK-NEXT:    %[[SUM:.*]] = tgraph.add %[[S]], %[[ST]]
// CHECK-NEXT:    %[[HALF:.*]] = tgraph.constant dense<5.000000e-01>
// CHECK-NEXT:    %[[GA:.*]] = tgraph.mul %[[SUM]], %[[HALF]]
// CHECK-NEXT:    func.return %[[GA]] : tensor<3x3xf64>
