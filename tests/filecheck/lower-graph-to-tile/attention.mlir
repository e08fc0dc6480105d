// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// bf16/f16 flash attention with head size 64 or 128 uses the tensor-core kernel: 16
// query rows per warp (64 per tile below 1024 rows), K blocks by copy_async, mma for
// Q K^T and P V, row statistics across the 4 lanes of a row by shuffle_xor. Other head
// sizes and f32 keep the one-lane-per-row kernel.

func.func @f(%q: tensor<2x80x64xbf16>, %k: tensor<2x80x64xbf16>, %v: tensor<2x80x64xbf16>, %a: tensor<1x40x32xbf16>, %x: tensor<1x40x64xf32>) -> (tensor<2x80x64xbf16>, tensor<1x40x32xbf16>, tensor<1x40x64xf32>) {
  %0 = tgraph.flash_attention %q, %k, %v causal : (tensor<2x80x64xbf16>, tensor<2x80x64xbf16>, tensor<2x80x64xbf16>) -> tensor<2x80x64xbf16>
  %1 = tgraph.flash_attention %a, %a, %a : (tensor<1x40x32xbf16>, tensor<1x40x32xbf16>, tensor<1x40x32xbf16>) -> tensor<1x40x32xbf16>
  %2 = tgraph.flash_attention %x, %x, %x : (tensor<1x40x64xf32>, tensor<1x40x64xf32>, tensor<1x40x64xf32>) -> tensor<1x40x64xf32>
  func.return %0, %1, %2 : tensor<2x80x64xbf16>, tensor<1x40x32xbf16>, tensor<1x40x64xf32>
}
// CHECK:      ttile.kernel @f_flash_attention_0(%{{.*}}: memref<2x80x64xbf16>, {{.*}}) group_size = 128 {
// CHECK:        ttile.alloc_shared alignment = 128 : memref<8192xbf16, #tessera.smem>
// CHECK:        ttile.alloc_shared alignment = 128 : memref<4096xbf16, #tessera.smem>
// CHECK:        ttile.copy_async %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] elems = 8 valid %{{.*}}
// CHECK:        ttile.commit_group
// CHECK:        scf.for
// CHECK:          ttile.wait_group 1
// CHECK:          ttile.barrier
// CHECK:          ttile.mma %{{.*}}, %{{.*}}, %{{.*}} accum = f32 : vector<8xbf16>, vector<4xbf16>, vector<4xf32> -> vector<4xf32>
// CHECK:          ttile.shuffle_xor %{{.*}}, 1 : f32
// CHECK:          ttile.shuffle_xor %{{.*}}, 2 : f32
// CHECK:          math.exp2
// CHECK:          ttile.store_vector %{{.*}} : vector<8xbf16>, memref<4096xbf16, #tessera.smem>
// CHECK:          ttile.barrier
// CHECK:          ttile.mma
// CHECK:        scf.for
// CHECK:          arith.cmpi sle
// CHECK:          ttile.mma
// CHECK:        ttile.store_vector %{{.*}} mask %{{.*}} : vector<2xbf16>, memref<2x80x64xbf16>
// CHECK:      ttile.kernel @f_flash_attention_1(%{{.*}}: memref<1x40x32xbf16>, {{.*}}) group_size = 64 {
// CHECK-NOT:    ttile.mma
// CHECK:      ttile.kernel @f_flash_attention_2(%{{.*}}: memref<1x40x64xf32>, {{.*}}) group_size = 64 {
// CHECK-NOT:    ttile.mma
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_flash_attention_0(%{{.*}}, %q, %k, %v) grid = [2, 1, 2]
// CHECK:        ttile.launch @f_flash_attention_1(%{{.*}}, %a, %a, %a) grid = [1, 1, 1]
