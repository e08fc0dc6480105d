// RUN: tessera-opt %s --split-input-file --verify-diagnostics -p lower-graph-to-tile

// Inputs found by tessera-fuzz that once gave internal errors, hangs or output that did
// not verify: each is now an error at its line and column.

func.func @f(%a: tensor<40x64xbf16>, %b: tensor<64x24xbf16>) -> tensor<40x24xf32> {
  // expected-error @+1 {{tgraph.matmul: tile_shape sizes must be at most 256, got [2147483648, 32, 32]}}
  %0 = tgraph.matmul %a, %b tile_shape = [2147483648, 32, 32] : (tensor<40x64xbf16>, tensor<64x24xbf16>) -> tensor<40x24xf32>
  func.return %0 : tensor<40x24xf32>
}

// -----

// expected-error @+1 {{ttile.kernel @k: grid [1, 2147483648, 1] exceeds the CUDA limits (x <= 2147483647, y and z <= 65535)}}
ttile.kernel @k(%x: memref<4xf32>) group_size = 32 grid = [1, 2147483648, 1] {
  ttile.return
}

// -----

// expected-error @+1 {{Integer value 99999999999999999999999 is out of range for type i64}}
ttile.kernel @k(%x: memref<4xf32>) group_size = 32 grid = [1, 99999999999999999999999, 1] {
  ttile.return
}

// -----

func.func @f(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error @+1 {{out of range}}
  %r = tgraph.conv2d %x, %w stride = [1, 1] padding = [340282366920938463463374607431768211457, 0] : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x6x6xf32>
  func.return %r : tensor<1x4x6x6xf32>
}

// -----

func.func @f() {
  // expected-error @+1 {{integer literal 300 does not fit in i8}}
  %c = arith.constant dense<[1, 300]> : tensor<2xi8>
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{expected a complex literal (re, im)}}
  %c = arith.constant dense<1> : tensor<2xcomplex<f32>>
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{dense literal of 4294967297 elements: at most 4194304 are supported}}
  %a = arith.constant dense<1.0> : vector<4294967297xbf16>
  func.return
}

// -----

// A dynamic size is rejected by name instead of lowered to memref<-6917529027641081856xi8>.
// expected-error @+1 {{lower-graph-to-tile: func.func @f: tensor<?xf32> has a dynamic size; Graph IR is lowered for static shapes only}}
func.func @f(%a: tensor<?xf32>) -> tensor<?xf6E3M2FN> {
  %0 = tgraph.cast %a : (tensor<?xf32>) -> tensor<?xf6E3M2FN>
  func.return %0 : tensor<?xf6E3M2FN>
}

// -----

// expected-error @+1 {{lower-graph-to-tile: func.func @f: tensor<?x4xf32> has a dynamic size}}
func.func @f(%a: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %0 = tgraph.exp %a : (tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %0 : tensor<?x4xf32>
}

// -----

ttarget.func @k() maxntid = 32 {
  // expected-error @+1 {{ttarget.reg: unknown register class 'q99'}}
  %a = ttarget.reg "q99"
  ttarget.ret
}

// -----

// Kernels add eps in f32: an eps beyond f32's range was an internal error.
func.func @f(%x: tensor<6x64xbf16>, %w: tensor<64xbf16>) -> tensor<6x64xbf16> {
  // expected-error @+1 {{tgraph.rmsnorm: eps must be in [0, 3.402823e+38], got 1e+308}}
  %1 = tgraph.rmsnorm %x weight %w : tensor<64xbf16> eps = 1.0e308 : tensor<6x64xbf16> -> tensor<6x64xbf16>
  func.return %1 : tensor<6x64xbf16>
}
