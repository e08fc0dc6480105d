// RUN: not tessera-opt %s --split-input-file 2>&1 | filecheck %s

func.func @f(%a: tensor<4xf32, #tessera.policy<f32, rounding = truncate>>) {
  func.return
}
// CHECK: invalid-attrs.mlir:3:{{[0-9]+}}: error: {{.*}}unknown rounding 'truncate'; valid: nearest_even, stochastic
