// RUN: tessera-opt %s --split-input-file --verify-diagnostics
// RUN: not tessera-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=LOC

// The ttarget host collectives share the ttile verifiers; each names the op and what is wrong.
// LOC: collectives-invalid.mlir:{{[0-9]+}}:3: error: ttarget.all_reduce: unknown reduction 'avg'

func.func @f(%x: memref<8x32xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttarget.all_reduce: unknown reduction 'avg'; valid: sum, max, min, prod, mean}}
  %a = ttarget.all_reduce %x op = "avg" axis = "tp" : memref<8x32xf32> -> memref<8x32xf32>
  func.return
}

// -----

func.func @f(%x: memref<8x32xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttarget.all_reduce: result shape 8x16 does not match the expected 8x32}}
  %a = ttarget.all_reduce %x op = "sum" axis = "tp" : memref<8x32xf32> -> memref<8x16xf32>
  func.return
}

// -----

func.func @f(%x: memref<8x32xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttarget.all_reduce: result element type bf16 differs from the input's f32}}
  %a = ttarget.all_reduce %x op = "sum" axis = "tp" : memref<8x32xf32> -> memref<8x32xbf16>
  func.return
}

// -----

func.func @f(%x: memref<8x32xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttarget.all_reduce: mesh has no axis 'ep' (axes: tp)}}
  %a = ttarget.all_reduce %x op = "sum" axis = "ep" : memref<8x32xf32> -> memref<8x32xf32>
  func.return
}

// -----

func.func @f(%x: memref<7x16xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttarget.reduce_scatter: dim 0 of size 7 does not split over 2 ranks}}
  %r = ttarget.reduce_scatter %x op = "sum" axis = "tp" dim = 0 : memref<7x16xf32> -> memref<3x16xf32>
  func.return
}

// -----

func.func @f(%x: memref<3xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  // expected-error @+1 {{ttarget.send: peer offset must be non-zero}}
  ttarget.send %x axis = "tp" peer = 0 : memref<3xf32>
  func.return
}
