// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// Graph IR collectives become host-side ttile ops in the lowered host function, between
// the kernel launches, carrying the collective's properties; the host function keeps the
// tessera.mesh they run on. all_slice is local: this rank's coordinate along the axis
// (ttile.mesh_coord) and a kernel copying that block.

func.func @f(%x: tensor<8x16xf32>, %w: tensor<16x8xf32>, %b: tensor<8x32xf32>, %p: tensor<3xf64>) -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<4x32xf32>, tensor<4x64xf32>, tensor<8x16xf32>, tensor<3xf64>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %g = tgraph.all_gather %y axis = "tp" dim = 1 : (tensor<8x8xf32>) -> tensor<8x16xf32>
  %r = tgraph.all_reduce %x op = "sum" axis = "tp" nondeterministic : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %s = tgraph.reduce_scatter %b op = "max" axis = "tp" dim = 0 : (tensor<8x32xf32>) -> tensor<4x32xf32>
  %t = tgraph.all_to_all %b axis = "tp" split_dim = 0 concat_dim = 1 : (tensor<8x32xf32>) -> tensor<4x64xf32>
  %l = tgraph.all_slice %b axis = "tp" dim = 1 : (tensor<8x32xf32>) -> tensor<8x16xf32>
  tgraph.send %p axis = "tp" peer = 1 : tensor<3xf64>
  %q = tgraph.recv axis = "tp" peer = -1 : tensor<3xf64>
  %e = tgraph.exp %q : (tensor<3xf64>) -> tensor<3xf64>
  func.return %g, %r, %s, %t, %l, %e : tensor<8x16xf32>, tensor<8x16xf32>, tensor<4x32xf32>, tensor<4x64xf32>, tensor<8x16xf32>, tensor<3xf64>
}

// CHECK:      ttile.kernel @f_all_slice_0(%0: memref<8x16xf32>, %1: memref<8x32xf32>, %2: index) group_size = 256 {
// CHECK:        %[[LIN:.*]] = ttile.linear_id
// CHECK:        %[[L32:.*]] = arith.index_cast %[[LIN]] : index to i32
// CHECK:        %[[C32:.*]] = arith.andi %[[L32]], %{{.*}} : i32
// CHECK:        %[[R32:.*]] = arith.shrui %[[L32]], %{{.*}} : i32
// CHECK-NEXT:   %[[ROW:.*]] = arith.index_cast %[[R32]] : i32 to index
// CHECK-NEXT:   %[[COL:.*]] = arith.index_cast %[[C32]] : i32 to index
// CHECK:        %[[OFF:.*]] = arith.muli %2, %{{.*}} : index
// CHECK:        %[[SRC:.*]] = arith.addi %[[COL]], %[[OFF]] : index
// CHECK:        %[[V:.*]] = ttile.load %1[%[[ROW]], %[[SRC]]] mask %{{.*}} : memref<8x32xf32> -> f32
// CHECK:        ttile.store %[[V]], %0[%[[ROW]], %[[COL]]] mask %{{.*}} : f32, memref<8x16xf32>

// CHECK:      func.func @f(%x: memref<8x16xf32>, %w: memref<16x8xf32>, %b: memref<8x32xf32>, %p: memref<3xf64>) -> {{.*}} attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
// CHECK-NEXT:   %[[Y:.*]] = memref.alloc() : memref<8x8xf32>
// CHECK-NEXT:   ttile.launch @f_matmul_0(%[[Y]], %x, %w)
// CHECK-NEXT:   %[[G:.*]] = ttile.all_gather %[[Y]] axis = "tp" dim = 1 : memref<8x8xf32> -> memref<8x16xf32>
// CHECK-NEXT:   %[[R:.*]] = ttile.all_reduce %x op = "sum" axis = "tp" nondeterministic : memref<8x16xf32> -> memref<8x16xf32>
// CHECK-NEXT:   %[[S:.*]] = ttile.reduce_scatter %b op = "max" axis = "tp" dim = 0 : memref<8x32xf32> -> memref<4x32xf32>
// CHECK-NEXT:   %[[T:.*]] = ttile.all_to_all %b axis = "tp" split_dim = 0 concat_dim = 1 : memref<8x32xf32> -> memref<4x64xf32>
// CHECK-NEXT:   %[[C:.*]] = ttile.mesh_coord axis = "tp"
// CHECK-NEXT:   %[[L:.*]] = memref.alloc() : memref<8x16xf32>
// CHECK-NEXT:   ttile.launch @f_all_slice_0(%[[L]], %b, %[[C]]) grid = [1, 1, 1] : (memref<8x16xf32>, memref<8x32xf32>, index)
// CHECK-NEXT:   ttile.send %p axis = "tp" peer = 1 : memref<3xf64>
// CHECK-NEXT:   %[[Q:.*]] = ttile.recv axis = "tp" peer = -1 : memref<3xf64>
// CHECK-NEXT:   %[[E:.*]] = memref.alloc() : memref<3xf64>
// CHECK-NEXT:   ttile.launch @f_exp_0(%[[E]], %[[Q]])
// CHECK-NEXT:   func.return %[[G]], %[[R]], %[[S]], %[[T]], %[[L]], %[[E]] :
