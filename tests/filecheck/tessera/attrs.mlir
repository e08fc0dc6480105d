// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s

// Numeric policies ride on tensor types; meshes and shardings are attributes.

func.func @policies(%a: tensor<16x32xf8E4M3FN, #tessera.policy<f8E4M3FN, accum = f32>>,
                    %b: tensor<16x32xbf16, #tessera.policy<bf16, accum = f32, rounding = stochastic>>,
                    %c: tensor<16xf6E2M3FN, #tessera.policy<f6E2M3FN, accum = f32, loss_scale = 128.0, saturate>>,
                    %d: tensor<16xf4E2M1FN, #tessera.policy<f4E2M1FN, nondeterministic>>,
                    %e: tensor<16xf8E5M2>, %f: tensor<16xf6E3M2FN>, %g: tensor<16xi8>)
    attributes {tessera.mesh = #tessera.mesh<dp = 2, tp = 4, pp = 1>} {
  func.return
}
// CHECK: %a: tensor<16x32xf8E4M3FN, #tessera.policy<f8E4M3FN, accum = f32>>
// CHECK-SAME: %b: tensor<16x32xbf16, #tessera.policy<bf16, accum = f32, rounding = stochastic>>
// CHECK-SAME: %c: tensor<16xf6E2M3FN, #tessera.policy<f6E2M3FN, accum = f32, loss_scale = 128.0, saturate>>
// CHECK-SAME: %d: tensor<16xf4E2M1FN, #tessera.policy<f4E2M1FN, nondeterministic>>
// CHECK-SAME: %e: tensor<16xf8E5M2>, %f: tensor<16xf6E3M2FN>, %g: tensor<16xi8>
// CHECK: tessera.mesh = #tessera.mesh<dp = 2, tp = 4, pp = 1>

func.func @shardings(%w: tensor<8x8xbf16> {tessera.shard = #tessera.shard<[[tp], []]>},
                     %x: tensor<8x8xbf16> {tessera.shard = #tessera.shard<[[dp, tp], []]>},
                     %y: tensor<8x8xbf16> {tessera.shard = #tessera.shard<[[], []], partial = sum over [tp]>}) {
  func.return
}
// CHECK: {tessera.shard = #tessera.shard<{{\[\[}}tp], []]>}
// CHECK-SAME: {tessera.shard = #tessera.shard<{{\[\[}}dp, tp], []]>}
// CHECK-SAME: {tessera.shard = #tessera.shard<{{\[\[}}], []], partial = sum over [tp]>}
