// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s
// RUN: tessera-opt %s -p lower-graph-to-tile,lower-tile-to-target | filecheck %s --check-prefix=PTX

// tgraph.take_along_axis: one lane per result element reads its index, checks
// 0 <= j < n and reads input[..., j, ...] masked by that check, NaN otherwise
// (an out-of-range index never reads memory).

func.func @f(%x: tensor<6x50257xf32>, %i: tensor<6x1xi64>) -> tensor<6x1xf32> {
  %0 = tgraph.take_along_axis %x, %i axis = 1 : (tensor<6x50257xf32>, tensor<6x1xi64>) -> tensor<6x1xf32>
  func.return %0 : tensor<6x1xf32>
}
// CHECK:      ttile.kernel @f_take_along_axis_0(%{{.*}}: memref<6x1xf32>, %{{.*}}: memref<6x50257xf32>, %{{.*}}: memref<6x1xi64>) group_size = 256 {
// CHECK:        %[[J:.*]] = ttile.load %{{.*}}[%{{.*}}, %{{.*}}] mask
// CHECK:        %[[GE:.*]] = arith.cmpi sge, %[[J]], %{{.*}} : i64
// CHECK:        %[[LT:.*]] = arith.cmpi slt, %[[J]], %{{.*}} : i64
// CHECK:        %[[IN:.*]] = arith.andi %[[GE]], %[[LT]] : i1
// CHECK:        %[[S:.*]] = arith.select %[[IN]], %[[J]], %{{.*}} : i64
// CHECK:        %[[K:.*]] = arith.index_cast %[[S]] : i64 to index
// CHECK:        %[[NAN:.*]] = arith.constant 0x7fc00000 : f32
// CHECK:        %[[OK:.*]] = arith.andi %{{.*}}, %[[IN]] : i1
// CHECK:        ttile.load %{{.*}}[%{{.*}}, %[[K]]] mask %[[OK]] other %[[NAN]]
// CHECK:        ttile.store
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_take_along_axis_0(%{{.*}}, %x, %i) grid = [1, 1, 1]

// PTX:      ttarget.func @f_take_along_axis_0
