// RUN: tessera-opt %s --split-input-file --verify-diagnostics
// RUN: not tessera-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=LOC

// Each host-collective verifier names the op and what is wrong.
// LOC: collectives-invalid.mlir:{{[0-9]+}}:3: error: ttile.all_reduce: unknown reduction 'avg'

func.func @f(%x: memref<8x32xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttile.all_reduce: unknown reduction 'avg'; valid: sum, max, min, prod, mean}}
  %a = ttile.all_reduce %x op = "avg" axis = "tp" : memref<8x32xf32> -> memref<8x32xf32>
  func.return
}

// -----

func.func @f(%x: memref<8x32xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttile.all_reduce: result shape 8x16 does not match the expected 8x32}}
  %a = ttile.all_reduce %x op = "sum" axis = "tp" : memref<8x32xf32> -> memref<8x16xf32>
  func.return
}

// -----

func.func @f(%x: memref<8x32xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttile.all_reduce: result element type bf16 differs from the input's f32}}
  %a = ttile.all_reduce %x op = "sum" axis = "tp" : memref<8x32xf32> -> memref<8x32xbf16>
  func.return
}

// -----

func.func @f(%x: memref<8x32xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttile.all_reduce: mesh has no axis 'ep' (axes: tp)}}
  %a = ttile.all_reduce %x op = "sum" axis = "ep" : memref<8x32xf32> -> memref<8x32xf32>
  func.return
}

// -----

func.func @f(%x: memref<?x32xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttile.all_reduce: result type memref<?x32xf32> must have a static shape}}
  %a = ttile.all_reduce %x op = "sum" axis = "tp" : memref<?x32xf32> -> memref<?x32xf32>
  func.return
}

// -----

func.func @f(%x: memref<8x16xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttile.all_gather: result shape 16x16 does not match the expected 8x32}}
  %g = ttile.all_gather %x axis = "tp" dim = 1 : memref<8x16xf32> -> memref<16x16xf32>
  func.return
}

// -----

func.func @f(%x: memref<8x16xf32>) {
  // expected-error @+1 {{ttile.all_gather: result shape 12x16 is not a gather of 8x16 along dim 0}}
  %g = ttile.all_gather %x axis = "tp" dim = 0 : memref<8x16xf32> -> memref<12x16xf32>
  func.return
}

// -----

func.func @f(%x: memref<8x16xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttile.all_gather: dim 2 out of range for rank 2}}
  %g = ttile.all_gather %x axis = "tp" dim = 2 : memref<8x16xf32> -> memref<8x32xf32>
  func.return
}

// -----

func.func @f(%x: memref<7x16xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttile.reduce_scatter: dim 0 of size 7 does not split over 2 ranks}}
  %r = ttile.reduce_scatter %x op = "sum" axis = "tp" dim = 0 : memref<7x16xf32> -> memref<3x16xf32>
  func.return
}

// -----

func.func @f(%x: memref<8x16xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttile.all_to_all: concat_dim -3 out of range for rank 2}}
  %t = ttile.all_to_all %x axis = "tp" split_dim = 0 concat_dim = -3 : memref<8x16xf32> -> memref<4x32xf32>
  func.return
}

// -----

func.func @f(%x: memref<8x16xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttile.all_to_all: result shape 8x16 does not match the expected 4x32}}
  %t = ttile.all_to_all %x axis = "tp" split_dim = 0 concat_dim = 1 : memref<8x16xf32> -> memref<8x16xf32>
  func.return
}

// -----

func.func @f(%x: memref<3xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttile.send: peer offset must be non-zero}}
  ttile.send %x axis = "tp" peer = 0 : memref<3xf32>
  func.return
}

// -----

func.func @f() attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttile.recv: peer offset must be non-zero}}
  %r = ttile.recv axis = "tp" peer = 0 : memref<3xf32>
  func.return
}

// -----

ttile.kernel @k(%x: memref<4xf32>) group_size = 32 {
  // expected-error @+1 {{ttile.all_reduce: must be in a host func.func, not in ttile.kernel}}
  %a = ttile.all_reduce %x op = "sum" axis = "tp" : memref<4xf32> -> memref<4xf32>
  ttile.return
}
