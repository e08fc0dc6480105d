// RUN: tessera-opt %s --split-input-file --verify-diagnostics
// RUN: not tessera-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=LOC

// Each ttile verifier names the op and what is wrong.
// LOC: invalid.mlir:{{[0-9]+}}:1: error: ttile.kernel @k: group_size must be in [1, 1024], got 2048

// expected-error @+1 {{ttile.kernel @k: group_size must be in [1, 1024], got 2048}}
ttile.kernel @k(%x: memref<4xf32>) group_size = 2048 {
  ttile.return
}

// -----

// expected-error @+1 {{ttile.kernel @k: grid must be three sizes >= 1, got [1, 0, 1]}}
ttile.kernel @k(%x: memref<4xf32>) group_size = 32 grid = [1, 0, 1] {
  ttile.return
}

// -----

// expected-error @+1 {{ttile.kernel @k: argument 0 is a shared-memory memref; arguments live in global memory}}
ttile.kernel @k(%x: memref<4xf32, #tessera.smem>) group_size = 32 {
  ttile.return
}

// -----

// expected-error @+1 {{ttile.kernel @k: argument 0 has type tensor<4xf32>; expected a memref or a scalar}}
ttile.kernel @k(%x: tensor<4xf32>) group_size = 32 {
  ttile.return
}

// -----

func.func @f() {
  // expected-error @+1 {{ttile.tile_id: must be inside a ttile.kernel}}
  %t = ttile.tile_id x
  func.return
}

// -----

ttile.kernel @k(%x: memref<4x4xf32>) group_size = 32 {
  %i = ttile.local_id
  // expected-error @+1 {{ttile.load: memref of rank 2 needs 2 indices, got 1}}
  %v = ttile.load %x[%i] : memref<4x4xf32> -> f32
  ttile.return
}

// -----

ttile.kernel @k(%x: memref<4xf32>) group_size = 32 {
  %i = ttile.local_id
  %z = arith.constant 0.0 : f32
  // expected-error @+1 {{ttile.load: 'other' needs a mask}}
  %v = ttile.load %x[%i] other %z : memref<4xf32> -> f32
  ttile.return
}

// -----

ttile.kernel @k(%x: memref<4xf32>) group_size = 32 {
  %i = ttile.local_id
  %z = arith.constant 0 : i32
  // expected-error @+1 {{ttile.store: value type i32 differs from the element type f32}}
  ttile.store %z, %x[%i] : i32, memref<4xf32>
  ttile.return
}

// -----

ttile.kernel @k(%x: memref<64xf32>) group_size = 32 {
  %i = ttile.local_id
  // expected-error @+1 {{ttile.load_vector: a vector access must be 1, 2, 4, 8 or 16 bytes, got 8 x f32}}
  %v = ttile.load_vector %x[%i] : memref<64xf32> -> vector<8xf32>
  ttile.return
}

// -----

ttile.kernel @k(%x: memref<64xf32>) group_size = 32 {
  %i = ttile.local_id
  %s = ttile.alloc_shared : memref<64xf32, #tessera.smem>
  // expected-error @+1 {{ttile.copy_async: elems = 3 of f32 is 12 bytes; a copy must be 4, 8 or 16 bytes}}
  ttile.copy_async %s[%i], %x[%i] elems = 3 : memref<64xf32, #tessera.smem>, memref<64xf32>
  ttile.return
}

// -----

ttile.kernel @k(%x: memref<64xf32>) group_size = 32 {
  %i = ttile.local_id
  %s = ttile.alloc_shared : memref<64xf32, #tessera.smem>
  // expected-error @+1 {{ttile.copy_async: source must be a global-memory memref}}
  ttile.copy_async %s[%i], %s[%i] elems = 4 : memref<64xf32, #tessera.smem>, memref<64xf32, #tessera.smem>
  ttile.return
}

// -----

ttile.kernel @k() group_size = 32 {
  // expected-error @+1 {{ttile.alloc_shared: swizzle "xor" needs rank >= 2 and rows of a multiple of 16 bytes, got shape [8, 4] of f16}}
  %s = ttile.alloc_shared swizzle = "xor" : memref<8x4xf16, #tessera.smem>
  ttile.return
}

// -----

ttile.kernel @k() group_size = 32 {
  // expected-error @+1 {{ttile.alloc_shared: result must be in shared memory (memory space #tessera.smem)}}
  %s = ttile.alloc_shared : memref<8x4xf16>
  ttile.return
}

// -----

ttile.kernel @k() group_size = 32 {
  // expected-error @+1 {{ttile.alloc_shared: alignment must be a power of two, got 24}}
  %s = ttile.alloc_shared alignment = 24 : memref<8x8xf16, #tessera.smem>
  ttile.return
}

// -----

ttile.kernel @k() group_size = 32 {
  %v = arith.constant 1.0 : f32
  // expected-error @+1 {{ttile.shuffle_xor: offset must be in [1, 31], got 32}}
  %r = ttile.shuffle_xor %v, 32 : f32
  ttile.return
}

// -----

ttile.kernel @k() group_size = 32 {
  %v = arith.constant dense<1.0> : vector<2xf32>
  // expected-error @+1 {{ttile.shuffle_xor: expected an integer or float scalar, got vector<2xf32>}}
  %r = ttile.shuffle_xor %v, 1 : vector<2xf32>
  ttile.return
}

// -----

ttile.kernel @k() group_size = 32 {
  %a = arith.constant dense<1.0> : vector<8xf32>
  %b = arith.constant dense<1.0> : vector<4xbf16>
  %c = arith.constant dense<0.0> : vector<4xf32>
  // expected-error @+1 {{ttile.mma: a must be vector<8xbf16>, vector<8xf16>, vector<16xf8E4M3FN>, vector<16xf8E5M2> or vector<4xf32> (tf32), got vector<8xf32>}}
  %d = ttile.mma %a, %b, %c accum = f32 : vector<8xf32>, vector<4xbf16>, vector<4xf32> -> vector<4xf32>
  ttile.return
}

// -----

ttile.kernel @k() group_size = 32 {
  %a = arith.constant dense<1.0> : vector<4xf32>
  %b = arith.constant dense<1.0> : vector<4xf32>
  %c = arith.constant dense<0.0> : vector<4xf32>
  // expected-error @+1 {{ttile.mma: b must be vector<2xf32>, got vector<4xf32>}}
  %d = ttile.mma %a, %b, %c accum = f32 : vector<4xf32>, vector<4xf32>, vector<4xf32> -> vector<4xf32>
  ttile.return
}

// -----

ttile.kernel @k() group_size = 32 {
  %a = arith.constant dense<1.0> : vector<8xbf16>
  %b = arith.constant dense<1.0> : vector<4xf16>
  %c = arith.constant dense<0.0> : vector<4xf32>
  // expected-error @+1 {{ttile.mma: b must be vector<4xbf16>, got vector<4xf16>}}
  %d = ttile.mma %a, %b, %c accum = f32 : vector<8xbf16>, vector<4xf16>, vector<4xf32> -> vector<4xf32>
  ttile.return
}

// -----

ttile.kernel @k() group_size = 32 {
  %a = arith.constant dense<1.0> : vector<8xbf16>
  %b = arith.constant dense<1.0> : vector<4xbf16>
  %c = arith.constant dense<0.0> : vector<4xf32>
  // expected-error @+1 {{ttile.mma: accum must be f32, got f16}}
  %d = ttile.mma %a, %b, %c accum = f16 : vector<8xbf16>, vector<4xbf16>, vector<4xf32> -> vector<4xf32>
  ttile.return
}

// -----

ttile.kernel @k(%x: memref<4xf32>) group_size = 32 {
  ttile.return
}
func.func @f(%x: memref<4xf32>, %n: index) {
  // expected-error @+1 {{ttile.launch: kernel @k takes 1 arguments, got 2}}
  ttile.launch @k(%x, %n) grid = [1, 1, 1] : (memref<4xf32>, index)
  func.return
}

// -----

ttile.kernel @k(%x: memref<4xf32>) group_size = 32 {
  ttile.return
}
func.func @f(%x: memref<8xf32>) {
  // expected-error @+1 {{ttile.launch: argument 0 has type memref<8xf32>, kernel @k expects memref<4xf32>}}
  ttile.launch @k(%x) grid = [1, 1, 1] : (memref<8xf32>)
  func.return
}

// -----

func.func @f(%x: memref<8xf32>) {
  // expected-error @+1 {{ttile.launch: kernel @nope not found}}
  ttile.launch @nope(%x) grid = [1, 1, 1] : (memref<8xf32>)
  func.return
}

// -----

func.func @g() {
  func.return
}
func.func @f(%x: memref<8xf32>) {
  // expected-error @+1 {{ttile.launch: @g is not a ttile.kernel}}
  ttile.launch @g(%x) grid = [1, 1, 1] : (memref<8xf32>)
  func.return
}

// -----

ttile.kernel @k() group_size = 32 {
  // expected-error @+1 {{ttile.alloc_shared: swizzle "xor" needs rank >= 2 and rows of a multiple of 16 bytes, got shape [8, 4] of complex<f32>}}
  %s = ttile.alloc_shared swizzle = "xor" : memref<8x4xcomplex<f32>, #tessera.smem>
  ttile.return
}
