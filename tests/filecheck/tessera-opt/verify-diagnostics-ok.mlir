// RUN: tessera-opt %s --split-input-file --verify-diagnostics -p lower-tile-to-target

// Every form of the line of an expected diagnostic, and a pass error (reported
// at the op and function it names).

func.func @same_line(%a: tensor<4x8xf32>, %b: tensor<9x16xf32>) {
  %r = tgraph.matmul %a, %b : (tensor<4x8xf32>, tensor<9x16xf32>) -> tensor<4x16xf32> // expected-error {{inner dimensions differ}}
  func.return
}

// -----

func.func @below(%a: tensor<4x8xf32>, %b: tensor<9x16xf32>) {
  %r = tgraph.matmul %a, %b : (tensor<4x8xf32>, tensor<9x16xf32>) -> tensor<4x16xf32>
  // expected-error @-1 {{inner dimensions differ}}
  func.return
}

// -----

func.func @above(%a: tensor<4x8xf32>, %b: tensor<9x16xf32>) {
  // expected-error @below {{inner dimensions differ}}
  %r = tgraph.matmul %a, %b : (tensor<4x8xf32>, tensor<9x16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

ttile.kernel @k(%x: memref<4xf32>) group_size = 32 {
  %c0 = arith.constant 0 : index
  %v = ttile.load %x[%c0] : memref<4xf32> -> f32
  // expected-error @+1 {{math.atan in kernel @k: no lowering to Target IR for this op}}
  %y = math.atan %v : f32
  ttile.store %y, %x[%c0] : f32, memref<4xf32>
  ttile.return
}

// -----

func.func @ok(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
