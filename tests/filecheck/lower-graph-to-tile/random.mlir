// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// randn and poisson: one lane per element; Philox4x32-10 on i64 words (multipliers
// 0xD2511F53 = 3528531795 and 0xCD9E8D57 = 3449720151), the float64 sampler of
// tessera/numerics/random.py (exponent split by bitcast), Poisson's loops as per-lane
// scf.while (arrivals below rate 10, PTRS above), one rounding to the result type.

func.func @f(%l: tensor<5x7xf32>) -> (tensor<5x7xf32>, tensor<300xbf16>) {
  %0 = tgraph.poisson %l seed = 9 offset = 1 : (tensor<5x7xf32>) -> tensor<5x7xf32>
  %1 = tgraph.randn seed = 3 : tensor<300xbf16>
  func.return %0, %1 : tensor<5x7xf32>, tensor<300xbf16>
}
// CHECK:      ttile.kernel @f_poisson_0(%{{.*}}: memref<5x7xf32>, %{{.*}}: memref<5x7xf32>) group_size = 256 {
// CHECK:        %[[LIN:[0-9]+]] = ttile.linear_id
// CHECK:        %[[OK:[0-9]+]] = arith.cmpi slt, %[[LIN]], %{{.*}} : index
// CHECK:        ttile.load %{{.*}}[%{{.*}}, %{{.*}}] mask %[[OK]] : memref<5x7xf32> -> f32
// CHECK:        arith.index_cast %[[LIN]] : index to i64
// CHECK:        arith.extf %{{.*}} : f32 to f64
// CHECK:        scf.while (%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) : (f64, f64) -> (f64, f64) {
// CHECK:          arith.constant 3528531795 : i64
// CHECK:          arith.muli %{{.*}}, %{{.*}} : i64
// CHECK:          arith.shrui %{{.*}}, %{{.*}} : i64
// CHECK:          arith.constant 3449720151 : i64
// CHECK:          arith.bitcast %{{.*}} : f64 to i64
// CHECK:        math.sqrt %{{.*}} : f64
// CHECK:        scf.while (%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) : (f64, i1, f64) -> (f64, i1, f64) {
// CHECK:          arith.fptosi %{{.*}} : f64 to i64
// CHECK:        %[[P:[0-9]+]] = arith.truncf %{{.*}} : f64 to f32
// CHECK-NEXT:   ttile.store %[[P]], %{{.*}}[%{{.*}}, %{{.*}}] mask %[[OK]] : f32, memref<5x7xf32>
// CHECK:      ttile.kernel @f_randn_0(%{{.*}}: memref<300xbf16>) group_size = 256 {
// CHECK-NOT:    scf.while
// CHECK:        arith.muli %{{.*}}, %{{.*}} : i64
// CHECK:        math.sqrt %{{.*}} : f64
// CHECK:        %[[Z:[0-9]+]] = arith.truncf %{{.*}} : f64 to bf16
// CHECK-NEXT:   ttile.store %[[Z]], %{{.*}}[%{{.*}}] mask %{{.*}} : bf16, memref<300xbf16>
// CHECK:      func.func @f(%l: memref<5x7xf32>)
// CHECK:        ttile.launch @f_poisson_0(%{{.*}}, %l) grid = [1, 1, 1]
// CHECK:        ttile.launch @f_randn_0(%{{.*}}) grid = [2, 1, 1]
