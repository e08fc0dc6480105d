// RUN: tessera-opt %s -p fuse-elementwise | filecheck %s
// RUN: tessera-opt %s -p 'fuse-elementwise{fold-norm-add=false}' | filecheck %s --check-prefix=OFF
// RUN: tessera-opt %s -p fuse-elementwise,lower-graph-to-tile | filecheck %s --check-prefix=TILE

// A residual stream's gradient: the add of a norm's input gradient (no other user) and
// a tensor of its type becomes the gradient op's residual, whichever side it is on. A
// gradient with another user, or an add that broadcasts, stays an add.
func.func @f(%dy: tensor<6x768xbf16>, %x: tensor<6x768xbf16>, %m: tensor<6x1xf32>, %r: tensor<6x1xf32>, %w: tensor<768xbf16>, %res: tensor<6x768xbf16>, %row: tensor<768xbf16>) -> (tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x768xbf16>) {
  %0 = tgraph.layernorm_bwd %dy, %x, %m, %r weight %w : tensor<768xbf16> : (tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x1xf32>, tensor<6x1xf32>) -> tensor<6x768xbf16>
  %1 = tgraph.add %0, %res : (tensor<6x768xbf16>, tensor<6x768xbf16>) -> tensor<6x768xbf16>
  %2 = tgraph.rmsnorm_bwd %dy, %x, %r : (tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x1xf32>) -> tensor<6x768xbf16>
  %3 = tgraph.add %res, %2 : (tensor<6x768xbf16>, tensor<6x768xbf16>) -> tensor<6x768xbf16>
  %4 = tgraph.rmsnorm_bwd %dy, %x, %r : (tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x1xf32>) -> tensor<6x768xbf16>
  %5 = tgraph.add %4, %res : (tensor<6x768xbf16>, tensor<6x768xbf16>) -> tensor<6x768xbf16>
  %6 = tgraph.rmsnorm_bwd %dy, %x, %r : (tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x1xf32>) -> tensor<6x768xbf16>
  %7 = tgraph.add %6, %row : (tensor<6x768xbf16>, tensor<768xbf16>) -> tensor<6x768xbf16>
  %8 = tgraph.mul %5, %4 : (tensor<6x768xbf16>, tensor<6x768xbf16>) -> tensor<6x768xbf16>
  func.return %1, %3, %8, %7 : tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x768xbf16>
}
// CHECK-LABEL: func.func @f
// CHECK:      %{{.*}} = tgraph.layernorm_bwd %dy, %x, %m, %r weight %w : tensor<768xbf16> residual %res : tensor<6x768xbf16> : (tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x1xf32>, tensor<6x1xf32>) -> tensor<6x768xbf16>
// CHECK:      %{{.*}} = tgraph.rmsnorm_bwd %dy, %x, %r residual %res : tensor<6x768xbf16> : (tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x1xf32>) -> tensor<6x768xbf16>
// CHECK:      %[[KEPT:.*]] = tgraph.rmsnorm_bwd %dy, %x, %r : (tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x1xf32>) -> tensor<6x768xbf16>
// CHECK:      %[[BC:.*]] = tgraph.rmsnorm_bwd %dy, %x, %r : (tensor<6x768xbf16>, tensor<6x768xbf16>, tensor<6x1xf32>) -> tensor<6x768xbf16>
// CHECK:      tgraph.add %[[BC]], %row
// CHECK:      tgraph.fused %[[KEPT]], %res
// OFF-COUNT-4: tgraph.add
// OFF-NOT:    residual
// TILE:       ttile.kernel @f_layernorm_bwd_0(%{{.*}}: memref<6x768xbf16>, %{{.*}}: memref<6x768xbf16>, %{{.*}}: memref<6x768xbf16>, %{{.*}}: memref<6x1xf32>, %{{.*}}: memref<6x1xf32>, %{{.*}}: memref<768xbf16>, %[[RES:.*]]: memref<6x768xbf16>) group_size = 128 {
// TILE-COUNT-3: ttile.load_vector %[[RES]]
