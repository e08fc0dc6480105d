// RUN: tessera-opt %s -p algebraic-simplify | filecheck %s
// RUN: tessera-opt %s -p 'algebraic-simplify{fold-transposes=false}' | filecheck %s --check-prefix=NOFOLD
// RUN: tessera-opt %s -p 'algebraic-simplify{fold-transpose-into-matmul=false}' | filecheck %s --check-prefix=NOMM

// transpose(transpose(x)) composes; the identity disappears.
func.func @twice(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = tgraph.transpose %x permutation = [2, 0, 1] : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %1 = tgraph.transpose %0 permutation = [1, 2, 0] : (tensor<4x2x3xf32>) -> tensor<2x3x4xf32>
  func.return %1 : tensor<2x3x4xf32>
}
// CHECK-LABEL: func.func @twice
// CHECK-NEXT:    func.return %x : tensor<2x3x4xf32>
// NOFOLD-LABEL: func.func @twice
// NOFOLD:         tgraph.transpose
// NOFOLD:         tgraph.transpose

// Composition: result dim i of the outer op is dim p[q[i]] of x.
func.func @compose(%x: tensor<2x3x4xf32>) -> tensor<3x2x4xf32> {
  %0 = tgraph.transpose %x permutation = [2, 0, 1] : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %1 = tgraph.transpose %0 permutation = [2, 1, 0] : (tensor<4x2x3xf32>) -> tensor<3x2x4xf32>
  func.return %1 : tensor<3x2x4xf32>
}
// CHECK-LABEL: func.func @compose
// CHECK-NEXT:    %0 = tgraph.transpose %x permutation = [1, 0, 2] : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
// CHECK-NEXT:    func.return %0

func.func @identity(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = tgraph.transpose %x permutation = [0, 1] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}
// CHECK-LABEL: func.func @identity
// CHECK-NEXT:    func.return %x

// A transpose of the last two dims folds into the matmul's flags (and toggles them).
func.func @into_matmul(%a: tensor<2x8x4xf32>, %b: tensor<2x16x8xf32>) -> tensor<2x4x16xf32> {
  %at = tgraph.transpose %a permutation = [0, 2, 1] : (tensor<2x8x4xf32>) -> tensor<2x4x8xf32>
  %bt = tgraph.transpose %b permutation = [0, 2, 1] : (tensor<2x16x8xf32>) -> tensor<2x8x16xf32>
  %c = tgraph.matmul %at, %bt tile_shape = [64, 64, 32] : (tensor<2x4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  func.return %c : tensor<2x4x16xf32>
}
// CHECK-LABEL: func.func @into_matmul
// CHECK-NEXT:    %c = tgraph.matmul %a, %b transpose_lhs transpose_rhs tile_shape = [64, 64, 32] : (tensor<2x8x4xf32>, tensor<2x16x8xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT:    func.return %c
// NOMM-LABEL: func.func @into_matmul
// NOMM:         tgraph.transpose %a
// NOMM:         tgraph.matmul %at, %bt tile_shape

func.func @toggle(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %bt = tgraph.transpose %b permutation = [1, 0] : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %c = tgraph.matmul %a, %bt transpose_rhs : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  func.return %c : tensor<4x16xf32>
}
// CHECK-LABEL: func.func @toggle
// CHECK-NEXT:    %c = tgraph.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>

// A transpose that also moves batch dims is not a matmul flag.
func.func @batch_perm(%a: tensor<2x3x4xf32>, %b: tensor<3x4x5xf32>) -> tensor<3x2x5xf32> {
  %at = tgraph.transpose %a permutation = [1, 0, 2] : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %c = tgraph.matmul %at, %b : (tensor<3x2x4xf32>, tensor<3x4x5xf32>) -> tensor<3x2x5xf32>
  func.return %c : tensor<3x2x5xf32>
}
// CHECK-LABEL: func.func @batch_perm
// CHECK-NEXT:    %at = tgraph.transpose %a permutation = [1, 0, 2]
// CHECK-NEXT:    %c = tgraph.matmul %at, %b :
