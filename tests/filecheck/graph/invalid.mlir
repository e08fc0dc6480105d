// RUN: tessera-opt %s --split-input-file --verify-diagnostics
// RUN: not tessera-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=LOC

// Each verifier names the op and the offending dims.
// LOC: invalid.mlir:{{[0-9]+}}:3: error: tgraph.matmul: inner dimensions differ: left K=8, right K=9

func.func @case0(%a: tensor<4x8xf32>, %b: tensor<9x16xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.matmul: inner dimensions differ: left K=8, right K=9}}
  %r = tgraph.matmul %a, %b : (tensor<4x8xf32>, tensor<9x16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @case1(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.matmul: result has shape [4, 15], expected [4, 16]}}
  %r = tgraph.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x15xf32>
  func.return
}

// -----

func.func @case2(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.matmul: tile_shape must be three positive sizes (BM, BN, BK), got [128, 128]}}
  %r = tgraph.matmul %a, %b tile_shape = [128, 128] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @case3(%a: tensor<4x8xf32>, %b: tensor<8x16xbf16>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.matmul: element types differ: f32, bf16}}
  %r = tgraph.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xbf16>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @case4(%a: tensor<4x8xf32>, %b: tensor<3xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.add: shapes [4, 8] and [3] do not broadcast}}
  %r = tgraph.add %a, %b : (tensor<4x8xf32>, tensor<3xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @case5(%a: tensor<4xf32>, %b: tensor<4xf16>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.sub: element types differ: f32, f16}}
  %r = tgraph.sub %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  func.return
}

// -----

func.func @case6(%a: tensor<4x1xf32>, %b: tensor<4xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.mul: result has shape [4], expected [4, 4]}}
  %r = tgraph.mul %a, %b : (tensor<4x1xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @case7(%a: tensor<4xf32>, %b: tensor<4xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.lt: result must have element type i1}}
  %r = tgraph.lt %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @case8(%a: tensor<4xf32>, %b: tensor<4xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.select: condition must have element type i1}}
  %r = tgraph.select %a, %a, %b : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @case9(%a: tensor<4xi32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.exp: needs a floating-point operand, got i32}}
  %r = tgraph.exp %a : (tensor<4xi32>) -> tensor<4xi32>
  func.return
}

// -----

func.func @case10(%a: tensor<4xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.relu: result has shape [5], expected [4]}}
  %r = tgraph.relu %a : (tensor<4xf32>) -> tensor<5xf32>
  func.return
}

// -----

func.func @case11(%a: tensor<4xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.cast: result has shape [5], expected [4]}}
  %r = tgraph.cast %a : (tensor<4xf32>) -> tensor<5xbf16>
  func.return
}

// -----

func.func @case12(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.sum: axis 2 out of range for rank 2}}
  %r = tgraph.sum %a axes = [2] : (tensor<4x8xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @case13(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.max: result has shape [4], expected [4, 1]}}
  %r = tgraph.max %a axes = [1] keepdims : (tensor<4x8xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @case14(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.mean: repeated axis in [0, -2]}}
  %r = tgraph.mean %a axes = [0, -2] : (tensor<4x8xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @case15(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.softmax: axis 3 out of range for rank 2}}
  %r = tgraph.softmax %a axis = 3 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @case16(%a: tensor<4x8xf32>, %w: tensor<4xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.layernorm: weight has shape [4], expected [8]}}
  %r = tgraph.layernorm %a weight %w : tensor<4xf32> eps = 1.0e-05 : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return
}

// -----

func.func @case17(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.rmsnorm: result has shape [4, 4], expected [4, 8]}}
  %r = tgraph.rmsnorm %a eps = 1.0e-05 : tensor<4x8xf32> -> tensor<4x4xf32>
  func.return
}

// -----

func.func @case18(%q: tensor<2x16x8xf16>, %k: tensor<2x16x4xf16>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.flash_attention: head dims differ: q D=8, k D=4}}
  %r = tgraph.flash_attention %q, %k, %q : (tensor<2x16x8xf16>, tensor<2x16x4xf16>, tensor<2x16x8xf16>) -> tensor<2x16x8xf16>
  func.return
}

// -----

func.func @case19(%x: tensor<1x3x8x8xf32>, %w: tensor<4x2x3x3xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.conv2d: channels differ: input C=3, weight C=2}}
  %r = tgraph.conv2d %x, %w stride = [1, 1] padding = [0, 0] : tensor<1x3x8x8xf32>, tensor<4x2x3x3xf32> -> tensor<1x4x6x6xf32>
  func.return
}

// -----

func.func @case19b(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+1 {{tgraph.conv2d: dilation needs two sizes >= 1, got [0, 1]}}
  %r = tgraph.conv2d %x, %w stride = [1, 1] padding = [0, 0] dilation = [0, 1] : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x6x6xf32>
  func.return
}

// -----

func.func @case19c(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+1 {{tgraph.conv2d: kernel 3x3 dilated to 9x9 larger than padded input 8x8}}
  %r = tgraph.conv2d %x, %w stride = [1, 1] padding = [0, 0] dilation = [4, 4] : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x6x6xf32>
  func.return
}

// -----

func.func @case19d(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+1 {{tgraph.conv2d: result has shape [1, 4, 6, 6], expected [1, 4, 4, 4]}}
  %r = tgraph.conv2d %x, %w stride = [1, 1] padding = [0, 0] dilation = [2, 2] : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x6x6xf32>
  func.return
}

// -----

func.func @case19e(%x: tensor<1x6x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+1 {{tgraph.conv2d: channels differ: input C=6 is not groups=3 times weight C=3}}
  %r = tgraph.conv2d %x, %w stride = [1, 1] padding = [0, 0] groups = 3 : tensor<1x6x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x6x6xf32>
  func.return
}

// -----

func.func @case19f(%x: tensor<1x6x8x8xf32>, %w: tensor<5x3x3x3xf32>) {
  // expected-error @+1 {{tgraph.conv2d: output channels O=5 are not a multiple of groups=2}}
  %r = tgraph.conv2d %x, %w stride = [1, 1] padding = [0, 0] groups = 2 : tensor<1x6x8x8xf32>, tensor<5x3x3x3xf32> -> tensor<1x5x6x6xf32>
  func.return
}

// -----

func.func @case19g(%x: tensor<1x6x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+1 {{tgraph.conv2d: groups must be >= 1, got 0}}
  %r = tgraph.conv2d %x, %w stride = [1, 1] padding = [0, 0] groups = 0 : tensor<1x6x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x6x6xf32>
  func.return
}

// -----

func.func @case19h(%x: tensor<1x6x8x8xf32>, %w: tensor<6x1x3x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{tgraph.conv2d: bias has shape [3], expected [6]}}
  %r = tgraph.conv2d %x, %w bias %b : tensor<3xf32> stride = [1, 1] padding = [0, 0] groups = 6 : tensor<1x6x8x8xf32>, tensor<6x1x3x3xf32> -> tensor<1x6x6x6xf32>
  func.return
}

// -----

func.func @case20(%a: tensor<4xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.mse: result has shape [4], expected []}}
  %r = tgraph.mse %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @case21(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.transpose: permutation [0, 0] is not a permutation of 2 dims}}
  %r = tgraph.transpose %a permutation = [0, 0] : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @case22(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.reshape: cannot reshape [4, 8] (32 elements) to [5, 8] (40 elements)}}
  %r = tgraph.reshape %a : (tensor<4x8xf32>) -> tensor<5x8xf32>
  func.return
}

// -----

func.func @case23(%a: tensor<3xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.broadcast: cannot broadcast [3] to [4, 8]}}
  %r = tgraph.broadcast %a : (tensor<3xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @case24(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.slice: dim 1: slice 2:9:1 out of range for size 8}}
  %r = tgraph.slice %a start = [0, 2] limit = [4, 9] stride = [1, 1] : (tensor<4x8xf32>) -> tensor<4x7xf32>
  func.return
}

// -----

func.func @case25(%a: tensor<4x8xf32>, %b: tensor<3x7xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.concat: operand 1 has shape [3, 7], incompatible with [4, 8] outside axis 0}}
  %r = tgraph.concat %a, %b axis = 0 : (tensor<4x8xf32>, tensor<3x7xf32>) -> tensor<7x8xf32>
  func.return
}

// -----

func.func @case26() attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.constant: value has shape [2], result [3]}}
  %r = tgraph.constant dense<[1.0, 2.0]> : tensor<2xf32> -> tensor<3xf32>
  func.return
}

// -----

func.func @case27(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.fft: result must be complex}}
  %r = tgraph.fft %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @case28(%a: tensor<8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.fft2d: needs rank >= 2}}
  %r = tgraph.fft2d %a : (tensor<8xf32>) -> tensor<8xcomplex<f32>>
  func.return
}

// -----

func.func @case29(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.cholesky: needs square matrices, got [4, 8]}}
  %r = tgraph.cholesky %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @case30(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.svd: S has shape [8], expected [4]}}
  %u, %s, %v = tgraph.svd %a : (tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<8xf32>, tensor<4x8xf32>)
  func.return
}

// -----

func.func @case31(%p: tensor<4xi32>, %i: tensor<6xi32>, %v: tensor<6xf32>, %d: tensor<7x3xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.spmm: indptr has shape [4], expected [5]}}
  %r = tgraph.spmm %p, %i, %v, %d sparse_shape = [4, 7] : (tensor<4xi32>, tensor<6xi32>, tensor<6xf32>, tensor<7x3xf32>) -> tensor<4x3xf32>
  func.return
}

// -----

func.func @case32() attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.randn: result must be floating point}}
  %r = tgraph.randn seed = 1 : tensor<4xi32>
  func.return
}

// -----

func.func @case33(%a: tensor<4xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.poisson: result has shape [5], expected [4]}}
  %r = tgraph.poisson %a seed = 1 : (tensor<4xf32>) -> tensor<5xf32>
  func.return
}

// -----

func.func @case34(%a: tensor<4xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.all_reduce: unknown reduction 'avg'; valid: sum, max, min, prod, mean}}
  %r = tgraph.all_reduce %a op = "avg" axis = "dp" : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @case35(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.all_gather: result has shape [4, 16], expected [4, 32]}}
  %r = tgraph.all_gather %a axis = "tp" dim = 1 : (tensor<4x8xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @case36(%a: tensor<4x6xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.reduce_scatter: dim 1 of size 6 does not split over 4 ranks}}
  %r = tgraph.reduce_scatter %a op = "sum" axis = "tp" dim = 1 : (tensor<4x6xf32>) -> tensor<4x1xf32>
  func.return
}

// -----

func.func @case37(%a: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.all_to_all: mesh has no axis 'pp' (axes: dp, tp)}}
  %r = tgraph.all_to_all %a axis = "pp" split_dim = 0 concat_dim = 1 : (tensor<4x8xf32>) -> tensor<2x16xf32>
  func.return
}

// -----

func.func @case38(%a: tensor<4xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.send: peer offset must be non-zero}}
  tgraph.send %a axis = "dp" peer = 0 : tensor<4xf32>
  func.return
}

// -----

func.func @case39() attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  // expected-error @+1 {{tgraph.recv: peer offset must be non-zero}}
  %r = tgraph.recv axis = "dp" peer = 0 : tensor<4xf32>
  func.return
}
