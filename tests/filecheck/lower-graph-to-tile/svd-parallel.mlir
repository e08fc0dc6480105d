// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// svd with min(m, n) > 48: one-sided Jacobi with one tile per column pair (V in f64). The host
// function is a fixed sequence of launches: init (W^T, V^T = I, flags), then per sweep
// the K - 1 round-robin steps (the step index a host constant) and a check that marks
// a converged matrix done (its later steps skip the work), then norms and placement.

func.func @f(%a: tensor<60x50xf32>) -> (tensor<60x50xf32>, tensor<50xf32>, tensor<50x50xf32>) {
  %0, %1, %2 = tgraph.svd %a : (tensor<60x50xf32>) -> (tensor<60x50xf32>, tensor<50xf32>, tensor<50x50xf32>)
  func.return %0, %1, %2 : tensor<60x50xf32>, tensor<50xf32>, tensor<50x50xf32>
}
// CHECK:      ttile.kernel @f_svd_init_0(%{{.*}}: memref<1x50x60xf32>, %{{.*}}: memref<1x50x50xf64>, %{{.*}}: memref<1x25xf32>, %{{.*}}: memref<1xf32>, %{{.*}}: memref<60x50xf32>) group_size = 64 {
// CHECK:      ttile.kernel @f_svd_step_0(%{{.*}}: memref<1x50x60xf32>, %{{.*}}: memref<1x50x50xf64>, %{{.*}}: memref<1x25xf32>, %{{.*}}: memref<1xf32>, %{{.*}}: index) group_size = 64 {
// CHECK:        scf.if
// CHECK:          ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK-NEXT:     ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK-NEXT:     ttile.reduce %{{.*}} kind = sum scope = group : f32
// CHECK:          scf.if
// CHECK:      ttile.kernel @f_svd_check_0(%{{.*}}: memref<1x25xf32>, %{{.*}}: memref<1xf32>) group_size = 64 {
// CHECK:        ttile.reduce %{{.*}} kind = max scope = group : f32
// CHECK:      ttile.kernel @f_svd_norm_0(
// CHECK:      ttile.kernel @f_svd_place_0(
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_svd_init_0({{.*}}) grid = [50, 1, 1]
// CHECK:        %[[S0:.*]] = arith.constant 0 : index
// CHECK:        ttile.launch @f_svd_step_0(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[S0]]) grid = [25, 1, 1]
// CHECK-COUNT-48: ttile.launch @f_svd_step_0(
// CHECK-NEXT:   ttile.launch @f_svd_check_0({{.*}}) grid = [1, 1, 1]
// CHECK-NEXT:   ttile.launch @f_svd_step_0(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[S0]]) grid = [25, 1, 1]
// CHECK:        ttile.launch @f_svd_check_0(
// CHECK:        ttile.launch @f_svd_norm_0({{.*}}) grid = [50, 1, 1]
// CHECK-NEXT:   ttile.launch @f_svd_place_0({{.*}}) grid = [50, 1, 1]
// CHECK-NEXT:   func.return
