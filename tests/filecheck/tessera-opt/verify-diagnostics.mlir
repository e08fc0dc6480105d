// RUN: not tessera-opt %s --split-input-file --verify-diagnostics 2>&1 | filecheck %s

// A diagnostic that the input does not expect, an expected one that is not
// produced, and one on another line than expected all fail the run.

func.func @unexpected(%a: tensor<4x8xf32>, %b: tensor<9x16xf32>) {
  %r = tgraph.matmul %a, %b : (tensor<4x8xf32>, tensor<9x16xf32>) -> tensor<4x16xf32>
  func.return
}
// CHECK: verify-diagnostics.mlir:7:3: error: unexpected error: tgraph.matmul: inner dimensions differ

// -----

func.func @missing(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{something that never happens}}
  func.return %x : tensor<4xf32>
}
// CHECK: verify-diagnostics.mlir:15:1: error: expected error "something that never happens" at line 16 was not produced

// -----

func.func @wrong_line(%a: tensor<4x8xf32>, %b: tensor<9x16xf32>) {
  // expected-error @+2 {{inner dimensions differ}}
  %r = tgraph.matmul %a, %b : (tensor<4x8xf32>, tensor<9x16xf32>) -> tensor<4x16xf32>
  func.return
}
// CHECK: verify-diagnostics.mlir:24:3: error: unexpected error: tgraph.matmul: inner dimensions differ
// CHECK: verify-diagnostics.mlir:23:1: error: expected error "inner dimensions differ" at line 25 was not produced
