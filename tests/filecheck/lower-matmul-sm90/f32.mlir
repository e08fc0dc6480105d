// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true}' | filecheck %s --check-prefix=X3
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true allow_tf32=true}' | filecheck %s --check-prefix=TF32
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true allow_tf32=true},lower-tile-to-target' -t ptx | filecheck %s --check-prefix=PTX

// f32 matmuls on tf32 wgmmas (k8, 32 of K per 128-byte stage row, K-major operands).
// Default (full f32 accuracy): both operands are split into K-major hi/lo TF32 copies
// ([2, rows, K]; B, stored K x N, is transposed on the way) and each k8 step issues the
// three products A_lo B_hi, A_hi B_lo, A_hi B_hi; each stage is added into f32 totals.
// allow_tf32: one product; A (row-major, K a multiple of 4) is read as it is, only the
// MN-major B is copied (rounded to TF32) K-major.

func.func @mm(%a: tensor<1000x72xf32>, %b: tensor<72x136xf32>) -> tensor<1000x136xf32> {
  %c = tgraph.matmul %a, %b : (tensor<1000x72xf32>, tensor<72x136xf32>) -> tensor<1000x136xf32>
  func.return %c : tensor<1000x136xf32>
}

// X3:      ttile.kernel @mm_split_tf32_0(%{{.*}}: memref<2x1000x72xf32>, %{{.*}}: memref<1000x72xf32>)
// X3:        arith.bitcast
// X3:        arith.andi
// X3:        arith.subf
// X3:      ttile.kernel @mm_split_tf32_1(%{{.*}}: memref<2x136x72xf32>, %{{.*}}: memref<72x136xf32>)
// X3:        ttile.alloc_shared
// X3:      ttarget.func @mm_matmul_0(%{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<tmap>, %{{.*}}: !ttarget.param<tmap>)
// X3:        ttarget.cp_async_bulk_tensor
// X3:        ttarget.cp_async_bulk_tensor
// X3:        ttarget.wgmma "m64n128k8.f32.tf32.tf32"
// X3-SAME:     trans_a = 0 trans_b = 0
// X3-NEXT:   ttarget.wgmma "m64n128k8.f32.tf32.tf32"
// X3-NEXT:   ttarget.wgmma "m64n128k8.f32.tf32.tf32"
// X3:        ttarget.wgmma_wait 0
// X3:        ttarget.add "rn.f32"
// X3:        ttarget.st "shared.v2.f32"
// X3:        ttarget.st "global.v4.b32"
// X3:      func.func @mm
// X3:        ttile.launch @mm_split_tf32_0(%{{.*}}, %a) grid = [282, 1, 1]
// X3:        ttile.launch @mm_split_tf32_1(%{{.*}}, %b) grid = [5, 3, 1]
// X3:        ttarget.launch_ex @mm_matmul_0(%{{.*}}, %{{.*}}, %{{.*}}) grid = [16, 1, 1] smem = {{[0-9]+}} boxes = [0, 0, 32, 128, 32, 64]

// TF32-NOT:  ttile.kernel @mm_split_tf32_1
// TF32:      ttile.kernel @mm_split_tf32_0(%{{.*}}: memref<1x136x72xf32>, %{{.*}}: memref<72x136xf32>)
// TF32:      ttarget.func @mm_matmul_0
// TF32-COUNT-4: ttarget.wgmma "m64n128k8.f32.tf32.tf32"
// TF32-NOT:    ttarget.add "rn.f32"
// TF32:        ttarget.wgmma_wait 1
// TF32:      func.func @mm
// TF32:        ttile.launch @mm_split_tf32_0(%{{.*}}, %b)
// TF32:        ttarget.launch_ex @mm_matmul_0(%{{.*}}, %a, %{{.*}}) grid = [16, 1, 1] smem = {{[0-9]+}} boxes = [0, 0, 32, 128, 32, 64]

// PTX:      wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {{{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, %p{{[0-9]+}}, 1, 1;
