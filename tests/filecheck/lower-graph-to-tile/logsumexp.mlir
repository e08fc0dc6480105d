// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s
// RUN: tessera-opt %s -p lower-graph-to-tile,lower-tile-to-target | filecheck %s --check-prefix=PTX

// tgraph.logsumexp: one tile per output element; a max pass, then the sum of exp(x - m)
// with m = 0 where the max is infinite, then log(s) + m. tgraph.erf is elementwise
// (math.erf), lowered to Target IR as a polynomial (|x| < 1) and 1 - 2^Q(|x|) above.

func.func @f(%x: tensor<5x300xbf16>, %y: tensor<4x7xf32>) -> (tensor<5xbf16>, tensor<4x7xf32>) {
  %0 = tgraph.logsumexp %x axes = [1] : (tensor<5x300xbf16>) -> tensor<5xbf16>
  %1 = tgraph.erf %y : (tensor<4x7xf32>) -> tensor<4x7xf32>
  func.return %0, %1 : tensor<5xbf16>, tensor<4x7xf32>
}
// CHECK:      ttile.kernel @f_logsumexp_0(%{{.*}}: memref<5xbf16>, %{{.*}}: memref<5x300xbf16>) group_size = 128 {
// CHECK:        arith.constant 0xff800000 : f32
// CHECK:        arith.maximumf
// CHECK:        %[[M:.*]] = ttile.reduce %{{.*}} kind = max scope = group : f32
// CHECK:        %[[A:.*]] = math.absf %[[M]] : f32
// CHECK:        %[[INF:.*]] = arith.cmpf oeq, %[[A]], %{{.*}} : f32
// CHECK:        %[[M0:.*]] = arith.select %[[INF]], %{{.*}}, %[[M]] : f32
// CHECK:        arith.subf %{{.*}}, %[[M0]] : f32
// CHECK:        math.exp
// CHECK:        %[[S:.*]] = ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:        %[[L:.*]] = math.log %[[S]] : f32
// CHECK:        %[[Y:.*]] = arith.addf %[[L]], %[[M0]] : f32
// CHECK:        arith.truncf %[[Y]] : f32 to bf16
// CHECK:      ttile.kernel @f_erf_0(
// CHECK:        math.erf %{{.*}} : f32
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_logsumexp_0(%{{.*}}, %x) grid = [5, 1, 1]

// PTX:      ttarget.func @f_logsumexp_0
// PTX:        ttarget.div "rn.f32"
// PTX:      ttarget.func @f_erf_0
// PTX:        ttarget.fma "rn.f32"
// PTX:        ttarget.min "f32"
// PTX:        ttarget.ex2 "approx.f32"
// PTX:        ttarget.copysign "f32"
// PTX:        ttarget.setp "nan.f32"
