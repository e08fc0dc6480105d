// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// Results of a rounding policy (stochastic rounding, saturation, loss scale): the
// kernel widens to f64, scales, truncates the magnitude to the target's grid with an
// i64 mask, draws Philox4x32-10 word 0 at counter i under the op's seed and rounds up
// iff word < (a - lo) / (hi - lo) * 2^32 (tessera/passes/tile_policy.py), then converts
// the chosen neighbour exactly. Another op with such a result is computed into an f32
// buffer first, then stored through the policy (seed 0, no loss scale).

func.func @f(%x: tensor<5x7xf32>, %y: tensor<5x7xbf16>) -> (tensor<5x7xbf16, #tessera.policy<bf16, rounding = stochastic, loss_scale = 128.0>>, tensor<5x7xf4E2M1FN, #tessera.policy<f4E2M1FN, rounding = stochastic>>, tensor<5x7xbf16, #tessera.policy<bf16, saturate>>) {
  %0 = tgraph.cast %x seed = 42 : (tensor<5x7xf32>) -> tensor<5x7xbf16, #tessera.policy<bf16, rounding = stochastic, loss_scale = 128.0>>
  %1 = tgraph.cast %x seed = 5 : (tensor<5x7xf32>) -> tensor<5x7xf4E2M1FN, #tessera.policy<f4E2M1FN, rounding = stochastic>>
  %2 = tgraph.mul %y, %y : (tensor<5x7xbf16>, tensor<5x7xbf16>) -> tensor<5x7xbf16, #tessera.policy<bf16, saturate>>
  func.return %0, %1, %2 : tensor<5x7xbf16, #tessera.policy<bf16, rounding = stochastic, loss_scale = 128.0>>, tensor<5x7xf4E2M1FN, #tessera.policy<f4E2M1FN, rounding = stochastic>>, tensor<5x7xbf16, #tessera.policy<bf16, saturate>>
}
// CHECK:      ttile.kernel @f_policy_0(%{{.*}}: memref<5x7xbf16>, %{{.*}}: memref<5x7xf32>) group_size = 256 {
// CHECK:        %[[LIN:[0-9]+]] = ttile.linear_id
// CHECK:        arith.extf %{{.*}} : f32 to f64
// CHECK:        %[[K:[0-9]+]] = arith.constant 1.280000e+02 : f64
// CHECK-NEXT:   arith.mulf %{{.*}}, %[[K]] : f64
// CHECK:        arith.index_cast %[[LIN]] : index to i64
// CHECK:        arith.constant 3528531795 : i64
// CHECK:        arith.bitcast %{{.*}} : f64 to i64
// CHECK:        math.absf %{{.*}} : f64
// CHECK:        %[[P:[0-9]+]] = arith.divf %{{.*}}, %{{.*}} : f64
// CHECK:        arith.sitofp %{{.*}} : i64 to f64
// CHECK:        arith.constant 0x41F0000000000000 : f64
// CHECK:        arith.cmpf olt
// CHECK:        arith.truncf %{{.*}} : f64 to f32
// CHECK:        %[[B:[0-9]+]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT:   ttile.store %[[B]], %{{.*}}[%{{.*}}, %{{.*}}] mask %{{.*}} : bf16, memref<5x7xbf16>
// CHECK:      ttile.kernel @f_policy_1(%{{.*}}: memref<5x4xi8>, %{{.*}}: memref<5x7xf32>) group_size = 256 {
// CHECK-NOT:    arith.mulf %{{.*}} : f64
// CHECK:        arith.constant 3528531795 : i64
// CHECK:        arith.trunci %{{.*}} : i32 to i8
// CHECK:      ttile.kernel @f_mul_0(%{{.*}}: memref<35xf32>, %{{.*}}: memref<35xbf16>, %{{.*}}: memref<35xbf16>) group_size = 256 {
// CHECK:      ttile.kernel @f_policy_2(%{{.*}}: memref<5x7xbf16>, %{{.*}}: memref<5x7xf32>) group_size = 256 {
// CHECK-NOT:    3528531795
// CHECK:        arith.constant 3.389531{{.*}}e+38 : f64
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_policy_0
// CHECK:        ttile.launch @f_policy_1
// CHECK:        ttile.launch @f_mul_0
// CHECK:        ttile.launch @f_policy_2
