// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// Every tgraph op, in custom syntax; printed back identically, and through the generic form.

func.func @elementwise(%a: tensor<4x8xf32>, %b: tensor<8xf32>, %c: tensor<4x8xi1>) {
  %0 = tgraph.add %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = tgraph.sub %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %2 = tgraph.mul %a, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = tgraph.div %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %4 = tgraph.pow %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %5 = tgraph.maximum %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %6 = tgraph.minimum %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %7 = tgraph.lt %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  %8 = tgraph.le %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  %9 = tgraph.gt %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  %10 = tgraph.ge %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  %11 = tgraph.eq %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  %12 = tgraph.ne %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  %13 = tgraph.select %c, %a, %b : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %14 = tgraph.neg %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %15 = tgraph.abs %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %16 = tgraph.exp %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %17 = tgraph.log %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %18 = tgraph.sqrt %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %19 = tgraph.rsqrt %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %20 = tgraph.tanh %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %21 = tgraph.relu %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %22 = tgraph.gelu %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %23 = tgraph.silu %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %24 = tgraph.sigmoid %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %25 = tgraph.cast %a : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  %26 = tgraph.cast %a seed = 7 : (tensor<4x8xf32>) -> tensor<4x8xf8E4M3FN, #tessera.policy<f8E4M3FN, accum = f32, rounding = stochastic>>
  func.return
}
// CHECK-LABEL: func.func @elementwise
// CHECK-NEXT: %0 = tgraph.add %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %1 = tgraph.sub %a, %b
// CHECK-NEXT: %2 = tgraph.mul %a, %a
// CHECK-NEXT: %3 = tgraph.div %a, %b
// CHECK-NEXT: %4 = tgraph.pow %a, %b
// CHECK-NEXT: %5 = tgraph.maximum %a, %b
// CHECK-NEXT: %6 = tgraph.minimum %a, %b
// CHECK-NEXT: %7 = tgraph.lt %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
// CHECK-NEXT: %8 = tgraph.le
// CHECK-NEXT: %9 = tgraph.gt
// CHECK-NEXT: %10 = tgraph.ge
// CHECK-NEXT: %11 = tgraph.eq
// CHECK-NEXT: %12 = tgraph.ne
// CHECK-NEXT: %13 = tgraph.select %c, %a, %b : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %14 = tgraph.neg %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %15 = tgraph.abs %a
// CHECK-NEXT: %16 = tgraph.exp %a
// CHECK-NEXT: %17 = tgraph.log %a
// CHECK-NEXT: %18 = tgraph.sqrt %a
// CHECK-NEXT: %19 = tgraph.rsqrt %a
// CHECK-NEXT: %20 = tgraph.tanh %a
// CHECK-NEXT: %21 = tgraph.relu %a
// CHECK-NEXT: %22 = tgraph.gelu %a
// CHECK-NEXT: %23 = tgraph.silu %a
// CHECK-NEXT: %24 = tgraph.sigmoid %a
// CHECK-NEXT: %25 = tgraph.cast %a : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK-NEXT: %26 = tgraph.cast %a seed = 7 : (tensor<4x8xf32>) -> tensor<4x8xf8E4M3FN, #tessera.policy<f8E4M3FN, accum = f32, rounding = stochastic>>
// GENERIC: "tgraph.add"(%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>

func.func @reductions_nn(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %t: tensor<4x8xf32>) {
  %0 = tgraph.sum %x axes = [1] keepdims : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %1 = tgraph.max %x axes = [-1] : (tensor<4x8xf32>) -> tensor<4xf32>
  %2 = tgraph.min %x axes = [] : (tensor<4x8xf32>) -> tensor<f32>
  %3 = tgraph.mean %x axes = [0] : (tensor<4x8xf32>) -> tensor<8xf32>
  %4 = tgraph.softmax %x axis = -1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = tgraph.layernorm %x weight %w : tensor<8xf32> bias %w : tensor<8xf32> eps = 1.000000e-05 : tensor<4x8xf32> -> tensor<4x8xf32>
  %6 = tgraph.rmsnorm %x eps = 1.000000e-06 : tensor<4x8xf32> -> tensor<4x8xf32>
  %7 = tgraph.mse %x, %t : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<f32>
  func.return
}
// CHECK-LABEL: func.func @reductions_nn
// CHECK-NEXT: %0 = tgraph.sum %x axes = [1] keepdims : (tensor<4x8xf32>) -> tensor<4x1xf32>
// CHECK-NEXT: %1 = tgraph.max %x axes = [-1] : (tensor<4x8xf32>) -> tensor<4xf32>
// CHECK-NEXT: %2 = tgraph.min %x axes = [] : (tensor<4x8xf32>) -> tensor<f32>
// CHECK-NEXT: %3 = tgraph.mean %x axes = [0]
// CHECK-NEXT: %4 = tgraph.softmax %x axis = -1
// CHECK-NEXT: %5 = tgraph.layernorm %x weight %w : tensor<8xf32> bias %w : tensor<8xf32> eps = 1.000000e-05 : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %6 = tgraph.rmsnorm %x eps = 1.000000e-06 : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %7 = tgraph.mse %x, %t : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<f32>

func.func @linalg(%a: tensor<2x64x32xbf16>, %b: tensor<32x16xbf16>, %q: tensor<2x4x16x8xf16>,
                  %img: tensor<1x3x8x8xf32>, %k: tensor<4x3x3x3xf32>, %bias: tensor<4xf32>,
                  %dk: tensor<6x1x3x3xf32>, %db: tensor<6xf32>) {
  %0 = tgraph.matmul %a, %b tile_shape = [128, 128, 64] : (tensor<2x64x32xbf16>, tensor<32x16xbf16>) -> tensor<2x64x16xf32>
  %1 = tgraph.matmul %b, %b transpose_lhs : (tensor<32x16xbf16>, tensor<32x16xbf16>) -> tensor<16x16xbf16>
  %2 = tgraph.flash_attention %q, %q, %q scale = 5.000000e-01 causal : (tensor<2x4x16x8xf16>, tensor<2x4x16x8xf16>, tensor<2x4x16x8xf16>) -> tensor<2x4x16x8xf16>
  %3 = tgraph.conv2d %img, %k bias %bias : tensor<4xf32> stride = [1, 1] padding = [1, 1] : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x8x8xf32>
  %4 = tgraph.conv2d %img, %k stride = [2, 1] padding = [2, 0] dilation = [2, 3] : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x4x2xf32>
  %5 = tgraph.conv2d %img, %dk bias %db : tensor<6xf32> stride = [1, 1] padding = [1, 1] groups = 3 : tensor<1x3x8x8xf32>, tensor<6x1x3x3xf32> -> tensor<1x6x8x8xf32>
  %6 = tgraph.conv2d %img, %dk stride = [2, 2] padding = [0, 0] dilation = [2, 2] groups = 3 : tensor<1x3x8x8xf32>, tensor<6x1x3x3xf32> -> tensor<1x6x2x2xf32>
  %7 = tgraph.conv2d %img, %k stride = [1, 1] padding = [0, 0] groups = 1 : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x6x6xf32>
  func.return
}
// CHECK-LABEL: func.func @linalg
// CHECK-NEXT: %0 = tgraph.matmul %a, %b tile_shape = [128, 128, 64] : (tensor<2x64x32xbf16>, tensor<32x16xbf16>) -> tensor<2x64x16xf32>
// CHECK-NEXT: %1 = tgraph.matmul %b, %b transpose_lhs
// CHECK-NEXT: %2 = tgraph.flash_attention %q, %q, %q scale = 5.000000e-01 causal
// CHECK-NEXT: %3 = tgraph.conv2d %img, %k bias %bias : tensor<4xf32> stride = [1, 1] padding = [1, 1] :
// CHECK-NEXT: %4 = tgraph.conv2d %img, %k stride = [2, 1] padding = [2, 0] dilation = [2, 3] : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x4x2xf32>
// CHECK-NEXT: %5 = tgraph.conv2d %img, %dk bias %db : tensor<6xf32> stride = [1, 1] padding = [1, 1] groups = 3 : tensor<1x3x8x8xf32>, tensor<6x1x3x3xf32> -> tensor<1x6x8x8xf32>
// CHECK-NEXT: %6 = tgraph.conv2d %img, %dk stride = [2, 2] padding = [0, 0] dilation = [2, 2] groups = 3 : tensor<1x3x8x8xf32>, tensor<6x1x3x3xf32> -> tensor<1x6x2x2xf32>
// CHECK-NEXT: %7 = tgraph.conv2d %img, %k stride = [1, 1] padding = [0, 0] groups = 1 : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x6x6xf32>

func.func @shapes(%x: tensor<4x8xf32>, %v: tensor<8xf32>) {
  %0 = tgraph.transpose %x permutation = [1, 0] : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %1 = tgraph.reshape %x : (tensor<4x8xf32>) -> tensor<2x16xf32>
  %2 = tgraph.broadcast %v : (tensor<8xf32>) -> tensor<3x8xf32>
  %3 = tgraph.slice %x start = [0, 2] limit = [4, 8] stride = [1, 2] : (tensor<4x8xf32>) -> tensor<4x3xf32>
  %4 = tgraph.concat %x, %x axis = 0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %5 = tgraph.constant dense<2.500000e+00> : tensor<f32> -> tensor<4x8xbf16>
  %6 = tgraph.constant dense<[1, 2]> : tensor<2xi32> -> tensor<2xi32>
  func.return
}
// CHECK-LABEL: func.func @shapes
// CHECK-NEXT: %0 = tgraph.transpose %x permutation = [1, 0] : (tensor<4x8xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: %1 = tgraph.reshape %x : (tensor<4x8xf32>) -> tensor<2x16xf32>
// CHECK-NEXT: %2 = tgraph.broadcast %v : (tensor<8xf32>) -> tensor<3x8xf32>
// CHECK-NEXT: %3 = tgraph.slice %x start = [0, 2] limit = [4, 8] stride = [1, 2]
// CHECK-NEXT: %4 = tgraph.concat %x, %x axis = 0
// CHECK-NEXT: %5 = tgraph.constant dense<2.500000e+00> : tensor<f32> -> tensor<4x8xbf16>
// CHECK-NEXT: %6 = tgraph.constant dense<[1, 2]> : tensor<2xi32> -> tensor<2xi32>

func.func @science(%x: tensor<4x8xf32>, %s: tensor<4x4xf64>, %ip: tensor<5xi32>, %ix: tensor<6xi32>,
                   %vals: tensor<6xf32>, %d: tensor<7x3xf32>) {
  %0 = tgraph.fft %x : (tensor<4x8xf32>) -> tensor<4x8xcomplex<f32>>
  %1 = tgraph.fft2d %x inverse : (tensor<4x8xf32>) -> tensor<4x8xcomplex<f32>>
  %2 = tgraph.cholesky %s : (tensor<4x4xf64>) -> tensor<4x4xf64>
  %3, %4, %5 = tgraph.svd %x : (tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4xf32>, tensor<4x8xf32>)
  %6 = tgraph.spmm %ip, %ix, %vals, %d sparse_shape = [4, 7] : (tensor<5xi32>, tensor<6xi32>, tensor<6xf32>, tensor<7x3xf32>) -> tensor<4x3xf32>
  %7 = tgraph.randn seed = 42 : tensor<4x8xf32>
  %8 = tgraph.randn seed = 42 offset = 32 : tensor<4x8xbf16>
  %9 = tgraph.poisson %x seed = 1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK-LABEL: func.func @science
// CHECK-NEXT: %0 = tgraph.fft %x : (tensor<4x8xf32>) -> tensor<4x8xcomplex<f32>>
// CHECK-NEXT: %1 = tgraph.fft2d %x inverse
// CHECK-NEXT: %2 = tgraph.cholesky %s
// CHECK-NEXT: %3, %4, %5 = tgraph.svd %x : (tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4xf32>, tensor<4x8xf32>)
// CHECK-NEXT: %6 = tgraph.spmm %ip, %ix, %vals, %d sparse_shape = [4, 7]
// CHECK-NEXT: %7 = tgraph.randn seed = 42 : tensor<4x8xf32>
// CHECK-NEXT: %8 = tgraph.randn seed = 42 offset = 32 : tensor<4x8xbf16>
// CHECK-NEXT: %9 = tgraph.poisson %x seed = 1

func.func @collectives(%x: tensor<4x8xf32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4>} {
  %0 = tgraph.all_reduce %x op = "sum" axis = "dp" : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tgraph.all_reduce %x op = "max" axis = "tp" nondeterministic : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tgraph.all_gather %x axis = "tp" dim = 1 : (tensor<4x8xf32>) -> tensor<4x32xf32>
  %3 = tgraph.reduce_scatter %x op = "sum" axis = "tp" dim = 1 : (tensor<4x8xf32>) -> tensor<4x2xf32>
  %4 = tgraph.all_to_all %x axis = "dp" split_dim = 0 concat_dim = 1 : (tensor<4x8xf32>) -> tensor<2x16xf32>
  %6 = tgraph.all_slice %x axis = "tp" dim = 1 : (tensor<4x8xf32>) -> tensor<4x2xf32>
  tgraph.send %x axis = "dp" peer = 1 : tensor<4x8xf32>
  %5 = tgraph.recv axis = "dp" peer = -1 : tensor<4x8xf32>
  func.return
}
// CHECK-LABEL: func.func @collectives
// CHECK-NEXT: %0 = tgraph.all_reduce %x op = "sum" axis = "dp" : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %1 = tgraph.all_reduce %x op = "max" axis = "tp" nondeterministic
// CHECK-NEXT: %2 = tgraph.all_gather %x axis = "tp" dim = 1 : (tensor<4x8xf32>) -> tensor<4x32xf32>
// CHECK-NEXT: %3 = tgraph.reduce_scatter %x op = "sum" axis = "tp" dim = 1 : (tensor<4x8xf32>) -> tensor<4x2xf32>
// CHECK-NEXT: %4 = tgraph.all_to_all %x axis = "dp" split_dim = 0 concat_dim = 1
// CHECK-NEXT: %5 = tgraph.all_slice %x axis = "tp" dim = 1 : (tensor<4x8xf32>) -> tensor<4x2xf32>
// CHECK-NEXT: tgraph.send %x axis = "dp" peer = 1 : tensor<4x8xf32>
// CHECK-NEXT: %6 = tgraph.recv axis = "dp" peer = -1 : tensor<4x8xf32>
