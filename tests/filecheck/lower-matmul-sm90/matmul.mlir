// RUN: tessera-opt %s -p lower-matmul-sm90 | filecheck %s
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true}' | filecheck %s
// RUN: tessera-opt %s -p lower-matmul-sm90,lower-tile-to-target -t ptx | filecheck %s --check-prefix=PTX

// An eligible bf16 matmul becomes a TMA + wgmma kernel (TMA loads, TMA-store
// epilogue through shared memory) and a launch_ex; a batched matmul whose M (40) is no
// whole number of 64-row tiles keeps the generic Tile IR lowering (a tile must not
// straddle two batches). Unaligned row lengths: ragged.mlir.

func.func @mm(%a: tensor<200x72xbf16>, %b: tensor<72x136xbf16>, %x: tensor<2x40x16xbf16>, %z: tensor<2x16x16xbf16>) -> (tensor<200x136xbf16>, tensor<2x40x16xbf16>) {
  %c = tgraph.matmul %a, %b : (tensor<200x72xbf16>, tensor<72x136xbf16>) -> tensor<200x136xbf16>
  %y = tgraph.matmul %x, %z : (tensor<2x40x16xbf16>, tensor<2x16x16xbf16>) -> tensor<2x40x16xbf16>
  func.return %c, %y : tensor<200x136xbf16>, tensor<2x40x16xbf16>
}

// CHECK:      ttarget.func @mm_matmul_0(%{{.*}}: !ttarget.param<tmap>, %{{.*}}: !ttarget.param<tmap>, %{{.*}}: !ttarget.param<tmap>) maxntid = 384
// CHECK:        ttarget.extern_shared "smem" align = 1024
// CHECK:        ttarget.mbarrier_init
// CHECK:        ttarget.setmaxnreg "dec" 40
// CHECK:        ttarget.mbarrier_arrive [%{{.*}}] expect_tx
// CHECK:        ttarget.cp_async_bulk_tensor
// CHECK:        ttarget.setmaxnreg "inc" 232
// CHECK:        ttarget.mbarrier_try_wait
// CHECK:        ttarget.fence "wgmma"
// CHECK:        ttarget.wgmma "m64n128k16.f32.bf16.bf16"
// CHECK-SAME:     trans_a = 0 trans_b = 1
// CHECK:        ttarget.fence "wgmma_commit"
// CHECK:        ttarget.wgmma_wait 1
// CHECK:        ttarget.bulk_wait 0 read
// CHECK:        ttarget.st "shared.b32"
// CHECK:        ttarget.fence "proxy_async"
// CHECK:        ttarget.cp_async_bulk_tensor_store
// CHECK:        ttarget.fence "bulk_commit"
// CHECK:        ttarget.bulk_wait 0
// CHECK:      ttile.kernel @mm_matmul_1
// CHECK:      func.func @mm
// CHECK:        ttarget.launch_ex @mm_matmul_0(%{{.*}}, %a, %b) grid = [4, 1, 1] smem = {{[0-9]+}} boxes = [64, 64, 64, 128, 64, 64]
// CHECK:        ttile.launch @mm_matmul_1

// PTX:      .extern .shared .align 1024 .b8 smem[];
// PTX:      .visible .entry mm_matmul_0(
// PTX-NEXT:   .param .align 64 .b8 mm_matmul_0_param_0[128],
// PTX-NEXT:   .param .align 64 .b8 mm_matmul_0_param_1[128],
// PTX-NEXT:   .param .align 64 .b8 mm_matmul_0_param_2[128]
// PTX:        mbarrier.init.shared::cta.b64
// PTX:        cvta.param.u64
// PTX:        cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes
// PTX:        mbarrier.try_wait.parity.shared::cta.b64
// PTX:        wgmma.fence.sync.aligned;
// PTX:        wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, %p{{[0-9]+}}, 1, 1, 0, 1;
// PTX:        wgmma.commit_group.sync.aligned;
// PTX:        wgmma.wait_group.sync.aligned 1;
// PTX:        cp.async.bulk.wait_group.read 0;
// PTX:        cvt.rn.bf16x2.f32
// PTX:        st.shared.b32
// PTX:        fence.proxy.async.shared::cta;
// PTX:        cp.async.bulk.tensor.2d.global.shared::cta.bulk_group
// PTX:        cp.async.bulk.commit_group;
// PTX:        cp.async.bulk.wait_group 0;
// PTX:      .visible .entry mm_matmul_1(
