// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// tgraph.adamw_update and tgraph.sgd_update: one multi-tensor kernel per launch, its
// operands the hyper tensor and, per tensor, flat views of the updated buffers then the
// gradient. A tile finds its tensor by comparing its tile id with the tensors' first
// tiles (scf.if), reads 16-byte vectors (the 4x8 tensor: 8 vectors of 4) and a scalar tail
// (the 3-element tensor: one lane, three masked scalar updates). Donated arguments
// (tessera.donate) are updated in place and returned as they are; without donation the
// updated operands are copied first and the update writes the copies.

func.func @step(%p0: tensor<4x8xf32>, %p1: tensor<3xf32>, %g0: tensor<4x8xf32>, %g1: tensor<3xf32>, %m0: tensor<4x8xf32>, %m1: tensor<3xf32>, %v0: tensor<4x8xf32>, %v1: tensor<3xf32>, %h: tensor<3xf32>) -> (tensor<4x8xf32>, tensor<3xf32>, tensor<4x8xf32>, tensor<3xf32>, tensor<4x8xf32>, tensor<3xf32>) attributes {tessera.donate = array<i64: 0, 1, 4, 5, 6, 7>} {
  %0:6 = tgraph.adamw_update %p0, %p1 grads %g0, %g1 exp_avgs %m0, %m1 exp_avg_sqs %v0, %v1 hyper %h beta1 = 9.000000e-01 beta2 = 9.990000e-01 eps = 1.000000e-08 : tensor<4x8xf32>, tensor<3xf32>
  func.return %0#0, %0#1, %0#2, %0#3, %0#4, %0#5 : tensor<4x8xf32>, tensor<3xf32>, tensor<4x8xf32>, tensor<3xf32>, tensor<4x8xf32>, tensor<3xf32>
}
func.func @pure(%p: tensor<16xbf16>, %g: tensor<16xbf16>, %b: tensor<16xbf16>, %h: tensor<3xf32>) -> (tensor<16xbf16>, tensor<16xbf16>) {
  %0:2 = tgraph.sgd_update %p grads %g momentum_buffers %b hyper %h momentum = 9.000000e-01 weight_decay = 0.000000e+00 nesterov : tensor<16xbf16>
  func.return %0#0, %0#1 : tensor<16xbf16>, tensor<16xbf16>
}
// CHECK:      ttile.kernel @step_adamw_0(%0: memref<3xf32>, %1: memref<32xf32>, %2: memref<32xf32>, %3: memref<32xf32>, %4: memref<32xf32>, %5: memref<3xf32>, %6: memref<3xf32>, %7: memref<3xf32>, %8: memref<3xf32>) group_size = 256 {
// CHECK:        ttile.load %0[%{{.*}}] : memref<3xf32> -> f32
// CHECK:        %[[T:.*]] = ttile.tile_id x
// CHECK:        %[[FIRST:.*]] = arith.cmpi slt, %[[T]], %{{.*}} : index
// CHECK-NEXT:   scf.if %[[FIRST]] {
// CHECK:          %[[OK:.*]] = arith.cmpi slt, %{{.*}}, %{{.*}} : index
// CHECK:          ttile.load_vector %1[%[[AT:.*]]] mask %[[OK]] : memref<32xf32> -> vector<4xf32>
// CHECK-COUNT-3:  ttile.load_vector
// CHECK:          math.sqrt
// CHECK:          arith.divf
// CHECK:          ttile.store_vector %{{.*}}, %1[%[[AT]]] mask %[[OK]] : vector<4xf32>, memref<32xf32>
// CHECK:          ttile.store_vector %{{.*}}, %2[%[[AT]]] mask %[[OK]]
// CHECK:          ttile.store_vector %{{.*}}, %3[%[[AT]]] mask %[[OK]]
// CHECK:        } else {
// CHECK:          %[[TAIL:.*]] = arith.cmpi eq, %{{.*}}, %{{.*}} : index
// CHECK:          ttile.load %5[%{{.*}}] mask %[[TAIL]] : memref<3xf32> -> f32
// CHECK-COUNT-3:  ttile.store %{{.*}}, %{{[5-7]}}[%{{.*}}] mask %[[TAIL]] : f32, memref<3xf32>
// CHECK:      func.func @step(
// CHECK:        %[[P0:.*]] = memref.collapse_shape %p0 {{.*}} into memref<32xf32>
// CHECK:        ttile.launch @step_adamw_0(%h, %[[P0]], %{{.*}}, %{{.*}}, %{{.*}}, %p1, %m1, %v1, %g1) grid = [2, 1, 1]
// CHECK-NOT:    memref.alloc
// CHECK:        func.return %p0, %p1, %m0, %m1, %v0, %v1

// CHECK:      ttile.kernel @pure_sgd_0(%0: memref<3xf32>, %1: memref<16xbf16>, %2: memref<16xbf16>, %3: memref<16xbf16>) group_size = 256 {
// CHECK:        ttile.load_vector %1[%{{.*}}] mask %{{.*}} : memref<16xbf16> -> vector<8xbf16>
// CHECK:        arith.extf %{{.*}} : bf16 to f32
// CHECK:        arith.truncf %{{.*}} : f32 to bf16
// CHECK:      func.func @pure(
// CHECK:        %[[CP:.*]] = memref.alloc() : memref<16xbf16>
// CHECK-NEXT:   ttile.launch @pure_copy_0(%[[CP]], %p)
// CHECK:        %[[CB:.*]] = memref.alloc() : memref<16xbf16>
// CHECK-NEXT:   ttile.launch @pure_copy_1(%[[CB]], %b)
// CHECK-NEXT:   ttile.launch @pure_sgd_0(%h, %[[CP]], %[[CB]], %g) grid = [1, 1, 1]
// CHECK-NEXT:   func.return %[[CP]], %[[CB]]
