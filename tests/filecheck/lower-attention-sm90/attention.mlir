// RUN: tessera-opt %s -p lower-attention-sm90 | filecheck %s
// RUN: tessera-opt %s -p lower-attention-sm90,lower-tile-to-target -t ptx | filecheck %s --check-prefix=PTX

// Eligible bf16 attention (head size 128, ragged sequence lengths, causal) becomes a
// TMA + wgmma kernel and a launch_ex; the f32 one keeps the Tile IR lowering. The grid is
// persistent with a CTA per work unit here: causal, the 2 query tiles of each of the 6
// heads are one unit (a heavy and a light tile).

func.func @attn(%q: tensor<2x3x200x128xbf16>, %k: tensor<2x3x130x128xbf16>, %v: tensor<2x3x130x128xbf16>, %x: tensor<1x8x16xf32>) -> (tensor<2x3x200x128xbf16>, tensor<1x8x16xf32>) {
  %o = tgraph.flash_attention %q, %k, %v causal : (tensor<2x3x200x128xbf16>, tensor<2x3x130x128xbf16>, tensor<2x3x130x128xbf16>) -> tensor<2x3x200x128xbf16>
  %y = tgraph.flash_attention %x, %x, %x : (tensor<1x8x16xf32>, tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
  func.return %o, %y : tensor<2x3x200x128xbf16>, tensor<1x8x16xf32>
}

// CHECK:      ttarget.func @attn_attention_0(%{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<tmap>, %{{.*}}: !ttarget.param<tmap>, %{{.*}}: !ttarget.param<tmap>) maxntid = 384
// CHECK:        ttarget.setmaxnreg "dec" 24
// CHECK:        ttarget.mbarrier_arrive [%{{.*}}] expect_tx
// CHECK:        ttarget.cp_async_bulk_tensor
// CHECK:        ttarget.setmaxnreg "inc" 240
// CHECK:        ttarget.wgmma "m64n128k16.f32.bf16.bf16"
// CHECK-SAME:     trans_a = 0 trans_b = 0
// CHECK:        ttarget.ex2 "approx.ftz.f32"
// CHECK:        ttarget.cvt "rn.bf16x2.f32"
// CHECK:        ttarget.wgmma_rs "m64n128k16.f32.bf16.bf16"
// CHECK-SAME:     trans_b = 1
// CHECK:        ttarget.wgmma_wait 1
// CHECK:        ttarget.st "global.b32"
// CHECK:      ttile.kernel @attn_flash_attention_
// CHECK:      func.func @attn
// CHECK:        ttarget.launch_ex @attn_attention_0(%{{.*}}, %q, %k, %v) grid = [6, 1, 1] smem = {{[0-9]+}} boxes = [0, 0, 64, 128, 64, 128, 64, 128]
// CHECK:        ttile.launch @attn_flash_attention_

// PTX:        .maxntid 384, 1, 1
// PTX:        cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes
// PTX:        wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, %p{{[0-9]+}}, 1, 1, 0, 0;
// PTX:        wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{.*}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, %p{{[0-9]+}}, 1, 1, 1;
