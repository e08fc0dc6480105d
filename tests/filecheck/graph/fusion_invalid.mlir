// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// Verifier errors of tgraph.fused, tgraph.yield and tgraph.matmul_epilogue.

func.func @arg_count(%x: tensor<4xf32>) {
  // expected-error @+1 {{tgraph.fused: body has 2 arguments for 1 operands}}
  %r = tgraph.fused %x : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%0: tensor<4xf32>, %1: tensor<4xf32>):
    tgraph.yield %0 : tensor<4xf32>
  }
  func.return
}

// -----

func.func @arg_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{tgraph.fused: body argument 0 has type tensor<4xf16>, operand has tensor<4xf32>}}
  %r = tgraph.fused %x : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%0: tensor<4xf16>):
    tgraph.yield %0 : tensor<4xf16>
  }
  func.return
}

// -----

func.func @yield_type(%x: tensor<4x2xf32>) {
  // expected-error @+1 {{tgraph.fused: body must yield one value of the result type tensor<4xf32>}}
  %r = tgraph.fused %x : (tensor<4x2xf32>) -> tensor<4xf32> {
  ^bb0(%0: tensor<4x2xf32>):
    %1 = tgraph.exp %0 : (tensor<4x2xf32>) -> tensor<4x2xf32>
    tgraph.yield %1 : tensor<4x2xf32>
  }
  func.return
}

// -----

func.func @not_fusible(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{tgraph.fused: tgraph.matmul cannot be fused; the body may hold elementwise ops, constants, broadcasts, transposes keeping the last dim, slices, concats, reshapes of size-1 dims and one trailing reduction}}
  %r = tgraph.fused %x : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%0: tensor<4x4xf32>):
    %1 = tgraph.matmul %0, %0 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    tgraph.yield %1 : tensor<4x4xf32>
  }
  func.return
}

// -----

func.func @reduction_not_last(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{tgraph.fused: a reduction (tgraph.sum) may only end the body, with its result yielded}}
  %r = tgraph.fused %x : (tensor<4x4xf32>) -> tensor<4xf32> {
  ^bb0(%0: tensor<4x4xf32>):
    %1 = tgraph.sum %0 axes = [1] : (tensor<4x4xf32>) -> tensor<4xf32>
    %2 = tgraph.exp %1 : (tensor<4xf32>) -> tensor<4xf32>
    tgraph.yield %2 : tensor<4xf32>
  }
  func.return
}

// -----

func.func @not_isolated(%x: tensor<4xf32>, %y: tensor<4xf32>) {
  // expected-error @+1 {{Operation using value defined out of its IsolatedFromAbove parent}}
  %r = tgraph.fused %x : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%0: tensor<4xf32>):
    %1 = tgraph.add %0, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    tgraph.yield %1 : tensor<4xf32>
  }
  func.return
}

// -----

func.func @yield_outside(%x: tensor<4xf32>) {
  // expected-error @+1 {{'tgraph.yield' expects parent op to be one of 'tgraph.fused', 'tgraph.fused_reductions'}}
  tgraph.yield %x : tensor<4xf32>
}

// -----

func.func @epi_k(%a: tensor<4x8xf32>, %b: tensor<9x16xf32>) {
  // expected-error @+1 {{tgraph.matmul_epilogue: inner dimensions differ: left K=8, right K=9}}
  %r = tgraph.matmul_epilogue %a, %b : (tensor<4x8xf32>, tensor<9x16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @epi_bias(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<8xf32>) {
  // expected-error @+1 {{tgraph.matmul_epilogue: bias of shape [8] does not broadcast to the product's shape [4, 16]}}
  %r = tgraph.matmul_epilogue %a, %b bias %c : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @epi_bias_type(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<16xf64>) {
  // expected-error @+1 {{tgraph.matmul_epilogue: element types differ: f64, f32}}
  %r = tgraph.matmul_epilogue %a, %b bias %c : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf64>) -> tensor<4x16xf32>
  func.return
}

// -----

// a bias wider than a 16-bit product (only a 16-bit bias of an f32 product widens)
func.func @epi_bias_wider(%a: tensor<4x8xbf16>, %b: tensor<8x16xbf16>, %c: tensor<16xf32>) {
  // expected-error @+1 {{tgraph.matmul_epilogue: element types differ: f32, bf16}}
  %r = tgraph.matmul_epilogue %a, %b bias %c : (tensor<4x8xbf16>, tensor<8x16xbf16>, tensor<16xf32>) -> tensor<4x16xbf16>
  func.return
}

// -----

func.func @epi_residual_shape(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %r: tensor<16xf32>) {
  // expected-error @+1 {{tgraph.matmul_epilogue: residual has shape [16], expected [4, 16]}}
  %y = tgraph.matmul_epilogue %a, %b residual %r : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @epi_residual_type(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %r: tensor<4x16xbf16>) {
  // expected-error @+1 {{tgraph.matmul_epilogue: element types differ: bf16, f32}}
  %y = tgraph.matmul_epilogue %a, %b residual %r : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xbf16>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @epi_operand_count(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %r: tensor<4x16xf32>) {
  // expected-error @+1 {{tgraph.matmul_epilogue: 3 operands and one result, but the type is}}
  %y = tgraph.matmul_epilogue %a, %b residual %r : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @epi_act(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{tgraph.matmul_epilogue: unknown activation 'tanh'; valid: relu, gelu, silu}}
  %r = tgraph.matmul_epilogue %a, %b activation = "tanh" : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @epi_compute(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{tgraph.matmul_epilogue: compute_type has shape [4, 8], expected [4, 16]}}
  %r = tgraph.matmul_epilogue %a, %b compute_type = tensor<4x8xf32> : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xbf16>
  func.return
}

// -----

func.func @epi_int_act(%a: tensor<4x8xi8>, %b: tensor<8x16xi8>) {
  // expected-error @+1 {{tgraph.matmul_epilogue: activation needs a floating-point product}}
  %r = tgraph.matmul_epilogue %a, %b activation = "relu" : (tensor<4x8xi8>, tensor<8x16xi8>) -> tensor<4x16xi8>
  func.return
}
