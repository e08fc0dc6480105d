// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// tgraph.matmul_epilogue is the matmul kernel with the epilogue applied to each
// accumulator in registers before the (masked) store: the bias is read at the
// broadcast index, the activation computed in f32, the result cast. bf16 operands use
// the mma.sync kernel, f32 operands the FMA kernel; no other kernel is launched.

func.func @mlp(%x: tensor<40x32xbf16>, %w: tensor<32x24xbf16>, %b: tensor<24xf32>) -> tensor<40x24xbf16> {
  %0 = tgraph.matmul_epilogue %x, %w bias %b activation = "gelu" compute_type = tensor<40x24xf32> : (tensor<40x32xbf16>, tensor<32x24xbf16>, tensor<24xf32>) -> tensor<40x24xbf16>
  func.return %0 : tensor<40x24xbf16>
}
// CHECK:      ttile.kernel @mlp_matmul_0(%[[C:.*]]: memref<40x24xbf16>, %{{.*}}: memref<40x32xbf16>, %{{.*}}: memref<32x24xbf16>, %[[B:.*]]: memref<24xf32>) group_size = 128 {
// CHECK:        ttile.mma
// CHECK:        scf.yield
// CHECK:        %[[OK:.*]] = arith.andi
// CHECK-NEXT:   %[[ACC:.*]] = vector.extract %{{.*}}[0] : f32 from vector<4xf32>
// CHECK-NEXT:   %[[BV:.*]] = ttile.load %[[B]][%[[COL:.*]]] mask %[[OK]] : memref<24xf32> -> f32
// CHECK-NEXT:   %[[Y:.*]] = arith.addf %[[ACC]], %[[BV]] : f32
// CHECK:        math.tanh
// CHECK:        %[[G:.*]] = arith.mulf
// CHECK-NEXT:   %[[R:.*]] = arith.truncf %[[G]] : f32 to bf16
// CHECK-NEXT:   ttile.store %[[R]], %[[C]][%{{.*}}, %[[COL]]] mask %[[OK]] : bf16, memref<40x24xbf16>
// CHECK:      func.func @mlp(%x: memref<40x32xbf16>, %w: memref<32x24xbf16>, %b: memref<24xf32>) -> memref<40x24xbf16> {
// CHECK-NEXT:   %[[OUT:.*]] = memref.alloc() : memref<40x24xbf16>
// CHECK-NEXT:   ttile.launch @mlp_matmul_0(%[[OUT]], %x, %w, %b) grid = [1, 1, 1]
// CHECK-NEXT:   func.return %[[OUT]]

func.func @fma(%x: tensor<30x17xf32>, %w: tensor<17x29xf32>, %b: tensor<30x1xf32>) -> tensor<30x29xf32> {
  %0 = tgraph.matmul_epilogue %x, %w bias %b activation = "relu" : (tensor<30x17xf32>, tensor<17x29xf32>, tensor<30x1xf32>) -> tensor<30x29xf32>
  func.return %0 : tensor<30x29xf32>
}
// CHECK:      ttile.kernel @fma_matmul_0(%[[C:.*]]: memref<30x29xf32>, %{{.*}}: memref<30x17xf32>, %{{.*}}: memref<17x29xf32>, %[[B:.*]]: memref<30x1xf32>) group_size = 256 {
// CHECK:        scf.yield
// CHECK:        %[[ROW:.*]] = arith.addi
// CHECK:        %[[OK:.*]] = arith.andi
// CHECK-NEXT:   %{{.*}} = arith.constant 0 : index
// CHECK-NEXT:   %[[BV:.*]] = ttile.load %[[B]][%[[ROW]], %{{.*}}] mask %[[OK]] : memref<30x1xf32> -> f32
// CHECK-NEXT:   %[[Y:.*]] = arith.addf %{{.*}}, %[[BV]] : f32
// CHECK:        %[[NEG:.*]] = arith.cmpf olt, %[[Y]], %[[Z:.*]] : f32
// CHECK-NEXT:   %[[R:.*]] = arith.select %[[NEG]], %[[Z]], %[[Y]] : f32
// CHECK-NEXT:   ttile.store %[[R]], %[[C]][%[[ROW]], %{{.*}}] mask %[[OK]] : f32, memref<30x29xf32>
// CHECK:      ttile.launch @fma_matmul_0(%{{.*}}, %x, %w, %b) grid = [1, 1, 1]
// CHECK-NOT:  tgraph.
