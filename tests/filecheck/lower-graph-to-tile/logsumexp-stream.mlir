// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s
// RUN: tessera-opt %s -p lower-graph-to-tile,lower-tile-to-target | filecheck %s --check-prefix=PTX

// Last-axis tgraph.logsumexp over long rows: one streaming pass. Each lane keeps a running
// (max, sum of exp2((x - max) log2 e)) of its 16-byte chunks in a loop, the tile combines
// them (max, then the rescaled sums), and lane 0 writes max + log(sum) in the result's
// type (f32 from bf16 here), +inf where the max is +inf. With fewer rows than tiles
// wanted, each row is split into segments: a statistics kernel writes each segment's
// (max, sum), and the write kernel combines them; its first segment's lane 0 stores.

func.func @f(%x: tensor<300x50257xbf16>) -> tensor<300xf32> {
  %0 = tgraph.logsumexp %x axes = [1] : (tensor<300x50257xbf16>) -> tensor<300xf32>
  func.return %0 : tensor<300xf32>
}
// CHECK:      ttile.kernel @f_logsumexp_0(%{{.*}}: memref<300xf32>, %{{.*}}: memref<300x50257xbf16>) group_size = 512 {
// CHECK:        scf.for
// CHECK:          math.exp2
// CHECK:          scf.yield %{{.*}}, %{{.*}} : f32, f32
// CHECK:        %[[M:.*]] = ttile.reduce %{{.*}} kind = max scope = group : f32
// CHECK:        %[[S:.*]] = ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:        %[[INF:.*]] = arith.constant 0x7f800000 : f32
// CHECK:        %[[L:.*]] = math.log %[[S]] : f32
// CHECK:        %[[Y:.*]] = arith.addf %[[M]], %[[L]] : f32
// CHECK:        %[[ISINF:.*]] = arith.cmpf oeq, %[[M]], %[[INF]] : f32
// CHECK:        %[[R:.*]] = arith.select %[[ISINF]], %[[INF]], %[[Y]] : f32
// CHECK:        ttile.store %[[R]], %{{.*}}[%{{.*}}] mask %{{.*}} : f32, memref<300xf32>
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_logsumexp_0(%{{.*}}, %x) grid = [300, 1, 1]


func.func @g(%x: tensor<4x50257xbf16>) -> tensor<4x1xf32> {
  %0 = tgraph.logsumexp %x axes = [1] keepdims : (tensor<4x50257xbf16>) -> tensor<4x1xf32>
  func.return %0 : tensor<4x1xf32>
}
// CHECK:      ttile.kernel @g_logsumexp_stats_0(%{{.*}}: memref<4x2x2xf32>, %{{.*}}: memref<4x50257xbf16>) group_size = 512 {
// CHECK:        ttile.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] mask %{{.*}} : f32, memref<4x2x2xf32>
// CHECK:      ttile.kernel @g_logsumexp_0(%{{.*}}: memref<4x2x2xf32>, %{{.*}}: memref<4x1xf32>, %{{.*}}: memref<4x50257xbf16>) group_size = 512 {
// CHECK:        ttile.load %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] mask
// CHECK:        ttile.reduce %{{.*}} kind = max scope = group : f32
// CHECK:        ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:        %[[FIRST:.*]] = arith.andi %{{.*}}, %{{.*}} : i1
// CHECK:        ttile.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] mask %[[FIRST]] : f32, memref<4x1xf32>
// CHECK:      func.func @g(
// CHECK:        ttile.launch @g_logsumexp_stats_0(%{{.*}}, %x) grid = [8, 1, 1]
// CHECK:        ttile.launch @g_logsumexp_0(%{{.*}}, %{{.*}}, %x) grid = [8, 1, 1]

// PTX:      ttarget.func @f_logsumexp_0
// PTX:        ttarget.div "rn.f32"
// PTX:      ttarget.func @g_logsumexp_stats_0
// PTX:      ttarget.func @g_logsumexp_0
