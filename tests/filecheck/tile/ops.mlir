// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// Every ttile op in custom syntax; printed back identically, and through the generic form.

ttile.kernel @all_ops(%x: memref<100xf32>, %y: memref<100xf32>, %h: memref<?x64xbf16>, %k: index) group_size = 128 grid = [4, 1, 1] {
  %i = ttile.linear_id
  %t = ttile.tile_id x
  %nt = ttile.num_tiles y
  %l = ttile.local_id
  %gs = ttile.group_size
  %ln = ttile.lane_id
  %w = ttile.warp_id
  %n = arith.constant 100 : index
  %m = arith.cmpi ult, %i, %n : index
  %z = arith.constant 0.000000e+00 : f32
  %v = ttile.load %x[%i] mask %m other %z : memref<100xf32> -> f32
  %v2 = ttile.load %x[%i] : memref<100xf32> -> f32
  ttile.store %v, %y[%i] mask %m : f32, memref<100xf32>
  ttile.store %v2, %y[%i] : f32, memref<100xf32>
  %s = ttile.alloc_shared swizzle = "xor" alignment = 128 : memref<16x64xbf16, #tessera.smem>
  %s2 = ttile.alloc_shared : memref<128xf32, #tessera.smem>
  %vv = ttile.load_vector %x[%i] mask %m : memref<100xf32> -> vector<4xf32>
  ttile.store_vector %vv, %s2[%l] : vector<4xf32>, memref<128xf32, #tessera.smem>
  ttile.copy_async %s2[%l], %x[%i] elems = 4 valid %k : memref<128xf32, #tessera.smem>, memref<100xf32>
  ttile.copy_async %s[%l, %l], %h[%i, %l] elems = 8 : memref<16x64xbf16, #tessera.smem>, memref<?x64xbf16>
  ttile.commit_group
  ttile.wait_group 1
  ttile.barrier
  %sh = ttile.shuffle_xor %v, 16 : f32
  %r = ttile.reduce %v kind = sum scope = group : f32
  %r2 = ttile.reduce %l kind = max scope = warp : index
  %a = arith.constant dense<1.000000e+00> : vector<8xbf16>
  %b = arith.constant dense<1.000000e+00> : vector<4xbf16>
  %c = arith.constant dense<0.000000e+00> : vector<4xf32>
  %d = ttile.mma %a, %b, %c accum = f32 : vector<8xbf16>, vector<4xbf16>, vector<4xf32> -> vector<4xf32>
  %ta = arith.constant dense<1.000000e+00> : vector<4xf32>
  %tb = arith.constant dense<1.000000e+00> : vector<2xf32>
  %td = ttile.mma %ta, %tb, %c accum = f32 : vector<4xf32>, vector<2xf32>, vector<4xf32> -> vector<4xf32>
  ttile.return
}
// CHECK:      ttile.kernel @all_ops(%x: memref<100xf32>, %y: memref<100xf32>, %h: memref<?x64xbf16>, %k: index) group_size = 128 grid = [4, 1, 1] {
// CHECK-NEXT:   %i = ttile.linear_id
// CHECK-NEXT:   %t = ttile.tile_id x
// CHECK-NEXT:   %nt = ttile.num_tiles y
// CHECK-NEXT:   %l = ttile.local_id
// CHECK-NEXT:   %gs = ttile.group_size
// CHECK-NEXT:   %ln = ttile.lane_id
// CHECK-NEXT:   %w = ttile.warp_id
// CHECK:        %v = ttile.load %x[%i] mask %m other %z : memref<100xf32> -> f32
// CHECK-NEXT:   %v2 = ttile.load %x[%i] : memref<100xf32> -> f32
// CHECK-NEXT:   ttile.store %v, %y[%i] mask %m : f32, memref<100xf32>
// CHECK-NEXT:   ttile.store %v2, %y[%i] : f32, memref<100xf32>
// CHECK-NEXT:   %s = ttile.alloc_shared swizzle = "xor" alignment = 128 : memref<16x64xbf16, #tessera.smem>
// CHECK-NEXT:   %s2 = ttile.alloc_shared : memref<128xf32, #tessera.smem>
// CHECK-NEXT:   %vv = ttile.load_vector %x[%i] mask %m : memref<100xf32> -> vector<4xf32>
// CHECK-NEXT:   ttile.store_vector %vv, %s2[%l] : vector<4xf32>, memref<128xf32, #tessera.smem>
// CHECK-NEXT:   ttile.copy_async %s2[%l], %x[%i] elems = 4 valid %k : memref<128xf32, #tessera.smem>, memref<100xf32>
// CHECK-NEXT:   ttile.copy_async %s[%l, %l], %h[%i, %l] elems = 8 : memref<16x64xbf16, #tessera.smem>, memref<?x64xbf16>
// CHECK-NEXT:   ttile.commit_group
// CHECK-NEXT:   ttile.wait_group 1
// CHECK-NEXT:   ttile.barrier
// CHECK-NEXT:   %sh = ttile.shuffle_xor %v, 16 : f32
// CHECK-NEXT:   %r = ttile.reduce %v kind = sum scope = group : f32
// CHECK-NEXT:   %r2 = ttile.reduce %l kind = max scope = warp : index
// CHECK:        %d = ttile.mma %a, %b, %c accum = f32 : vector<8xbf16>, vector<4xbf16>, vector<4xf32> -> vector<4xf32>
// CHECK:        %td = ttile.mma %ta, %tb, %c accum = f32 : vector<4xf32>, vector<2xf32>, vector<4xf32> -> vector<4xf32>
// CHECK-NEXT:   ttile.return
// CHECK-NEXT: }

func.func @host(%x: memref<100xf32>) -> memref<100xf32> {
  %y = memref.alloc() : memref<100xf32>
  %three = arith.constant 3 : index
  %hc = memref.alloc(%three) : memref<?x64xbf16>
  %k = arith.constant 4 : index
  ttile.launch @all_ops(%x, %y, %hc, %k) grid = [4, 1, 1] : (memref<100xf32>, memref<100xf32>, memref<?x64xbf16>, index)
  func.return %y : memref<100xf32>
}
// CHECK-LABEL: func.func @host
// CHECK:       ttile.launch @all_ops(%x, %y, %hc, %k) grid = [4, 1, 1] : (memref<100xf32>, memref<100xf32>, memref<?x64xbf16>, index)

// GENERIC: "ttile.kernel"() <{sym_name = "all_ops", function_type = (memref<100xf32>, memref<100xf32>, memref<?x64xbf16>, index) -> (), group_size = 128 : i64, grid = array<i64: 4, 1, 1>}> ({
// GENERIC: "ttile.tile_id"() <{dim = "x"}> : () -> index
// GENERIC: "ttile.load"(%x, %i, %m, %z) <{operandSegmentSizes = array<i32: 1, 1, 1, 1>}> : (memref<100xf32>, index, i1, f32) -> f32
// GENERIC: "ttile.reduce"(%v) <{kind = "sum", scope = "group"}> : (f32) -> f32
// GENERIC: "ttile.mma"(%a, %b, %c) <{accum = f32}> : (vector<8xbf16>, vector<4xbf16>, vector<4xf32>) -> vector<4xf32>
// GENERIC: "ttile.mma"(%ta, %tb, %c) <{accum = f32}> : (vector<4xf32>, vector<2xf32>, vector<4xf32>) -> vector<4xf32>
// GENERIC: "ttile.launch"(%x, %y, %hc, %k) <{callee = @all_ops, grid = array<i64: 4, 1, 1>}>
