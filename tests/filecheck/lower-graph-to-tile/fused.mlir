// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s
// RUN: tessera-opt %s -p lower-graph-to-tile --print-op-generic | tessera-opt | filecheck %s

// A tgraph.fused op is one kernel. Each lane owns 4 consecutive f32 outputs (8 for
// 16-bit types) when the last dim allows: operands whose rows line up with the output
// are read with one masked vector load, a column operand (last dim 1) with one scalar
// load, splat constants become scalars; the body is evaluated per element in f32 and
// the result written with one vector store. 37*56/4 = 518 lanes = 3 tiles of 256.
func.func @chain(%x: tensor<37x56xf32>, %b: tensor<56xf32>, %s: tensor<37x1xf32>) -> tensor<37x56xbf16> {
  %0 = tgraph.fused %x, %b, %s : (tensor<37x56xf32>, tensor<56xf32>, tensor<37x1xf32>) -> tensor<37x56xbf16> {
  ^bb0(%1: tensor<37x56xf32>, %2: tensor<56xf32>, %3: tensor<37x1xf32>):
    %c = tgraph.constant dense<2.0> : tensor<f32> -> tensor<37x56xf32>
    %4 = tgraph.add %1, %2 : (tensor<37x56xf32>, tensor<56xf32>) -> tensor<37x56xf32>
    %5 = tgraph.mul %4, %3 : (tensor<37x56xf32>, tensor<37x1xf32>) -> tensor<37x56xf32>
    %6 = tgraph.mul %5, %c : (tensor<37x56xf32>, tensor<37x56xf32>) -> tensor<37x56xf32>
    %7 = tgraph.cast %6 : (tensor<37x56xf32>) -> tensor<37x56xbf16>
    tgraph.yield %7 : tensor<37x56xbf16>
  }
  func.return %0 : tensor<37x56xbf16>
}
// CHECK:      ttile.kernel @chain_fused_0(%[[O:.*]]: memref<37x56xbf16>, %[[X:.*]]: memref<37x56xf32>, %[[B:.*]]: memref<56xf32>, %[[S:.*]]: memref<37x1xf32>) group_size = 256 {
// CHECK-NEXT:   %[[LIN:.*]] = ttile.linear_id
// CHECK-NEXT:   %[[W:.*]] = arith.constant 4 : index
// CHECK-NEXT:   %[[BASE:.*]] = arith.muli %[[LIN]], %[[W]] : index
// CHECK-NEXT:   %[[N:.*]] = arith.constant 2072 : index
// CHECK-NEXT:   %[[OK:.*]] = arith.cmpi slt, %[[BASE]], %[[N]] : index
// CHECK-NEXT:   %[[B32:.*]] = arith.index_cast %[[BASE]] : index to i32
// CHECK:        %[[C32:.*]] = arith.remui %[[B32]], %{{.*}} : i32
// CHECK:        %[[R32:.*]] = arith.divui %[[B32]], %{{.*}} : i32
// CHECK-NEXT:   %[[ROW:.*]] = arith.index_cast %[[R32]] : i32 to index
// CHECK-NEXT:   %[[COL:.*]] = arith.index_cast %[[C32]] : i32 to index
// CHECK-NEXT:   %[[XV:.*]] = ttile.load_vector %[[X]][%[[ROW]], %[[COL]]] mask %[[OK]] : memref<37x56xf32> -> vector<4xf32>
// CHECK-COUNT-4: vector.extract %[[XV]]
// CHECK-NEXT:   %[[BV:.*]] = ttile.load_vector %[[B]][%[[COL]]] mask %[[OK]] : memref<56xf32> -> vector<4xf32>
// CHECK-COUNT-4: vector.extract %[[BV]]
// CHECK:        %[[SV:.*]] = ttile.load %[[S]][%[[ROW]], %{{.*}}] mask %[[OK]] : memref<37x1xf32> -> f32
// CHECK-NEXT:   %[[TWO:.*]] = arith.constant 2.000000e+00 : f32
// CHECK-NEXT:   %[[A:.*]] = arith.addf
// CHECK-NEXT:   %[[M:.*]] = arith.mulf %[[A]], %[[SV]] : f32
// CHECK-NEXT:   %[[M2:.*]] = arith.mulf %[[M]], %[[TWO]] : f32
// CHECK-NEXT:   %[[R0:.*]] = arith.truncf %[[M2]] : f32 to bf16
// CHECK-COUNT-3: arith.truncf
// CHECK:        vector.insert %[[R0]], %{{.*}} [0] : bf16 into vector<4xbf16>
// CHECK:        %[[V:.*]] = vector.insert %{{.*}}, %{{.*}} [3] : bf16 into vector<4xbf16>
// CHECK-NEXT:   ttile.store_vector %[[V]], %[[O]][%[[ROW]], %[[COL]]] mask %[[OK]] : vector<4xbf16>, memref<37x56xbf16>
// CHECK-NEXT:   ttile.return
// CHECK:      func.func @chain(%x: memref<37x56xf32>, %b: memref<56xf32>, %s: memref<37x1xf32>) -> memref<37x56xbf16> {
// CHECK-NEXT:   %[[OUT:.*]] = memref.alloc() : memref<37x56xbf16>
// CHECK-NEXT:   ttile.launch @chain_fused_0(%[[OUT]], %x, %b, %s) grid = [3, 1, 1]
// CHECK-NEXT:   func.return %[[OUT]]

// With a trailing reduction the kernel is the reduction's (one warp per row of <= 32
// elements, one 128-lane tile otherwise) and the body gives each reduced element.
func.func @rowsum(%x: tensor<13x20xbf16>, %y: tensor<20xbf16>) -> tensor<13xbf16> {
  %0 = tgraph.fused %x, %y : (tensor<13x20xbf16>, tensor<20xbf16>) -> tensor<13xbf16> {
  ^bb0(%1: tensor<13x20xbf16>, %2: tensor<20xbf16>):
    %3 = tgraph.mul %1, %2 : (tensor<13x20xbf16>, tensor<20xbf16>) -> tensor<13x20xbf16>
    %4 = tgraph.exp %3 : (tensor<13x20xbf16>) -> tensor<13x20xbf16>
    %5 = tgraph.sum %4 axes = [1] : (tensor<13x20xbf16>) -> tensor<13xbf16>
    tgraph.yield %5 : tensor<13xbf16>
  }
  func.return %0 : tensor<13xbf16>
}
// CHECK:      ttile.kernel @rowsum_fused_0(%[[O:.*]]: memref<13xbf16>, %[[X:.*]]: memref<13x20xbf16>, %[[Y:.*]]: memref<20xbf16>) group_size = 32 {
// CHECK:        %[[ACC:.*]] = scf.for
// CHECK:          %[[OK:.*]] = arith.cmpi slt
// CHECK-NEXT:     ttile.load %[[X]][%{{.*}}, %{{.*}}] mask %[[OK]] : memref<13x20xbf16> -> bf16
// CHECK-NEXT:     ttile.load %[[Y]][%{{.*}}] mask %[[OK]] : memref<20xbf16> -> bf16
// CHECK:          arith.mulf
// CHECK:          math.exp
// CHECK:          arith.select %[[OK]]
// CHECK-NEXT:     arith.addf
// CHECK-NEXT:     scf.yield
// CHECK:        %[[T:.*]] = ttile.reduce %[[ACC]] kind = sum scope = warp : f32
// CHECK-NEXT:   %[[TB:.*]] = arith.truncf %[[T]] : f32 to bf16
// CHECK:        ttile.store %[[TB]], %[[O]][%{{.*}}] mask
// CHECK:      ttile.launch @rowsum_fused_0(%{{.*}}, %x, %y) grid = [13, 1, 1]

// A last dim of 3 leaves no vector width: one element per lane. A non-splat constant in
// the body is a constant global passed to the kernel.
func.func @ragged(%x: tensor<5x3xf32>) -> tensor<5x3xf32> {
  %0 = tgraph.fused %x : (tensor<5x3xf32>) -> tensor<5x3xf32> {
  ^bb0(%1: tensor<5x3xf32>):
    %c = tgraph.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32> -> tensor<3xf32>
    %2 = tgraph.mul %1, %c : (tensor<5x3xf32>, tensor<3xf32>) -> tensor<5x3xf32>
    %3 = tgraph.relu %2 : (tensor<5x3xf32>) -> tensor<5x3xf32>
    tgraph.yield %3 : tensor<5x3xf32>
  }
  func.return %0 : tensor<5x3xf32>
}
// CHECK:      memref.global{{.*}}ragged_cst_0
// CHECK:      ttile.kernel @ragged_fused_0(%[[O:.*]]: memref<5x3xf32>, %[[X:.*]]: memref<5x3xf32>, %[[C:.*]]: memref<3xf32>) group_size = 256 {
// CHECK-NOT:    load_vector
// CHECK:        ttile.load %[[X]]
// CHECK-NEXT:   ttile.load %[[C]]
// CHECK-NEXT:   arith.mulf
// CHECK:        arith.cmpf olt
// CHECK-NEXT:   arith.select
// CHECK-NEXT:   ttile.store
// CHECK:      func.func @ragged
// CHECK-NEXT:   %[[G:.*]] = memref.get_global @ragged_cst_0 : memref<3xf32>
// CHECK-NEXT:   %[[OUT:.*]] = memref.alloc() : memref<5x3xf32>
// CHECK-NEXT:   ttile.launch @ragged_fused_0(%[[OUT]], %x, %[[G]]) grid = [1, 1, 1]
// CHECK-NOT:  tgraph.
