// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s -t ptx | filecheck %s --check-prefix=PTX

// ttarget.wgmma_rs (A from registers, B from a shared-memory descriptor) round-trips
// and prints as the register-A form of wgmma.mma_async.

ttarget.func @rs() maxntid = 128 {
  %db = ttarget.reg "b64"
  %p = ttarget.reg "pred"
  %a0 = ttarget.reg "b32"
  %a1 = ttarget.reg "b32"
  %a2 = ttarget.reg "b32"
  %a3 = ttarget.reg "b32"
  %d0 = ttarget.reg "f32"
  %d1 = ttarget.reg "f32"
  %d2 = ttarget.reg "f32"
  %d3 = ttarget.reg "f32"
  ttarget.fence "wgmma"
  ttarget.wgmma_rs "m64n8k16.f32.f16.f16" (%d0, %d1, %d2, %d3), (%a0, %a1, %a2, %a3), %db, %p trans_b = 1
  ttarget.fence "wgmma_commit"
  ttarget.wgmma_wait 0
  ttarget.ret
}

// CHECK:      ttarget.wgmma_rs "m64n8k16.f32.f16.f16" (%d0, %d1, %d2, %d3), (%a0, %a1, %a2, %a3), %db, %p trans_b = 1

// PTX:      wgmma.fence.sync.aligned;
// PTX-NEXT: wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%f0, %f1, %f2, %f3}, {%r0, %r1, %r2, %r3}, %rd0, %p0, 1, 1, 1;
