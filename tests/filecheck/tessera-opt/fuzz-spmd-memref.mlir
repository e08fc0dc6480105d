// RUN: tessera-opt %s -p spmd-partition | filecheck %s

// spmd-partition leaves the per-rank memrefs and indices of a lowered function alone.
func.func @host(%x: memref<8x16xf32>, %y: memref<8x32xbf16>) -> (memref<8x32xbf16>, index) attributes {tessera.mesh = #tessera.mesh<dp = 1, tp = 2>} {
  %a = ttile.all_reduce %y op = "sum" axis = "tp" : memref<8x32xbf16> -> memref<8x32xbf16>
  %c = ttile.mesh_coord axis = "tp"
  func.return %a, %c : memref<8x32xbf16>, index
}
// CHECK: func.func @host(%x: memref<8x16xf32>, %y: memref<8x32xbf16>) -> (memref<8x32xbf16>, index)
// CHECK: ttile.all_reduce %y op = "sum" axis = "tp" {{.*}}: memref<8x32xbf16> -> memref<8x32xbf16>
