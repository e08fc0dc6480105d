// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// bf16 matmul: shared tiles filled by copy_async when rows are 16-byte aligned,
// m16n8k16 ttile.mma accumulation in vector<4xf32>, masked epilogue stores;
// grid = [ceil(N/BN), ceil(M/BM), batch].

func.func @f(%a: tensor<40x64xbf16>, %b: tensor<64x24xbf16>, %c: tensor<37x53xf32>, %d: tensor<53x29xf32>) -> (tensor<40x24xf32>, tensor<37x29xf32>) {
  %0 = tgraph.matmul %a, %b tile_shape = [32, 32, 32] : (tensor<40x64xbf16>, tensor<64x24xbf16>) -> tensor<40x24xf32>
  %1 = tgraph.matmul %c, %d : (tensor<37x53xf32>, tensor<53x29xf32>) -> tensor<37x29xf32>
  func.return %0, %1 : tensor<40x24xf32>, tensor<37x29xf32>
}
// CHECK:      ttile.kernel @f_matmul_0(%{{.*}}: memref<40x24xf32>, %{{.*}}: memref<40x64xbf16>, %{{.*}}: memref<64x24xbf16>) group_size = 128 {
// CHECK:        %[[SA:.*]] = ttile.alloc_shared alignment = 16 : memref<32x32xbf16, #tessera.smem>
// CHECK-NEXT:   %[[SB:.*]] = ttile.alloc_shared alignment = 16 : memref<32x32xbf16, #tessera.smem>
// CHECK:        scf.for
// CHECK:          ttile.copy_async %[[SA]][%{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}, %{{.*}}] elems = 8 valid %{{.*}} : memref<32x32xbf16, #tessera.smem>, memref<40x64xbf16>
// CHECK:          ttile.commit_group
// CHECK-NEXT:     ttile.wait_group 0
// CHECK:          ttile.copy_async %[[SB]][%{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}, %{{.*}}] elems = 8 valid %{{.*}} : memref<32x32xbf16, #tessera.smem>, memref<64x24xbf16>
// CHECK:          ttile.barrier
// CHECK:          vector.insert %{{.*}}, %{{.*}} [7] : bf16 into vector<8xbf16>
// CHECK:          ttile.mma %{{.*}}, %{{.*}}, %{{.*}} accum = f32 : vector<8xbf16>, vector<4xbf16>, vector<4xf32> -> vector<4xf32>
// CHECK:          ttile.barrier
// CHECK:        vector.extract %{{.*}}[3] : f32 from vector<4xf32>
// CHECK:        ttile.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] mask %{{.*}} : f32, memref<40x24xf32>
// CHECK:      ttile.kernel @f_matmul_1(%{{.*}}: memref<37x29xf32>, %{{.*}}: memref<37x53xf32>, %{{.*}}: memref<53x29xf32>) group_size = 256 {
// CHECK:        ttile.alloc_shared : memref<32x16xf32, #tessera.smem>
// CHECK:        ttile.alloc_shared : memref<16x32xf32, #tessera.smem>
// CHECK-NOT:    ttile.mma
// CHECK:      func.func @f(
// CHECK:        ttile.launch @f_matmul_0(%{{.*}}, %a, %b) grid = [1, 2, 1]
// CHECK:        ttile.launch @f_matmul_1(%{{.*}}, %c, %d) grid = [1, 2, 1]
