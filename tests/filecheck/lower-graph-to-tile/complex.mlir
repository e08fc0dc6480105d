// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// Complex elementwise arithmetic (tile_complex): one lane per element loads the
// (real, imaginary) pair of each operand from memref<S x 2 x fT> and computes
// (a + bi)(c + di) = (ac - bd) + (ad + bc)i.

func.func @f(%x: tensor<5xcomplex<f32>>, %y: tensor<5xcomplex<f32>>) -> tensor<5xcomplex<f32>> {
  %0 = tgraph.mul %x, %y : (tensor<5xcomplex<f32>>, tensor<5xcomplex<f32>>) -> tensor<5xcomplex<f32>>
  func.return %0 : tensor<5xcomplex<f32>>
}

// CHECK:      ttile.kernel @f_cmul_0(%[[O:.*]]: memref<5x2xf32>, %[[X:.*]]: memref<5x2xf32>, %[[Y:.*]]: memref<5x2xf32>)
// CHECK:        %[[A:.*]] = ttile.load %[[X]][%{{.*}}, %{{.*}}] mask
// CHECK:        %[[B:.*]] = ttile.load %[[X]]
// CHECK:        %[[C:.*]] = ttile.load %[[Y]]
// CHECK:        %[[D:.*]] = ttile.load %[[Y]]
// CHECK:        %[[AC:.*]] = arith.mulf %[[A]], %[[C]] : f32
// CHECK-NEXT:   %[[BD:.*]] = arith.mulf %[[B]], %[[D]] : f32
// CHECK-NEXT:   %[[RE:.*]] = arith.subf %[[AC]], %[[BD]] : f32
// CHECK-NEXT:   %[[AD:.*]] = arith.mulf %[[A]], %[[D]] : f32
// CHECK-NEXT:   %[[BC:.*]] = arith.mulf %[[B]], %[[C]] : f32
// CHECK-NEXT:   %[[IM:.*]] = arith.addf %[[AD]], %[[BC]] : f32
// CHECK:        ttile.store %[[RE]], %[[O]]
// CHECK:        ttile.store %[[IM]], %[[O]]
// CHECK:      func.func @f(%x: memref<5x2xf32>, %y: memref<5x2xf32>) -> memref<5x2xf32>
// CHECK:        ttile.launch @f_cmul_0
