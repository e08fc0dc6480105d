// RUN: tessera-opt %s -t ptx | filecheck %s

// The .version is the lowest that the target and every instruction need:
// sm_80 alone needs 7.0; an e4m3x2 conversion needs 7.8 (and sm_89).

ttarget.func @needs_78(%x: !ttarget.param<u64>) maxntid = 32 target = "sm_89" {
  %f = ttarget.reg "f32"
  %h = ttarget.reg "b16"
  %rd = ttarget.reg "b64"
  %c = ttarget.imm 0.5 : f32
  ttarget.mov "f32" %f, %c
  ttarget.cvt "rn.satfinite.e4m3x2.f32" %h, %f, %f
  ttarget.ld_param "u64" %rd, %x : !ttarget.param<u64>
  ttarget.cvta "to.global.u64" %rd, %rd
  ttarget.st "global.b16" [%rd + -2], (%h)
  ttarget.cp_async_wait 1
  ttarget.ret
}
// CHECK: .version 7.8
// CHECK-NEXT: .target sm_89
// CHECK: mov.f32 %f0, 0f3F000000;
// CHECK-NEXT: cvt.rn.satfinite.e4m3x2.f32 %rs0, %f0, %f0;
// CHECK: st.global.b16 [%rd0-2], %rs0;
// CHECK-NEXT: cp.async.wait_group 1;
