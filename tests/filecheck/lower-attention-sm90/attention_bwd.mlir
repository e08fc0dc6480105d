// RUN: tessera-opt %s -p lower-attention-sm90 | filecheck %s
// RUN: tessera-opt %s -p "lower-attention-sm90{sm90_attention_bwd=false}" | filecheck %s --check-prefix=OFF
// RUN: tessera-opt %s -p lower-attention-sm90,lower-tile-to-target -t ptx | filecheck %s --check-prefix=PTX

// The attention backward (bf16, D 64, ragged, causal) on sm90: the Tile IR prologue
// (Di and -lse log2e in [heads, 256] buffers), then the dK/dV and dQ wgmma kernels, with
// K, V (resident, 128-row boxes) and Q, dO (streamed, 64-row boxes) as TMA tensor maps.
// Both grids are persistent, a CTA per work unit here (causal: the 2 resident tiles of a
// head are one unit). Switched off, the three mma.sync Tile IR kernels.

func.func @g(%q: tensor<2x3x200x64xbf16>, %k: tensor<2x3x130x64xbf16>, %v: tensor<2x3x130x64xbf16>, %do: tensor<2x3x200x64xbf16>) -> (tensor<2x3x200x64xbf16>, tensor<2x3x130x64xbf16>, tensor<2x3x130x64xbf16>) {
  %o, %lse = tgraph.flash_attention_fwd %q, %k, %v causal : (tensor<2x3x200x64xbf16>, tensor<2x3x130x64xbf16>, tensor<2x3x130x64xbf16>) -> (tensor<2x3x200x64xbf16>, tensor<2x3x200xf32>)
  %dq, %dk, %dv = tgraph.flash_attention_bwd %q, %k, %v, %o, %do, %lse causal : (tensor<2x3x200x64xbf16>, tensor<2x3x130x64xbf16>, tensor<2x3x130x64xbf16>, tensor<2x3x200x64xbf16>, tensor<2x3x200x64xbf16>, tensor<2x3x200xf32>) -> (tensor<2x3x200x64xbf16>, tensor<2x3x130x64xbf16>, tensor<2x3x130x64xbf16>)
  func.return %dq, %dk, %dv : tensor<2x3x200x64xbf16>, tensor<2x3x130x64xbf16>, tensor<2x3x130x64xbf16>
}

// CHECK:      ttile.kernel @g_attention_bwd_dot_0(%{{.*}}: memref<6x256xf32>, %{{.*}}: memref<6x256xf32>, %{{.*}}: memref<2x3x200x64xbf16>, %{{.*}}: memref<2x3x200x64xbf16>, %{{.*}}: memref<2x3x200xf32>)
// CHECK:      ttarget.func @g_attention_bwd_dkdv_sm90_0({{.*}}) maxntid = 384
// CHECK:        ttarget.setmaxnreg "dec" 24
// CHECK:        ttarget.cp_async_bulk_tensor
// CHECK:        ttarget.setmaxnreg "inc" 240
// CHECK:        ttarget.wgmma "m64n64k16.f32.bf16.bf16"
// CHECK-SAME:     trans_a = 0 trans_b = 0
// CHECK:        ttarget.ld "global.nc.v2.f32"
// CHECK:        ttarget.ex2 "approx.ftz.f32"
// CHECK:        ttarget.cvt "rn.bf16x2.f32"
// CHECK:        ttarget.wgmma_rs "m64n64k16.f32.bf16.bf16"
// CHECK-SAME:     trans_b = 1
// CHECK:        ttarget.wgmma_wait 1
// CHECK:        ttarget.wgmma_rs "m64n64k16.f32.bf16.bf16"
// CHECK:        ttarget.wgmma_wait 0
// CHECK:      ttarget.func @g_attention_bwd_dq_sm90_0({{.*}}) maxntid = 384
// CHECK:      func.func @g
// CHECK:        ttarget.launch_ex @g_attention_0(
// CHECK-NEXT:   memref.alloc
// CHECK-NEXT:   memref.alloc
// CHECK-NEXT:   memref.alloc
// CHECK-NEXT:   memref.alloc() : memref<6x256xf32>
// CHECK-NEXT:   memref.alloc() : memref<6x256xf32>
// CHECK-NEXT:   ttile.launch @g_attention_bwd_dot_0(%[[DI:.*]], %[[LSE:.*]], %{{.*}}, %do, %{{.*}}) grid = [96, 1, 1]
// CHECK-NEXT:   ttarget.launch_ex @g_attention_bwd_dkdv_sm90_0(%{{.*}}, %{{.*}}, %k, %v, %q, %do, %[[LSE]], %[[DI]]) grid = [6, 1, 1] smem = {{[0-9]+}} boxes = [0, 0, 0, 0, 64, 128, 64, 128, 64, 64, 64, 64, 0, 0, 0, 0]
// CHECK-NEXT:   ttarget.launch_ex @g_attention_bwd_dq_sm90_0(%{{.*}}, %q, %do, %k, %v, %[[LSE]], %[[DI]]) grid = [6, 1, 1] smem = {{[0-9]+}} boxes = [0, 0, 64, 128, 64, 128, 64, 64, 64, 64, 0, 0, 0, 0]

// OFF-NOT:    attention_bwd_dkdv_sm90
// OFF:        ttile.launch @g_attention_bwd_dot_0
// OFF-NEXT:   ttile.launch @g_attention_bwd_dkdv_0
// OFF-NEXT:   ttile.launch @g_attention_bwd_dq_0

// PTX:        .entry g_attention_bwd_dkdv_sm90_0(
// PTX:        wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, %p{{[0-9]+}}, 1, 1, 0, 0;
// PTX:        ld.global.nc.v2.f32
// PTX:        wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{.*}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, %p{{[0-9]+}}, 1, 1, 1;
// PTX:        .entry g_attention_bwd_dq_sm90_0(
