// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// The ttarget host-side collectives (what lower-tile-to-target makes of the ttile ones), in
// custom syntax; printed back identically, and through the generic form.

func.func @host(%x: memref<8x16xf32>, %y: memref<8x32xbf16>, %v: memref<3xf64>) -> (memref<8x32xbf16>, memref<16x16xf32>, memref<4x32xbf16>, memref<4x64xbf16>, index, memref<3xf64>) attributes {tessera.mesh = #tessera.mesh<dp = 1, tp = 2>} {
  %a = ttarget.all_reduce %y op = "sum" axis = "tp" : memref<8x32xbf16> -> memref<8x32xbf16>
  %n = ttarget.all_reduce %y op = "max" axis = "dp" nondeterministic : memref<8x32xbf16> -> memref<8x32xbf16>
  %g = ttarget.all_gather %x axis = "tp" dim = 0 : memref<8x16xf32> -> memref<16x16xf32>
  %r = ttarget.reduce_scatter %y op = "mean" axis = "tp" dim = -2 : memref<8x32xbf16> -> memref<4x32xbf16>
  %t = ttarget.all_to_all %y axis = "tp" split_dim = 0 concat_dim = 1 : memref<8x32xbf16> -> memref<4x64xbf16>
  %c = ttarget.mesh_coord axis = "tp"
  ttarget.send %v axis = "tp" peer = 1 : memref<3xf64>
  %w = ttarget.recv axis = "tp" peer = -1 : memref<3xf64>
  func.return %a, %g, %r, %t, %c, %w : memref<8x32xbf16>, memref<16x16xf32>, memref<4x32xbf16>, memref<4x64xbf16>, index, memref<3xf64>
}

// CHECK:      %a = ttarget.all_reduce %y op = "sum" axis = "tp" : memref<8x32xbf16> -> memref<8x32xbf16>
// CHECK-NEXT: %n = ttarget.all_reduce %y op = "max" axis = "dp" nondeterministic : memref<8x32xbf16> -> memref<8x32xbf16>
// CHECK-NEXT: %g = ttarget.all_gather %x axis = "tp" dim = 0 : memref<8x16xf32> -> memref<16x16xf32>
// CHECK-NEXT: %r = ttarget.reduce_scatter %y op = "mean" axis = "tp" dim = -2 : memref<8x32xbf16> -> memref<4x32xbf16>
// CHECK-NEXT: %t = ttarget.all_to_all %y axis = "tp" split_dim = 0 concat_dim = 1 : memref<8x32xbf16> -> memref<4x64xbf16>
// CHECK-NEXT: %c = ttarget.mesh_coord axis = "tp"
// CHECK-NEXT: ttarget.send %v axis = "tp" peer = 1 : memref<3xf64>
// CHECK-NEXT: %w = ttarget.recv axis = "tp" peer = -1 : memref<3xf64>

// GENERIC: "ttarget.all_reduce"(%y) <{op = "sum", axis = "tp"}> : (memref<8x32xbf16>) -> memref<8x32xbf16>
// GENERIC: "ttarget.all_reduce"(%y) <{op = "max", axis = "dp", nondeterministic}>
// GENERIC: "ttarget.all_gather"(%x) <{axis = "tp", dim = 0 : i64}> : (memref<8x16xf32>) -> memref<16x16xf32>
// GENERIC: "ttarget.reduce_scatter"(%y) <{op = "mean", axis = "tp", dim = -2 : i64}>
// GENERIC: "ttarget.all_to_all"(%y) <{axis = "tp", split_dim = 0 : i64, concat_dim = 1 : i64}>
// GENERIC: "ttarget.mesh_coord"() <{axis = "tp"}> : () -> index
// GENERIC: "ttarget.send"(%v) <{axis = "tp", peer = 1 : i64}> : (memref<3xf64>) -> ()
// GENERIC: "ttarget.recv"() <{axis = "tp", peer = -1 : i64}> : () -> memref<3xf64>

// Without a tessera.mesh only element types and ranks are checked.
func.func @no_mesh(%x: memref<8x16xf32>) -> memref<24x16xf32> {
  %g = ttarget.all_gather %x axis = "tp" dim = 0 : memref<8x16xf32> -> memref<24x16xf32>
  func.return %g : memref<24x16xf32>
}
// CHECK: ttarget.all_gather %x axis = "tp" dim = 0 : memref<8x16xf32> -> memref<24x16xf32>
