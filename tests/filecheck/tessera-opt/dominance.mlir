// RUN: not tessera-opt %s --split-input-file -p lower-graph-to-tile 2>&1 | filecheck %s

// Verification checks SSA dominance and scoping before any pass runs.

func.func @use_before_def(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tgraph.exp %z : (tensor<4xf32>) -> tensor<4xf32>
  %z = tgraph.exp %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: dominance.mlir:6:3: error: 'tgraph.exp' operand #0 (%z) is used before it is defined

// -----

func.func @self_use(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tgraph.add %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: dominance.mlir:15:3: error: 'tgraph.add' operand #1 (%y) is used before it is defined

// -----

func.func @scope(%x: index) -> index {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %x step %c1 {
    %t = arith.addi %i, %i : index
  }
  %u = arith.addi %t, %t : index
  func.return %u : index
}
// CHECK: dominance.mlir:28:19: error: use of undefined value '%t'
