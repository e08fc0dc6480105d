// RUN: not tessera-opt %s --split-input-file 2>%t.err | filecheck %s
// RUN: filecheck %s --check-prefix=ERR < %t.err
// RUN: not tessera-opt - -o - < %s --split-input-file 2>&1 | filecheck %s --check-prefix=STDIN

// Every chunk is processed, also after a failing one; the outputs are joined by
// '// -----' and the exit status is 1 because one chunk failed.

func.func @first(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tgraph.exp %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: func.func @first
// CHECK-NEXT: tgraph.exp
// CHECK: // -----
// CHECK-NEXT: // -----
// CHECK-NEXT: builtin.module {
// CHECK-NEXT: func.func @third

// -----

func.func @second(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tgraph.bogus %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// The column of an unknown op is the op name's.
// ERR: split-input-file.mlir:22:8: error: Operation tgraph.bogus is not registered
// STDIN: <stdin>:22:8: error: Operation tgraph.bogus is not registered

// -----

func.func @third(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
