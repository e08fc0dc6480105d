// RUN: tessera-opt %s --split-input-file --verify-diagnostics

// The verifier of tgraph.take_along_axis names the op and what is wrong.

func.func @float_indices(%x: tensor<4x8xf32>, %i: tensor<4x1xf32>) {
  // expected-error @+1 {{tgraph.take_along_axis: indices must be i32 or i64, got f32}}
  %0 = tgraph.take_along_axis %x, %i axis = 1 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  func.return
}

// -----

func.func @int_input(%x: tensor<4x8xi32>, %i: tensor<4x1xi64>) {
  // expected-error @+1 {{tgraph.take_along_axis: input element type i32 is not a float type}}
  %0 = tgraph.take_along_axis %x, %i axis = 1 : (tensor<4x8xi32>, tensor<4x1xi64>) -> tensor<4x1xi32>
  func.return
}

// -----

func.func @rank(%x: tensor<4x8xf32>, %i: tensor<4xi64>) {
  // expected-error @+1 {{tgraph.take_along_axis: indices [4] and input [4, 8] need the same rank (at least 1)}}
  %0 = tgraph.take_along_axis %x, %i axis = 1 : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<4xf32>
  func.return
}

// -----

func.func @axis(%x: tensor<4x8xf32>, %i: tensor<4x1xi64>) {
  // expected-error @+1 {{tgraph.take_along_axis: axis 2 out of range for rank 2}}
  %0 = tgraph.take_along_axis %x, %i axis = 2 : (tensor<4x8xf32>, tensor<4x1xi64>) -> tensor<4x1xf32>
  func.return
}

// -----

func.func @larger(%x: tensor<4x8xf32>, %i: tensor<5x1xi64>) {
  // expected-error @+1 {{tgraph.take_along_axis: indices [5, 1] larger than input [4, 8] in dim 0}}
  %0 = tgraph.take_along_axis %x, %i axis = 1 : (tensor<4x8xf32>, tensor<5x1xi64>) -> tensor<5x1xf32>
  func.return
}

// -----

func.func @result_shape(%x: tensor<4x8xf32>, %i: tensor<4x1xi64>) {
  // expected-error @+1 {{tgraph.take_along_axis: result shape [4] is not the indices' [4, 1]}}
  %0 = tgraph.take_along_axis %x, %i axis = 1 : (tensor<4x8xf32>, tensor<4x1xi64>) -> tensor<4xf32>
  func.return
}

// -----

func.func @elem(%x: tensor<4x8xf32>, %i: tensor<4x1xi64>) {
  // expected-error @+1 {{tgraph.take_along_axis: element types differ: f32, bf16}}
  %0 = tgraph.take_along_axis %x, %i axis = 1 : (tensor<4x8xf32>, tensor<4x1xi64>) -> tensor<4x1xbf16>
  func.return
}
