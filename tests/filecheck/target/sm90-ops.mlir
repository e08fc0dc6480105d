// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s -t ptx | filecheck %s --check-prefix=PTX

// The Hopper ops (TMA, mbarrier, wgmma, setmaxnreg) round-trip and print as PTX; a kernel
// with setmaxnreg declares minnctapersm (.minnctapersm), without which ptxas ignores it.

ttarget.func @hopper(%c: !ttarget.param<u64>, %t: !ttarget.param<tmap>) maxntid = 256 minnctapersm = 1 {
  ttarget.extern_shared "smem" align = 1024
  %s = ttarget.reg "b32"
  %bar = ttarget.reg "b32"
  %x = ttarget.reg "b32"
  %p = ttarget.reg "pred"
  %map = ttarget.reg "b64"
  %da = ttarget.reg "b64"
  %db = ttarget.reg "b64"
  %d0 = ttarget.reg "f32"
  %d1 = ttarget.reg "f32"
  %d2 = ttarget.reg "f32"
  %d3 = ttarget.reg "f32"
  %one = ttarget.imm 1 : i32
  %tx = ttarget.imm 16384 : i32
  ttarget.extern_shared_addr %s, "smem"
  ttarget.param_addr %map, %t : !ttarget.param<tmap>
  ttarget.cvta "param.u64" %map, %map
  ttarget.mbarrier_init [%bar], %one
  ttarget.fence "mbarrier_init"
  ttarget.fence "proxy_async"
  ttarget.setmaxnreg "dec" 40
  ttarget.mbarrier_arrive [%bar] expect_tx %tx
  ttarget.cp_async_bulk_tensor [%s], [%map, %x, %x], [%bar]
  ttarget.label "W"
  ttarget.mbarrier_try_wait %p, [%bar], %x
  ttarget.bra "W" if %p negated
  ttarget.fence "wgmma"
  ttarget.wgmma "m64n8k16.f32.bf16.bf16" (%d0, %d1, %d2, %d3), %da, %db, %p trans_a = 0 trans_b = 1
  ttarget.wgmma "m64n8k8.f32.tf32.tf32" (%d0, %d1, %d2, %d3), %da, %db, %p trans_a = 0 trans_b = 0
  ttarget.fence "wgmma_commit"
  ttarget.wgmma_wait 0
  ttarget.mbarrier_arrive [%bar] if %p
  ttarget.setmaxnreg "inc" 232
  ttarget.ret
}

// CHECK:      ttarget.func @hopper(%c: !ttarget.param<u64>, %t: !ttarget.param<tmap>) maxntid = 256 minnctapersm = 1 {
// CHECK-NEXT:   ttarget.extern_shared "smem" align = 1024
// CHECK:        ttarget.extern_shared_addr %s, "smem"
// CHECK-NEXT:   ttarget.param_addr %map, %t : !ttarget.param<tmap>
// CHECK-NEXT:   ttarget.cvta "param.u64" %map, %map
// CHECK-NEXT:   ttarget.mbarrier_init [%bar], %one
// CHECK-NEXT:   ttarget.fence "mbarrier_init"
// CHECK-NEXT:   ttarget.fence "proxy_async"
// CHECK-NEXT:   ttarget.setmaxnreg "dec" 40
// CHECK-NEXT:   ttarget.mbarrier_arrive [%bar] expect_tx %tx
// CHECK-NEXT:   ttarget.cp_async_bulk_tensor [%s], [%map, %x, %x], [%bar]
// CHECK-NEXT:   ttarget.label "W"
// CHECK-NEXT:   ttarget.mbarrier_try_wait %p, [%bar], %x
// CHECK-NEXT:   ttarget.bra "W" if %p negated
// CHECK-NEXT:   ttarget.fence "wgmma"
// CHECK-NEXT:   ttarget.wgmma "m64n8k16.f32.bf16.bf16" (%d0, %d1, %d2, %d3), %da, %db, %p trans_a = 0 trans_b = 1
// CHECK-NEXT:   ttarget.wgmma "m64n8k8.f32.tf32.tf32" (%d0, %d1, %d2, %d3), %da, %db, %p trans_a = 0 trans_b = 0
// CHECK-NEXT:   ttarget.fence "wgmma_commit"
// CHECK-NEXT:   ttarget.wgmma_wait 0
// CHECK-NEXT:   ttarget.mbarrier_arrive [%bar] if %p
// CHECK-NEXT:   ttarget.setmaxnreg "inc" 232

// PTX:      .version 8.0
// PTX:      .extern .shared .align 1024 .b8 smem[];
// PTX:      .param .u64 hopper_param_0,
// PTX-NEXT: .param .align 64 .b8 hopper_param_1[128]
// PTX-NEXT: )
// PTX-NEXT: .maxntid 256, 1, 1
// PTX-NEXT: .minnctapersm 1
// PTX:      mov.u32 %r0, smem;
// PTX-NEXT: mov.u64 %rd0, hopper_param_1;
// PTX-NEXT: cvta.param.u64 %rd0, %rd0;
// PTX-NEXT: mbarrier.init.shared::cta.b64 [%r1], 1;
// PTX-NEXT: fence.mbarrier_init.release.cluster;
// PTX-NEXT: fence.proxy.async.shared::cta;
// PTX-NEXT: setmaxnreg.dec.sync.aligned.u32 40;
// PTX-NEXT: mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], 16384;
// PTX-NEXT: cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r0], [%rd0, {%r2, %r2}], [%r1];
// PTX-NEXT: W:
// PTX-NEXT: mbarrier.try_wait.parity.shared::cta.b64 %p0, [%r1], %r2;
// PTX-NEXT: @!%p0 bra W;
// PTX-NEXT: wgmma.fence.sync.aligned;
// PTX-NEXT: wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3}, %rd1, %rd2, %p0, 1, 1, 0, 1;
// PTX-NEXT: wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%f0, %f1, %f2, %f3}, %rd1, %rd2, %p0, 1, 1;
// PTX-NEXT: wgmma.commit_group.sync.aligned;
// PTX-NEXT: wgmma.wait_group.sync.aligned 0;
// PTX-NEXT: @%p0 mbarrier.arrive.shared::cta.b64 _, [%r1];
// PTX-NEXT: setmaxnreg.inc.sync.aligned.u32 232;
