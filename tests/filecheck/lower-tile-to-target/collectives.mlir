// RUN: tessera-opt %s -p lower-tile-to-target | filecheck %s
// RUN: tessera-opt %s -p lower-tile-to-target -t ptx | filecheck %s --check-prefix=PTX

// Host collectives map 1:1 to the ttarget ops of the same name (operands, properties and
// the host function's tessera.mesh unchanged); a mesh coordinate passed to a kernel is an
// index (.u64) parameter. Host ops are not PTX.

ttile.kernel @slice(%o: memref<4x8xf32>, %x: memref<4x16xf32>, %c: index) group_size = 32 {
  %i = ttile.linear_id
  %n = arith.constant 32 : index
  %m = arith.cmpi ult, %i, %n : index
  %w = arith.constant 8 : index
  %col = arith.remui %i, %w : index
  %row = arith.divui %i, %w : index
  %off = arith.muli %c, %w : index
  %src = arith.addi %col, %off : index
  %v = ttile.load %x[%row, %src] mask %m : memref<4x16xf32> -> f32
  ttile.store %v, %o[%row, %col] mask %m : f32, memref<4x8xf32>
  ttile.return
}
func.func @host(%x: memref<4x16xf32>, %p: memref<2xi32>) -> (memref<4x8xf32>, memref<4x16xf32>, memref<8x16xf32>, memref<2x16xf32>, memref<2x32xf32>, memref<2xi32>) attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 2>} {
  %c = ttile.mesh_coord axis = "tp"
  %o = memref.alloc() : memref<4x8xf32>
  ttile.launch @slice(%o, %x, %c) grid = [1, 1, 1] : (memref<4x8xf32>, memref<4x16xf32>, index)
  %a = ttile.all_reduce %x op = "prod" axis = "dp" nondeterministic : memref<4x16xf32> -> memref<4x16xf32>
  %g = ttile.all_gather %x axis = "tp" dim = 0 : memref<4x16xf32> -> memref<8x16xf32>
  %r = ttile.reduce_scatter %x op = "min" axis = "dp" dim = 0 : memref<4x16xf32> -> memref<2x16xf32>
  %t = ttile.all_to_all %x axis = "tp" split_dim = 0 concat_dim = 1 : memref<4x16xf32> -> memref<2x32xf32>
  ttile.send %p axis = "dp" peer = 1 : memref<2xi32>
  %q = ttile.recv axis = "dp" peer = -1 : memref<2xi32>
  func.return %o, %a, %g, %r, %t, %q : memref<4x8xf32>, memref<4x16xf32>, memref<8x16xf32>, memref<2x16xf32>, memref<2x32xf32>, memref<2xi32>
}

// CHECK:      ttarget.func @slice(%{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<u64>)
// CHECK:      func.func @host(%x: memref<4x16xf32>, %p: memref<2xi32>) -> {{.*}} attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 2>} {
// CHECK-NEXT:   %c = ttarget.mesh_coord axis = "tp"
// CHECK-NEXT:   %o = memref.alloc() : memref<4x8xf32>
// CHECK-NEXT:   ttarget.launch @slice(%o, %x, %c) grid = [1, 1, 1] : (memref<4x8xf32>, memref<4x16xf32>, index)
// CHECK-NEXT:   %a = ttarget.all_reduce %x op = "prod" axis = "dp" nondeterministic : memref<4x16xf32> -> memref<4x16xf32>
// CHECK-NEXT:   %g = ttarget.all_gather %x axis = "tp" dim = 0 : memref<4x16xf32> -> memref<8x16xf32>
// CHECK-NEXT:   %r = ttarget.reduce_scatter %x op = "min" axis = "dp" dim = 0 : memref<4x16xf32> -> memref<2x16xf32>
// CHECK-NEXT:   %t = ttarget.all_to_all %x axis = "tp" split_dim = 0 concat_dim = 1 : memref<4x16xf32> -> memref<2x32xf32>
// CHECK-NEXT:   ttarget.send %p axis = "dp" peer = 1 : memref<2xi32>
// CHECK-NEXT:   %q = ttarget.recv axis = "dp" peer = -1 : memref<2xi32>
// CHECK-NEXT:   func.return %o, %a, %g, %r, %t, %q
// CHECK-NOT:  ttile.

// PTX:     .visible .entry slice(
// PTX:     .param .u64 {{.*}}
// PTX-NOT: all_reduce
// PTX-NOT: mesh_coord
