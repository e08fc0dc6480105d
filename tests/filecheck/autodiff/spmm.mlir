// RUN: tessera-opt %s -p autodiff | filecheck %s
// RUN: tessera-opt %s -p 'autodiff{mode=forward wrt=2,3}' | filecheck %s --check-prefix=JVP

// spmm's adjoint: the values get the sampled product sddmm(ct, dense) at the
// stored entries, the dense operand gets Aᵀ ct (spmm_transpose on the same CSR
// pattern). indptr and indices are integers and get no gradient. Forward mode
// transposes these back into two spmm's.

func.func @spmm(%indptr: tensor<4xi32>, %indices: tensor<5xi32>, %values: tensor<5xf32>, %dense: tensor<6x2xf32>) -> tensor<3x2xf32> {
  %y = tgraph.spmm %indptr, %indices, %values, %dense sparse_shape = [3, 6] : (tensor<4xi32>, tensor<5xi32>, tensor<5xf32>, tensor<6x2xf32>) -> tensor<3x2xf32>
  func.return %y : tensor<3x2xf32>
}
// CHECK-LABEL: func.func @spmm_grad(%indptr: tensor<4xi32>, %indices: tensor<5xi32>, %values: tensor<5xf32>, %dense: tensor<6x2xf32>, %0: tensor<3x2xf32>) -> (tensor<5xf32>, tensor<6x2xf32>) {
// CHECK-NEXT:    %[[DV:.*]] = tgraph.sddmm %indptr, %indices, %0, %dense sparse_shape = [3, 6] : (tensor<4xi32>, tensor<5xi32>, tensor<3x2xf32>, tensor<6x2xf32>) -> tensor<5xf32>
// CHECK-NEXT:    %[[DD:.*]] = tgraph.spmm_transpose %indptr, %indices, %values, %0 sparse_shape = [3, 6] : (tensor<4xi32>, tensor<5xi32>, tensor<5xf32>, tensor<3x2xf32>) -> tensor<6x2xf32>
// CHECK-NEXT:    func.return %[[DV]], %[[DD]] : tensor<5xf32>, tensor<6x2xf32>

// JVP-LABEL: func.func @spmm_jvp(%indptr: tensor<4xi32>, %indices: tensor<5xi32>, %values: tensor<5xf32>, %dense: tensor<6x2xf32>, %t_values: tensor<5xf32>, %t_dense: tensor<6x2xf32>) -> (tensor<3x2xf32>, tensor<3x2xf32>) {
// JVP-NEXT:    %y = tgraph.spmm %indptr, %indices, %values, %dense
// JVP-NEXT:    %[[A:.*]] = tgraph.spmm %indptr, %indices, %values, %t_dense
// JVP-NEXT:    %[[B:.*]] = tgraph.spmm %indptr, %indices, %t_values, %dense
// JVP-NEXT:    %[[T:.*]] = tgraph.add %[[A]], %[[B]]
// JVP-NEXT:    func.return %y, %[[T]]
