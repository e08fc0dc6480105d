// RUN: tessera-opt %s -t ptx | filecheck %s

// Each instruction prints as one PTX line; registers are declared per class.

ttarget.func @scale(%x: !ttarget.param<u64>, %n: !ttarget.param<u32>) maxntid = 128 {
  %rd0 = ttarget.reg "b64"
  %rd1 = ttarget.reg "b64"
  %r0 = ttarget.reg "b32"
  %r1 = ttarget.reg "b32"
  %r2 = ttarget.reg "b32"
  %p0 = ttarget.reg "pred"
  %f0 = ttarget.reg "f32"
  %two = ttarget.imm 2.000000e+00 : f32
  %c4 = ttarget.imm 4 : i32
  ttarget.ld_param "u64" %rd0, %x : !ttarget.param<u64>
  ttarget.ld_param "u32" %r2, %n : !ttarget.param<u32>
  ttarget.cvta "to.global.u64" %rd0, %rd0
  ttarget.sreg %r0, "tid.x"
  ttarget.sreg %r1, "ctaid.x"
  ttarget.mad "lo.s32" %r0, %r1, %c4, %r0
  ttarget.setp "ge.u32" %p0, %r0, %r2
  ttarget.bra "DONE" if %p0
  ttarget.mul "wide.u32" %rd1, %r0, %c4
  ttarget.add "s64" %rd1, %rd0, %rd1
  ttarget.ld "global.f32" (%f0), [%rd1 + 0]
  ttarget.mul "rn.f32" %f0, %f0, %two
  ttarget.st "global.f32" [%rd1 + 0], (%f0) if %p0 negated
  ttarget.label "DONE"
  ttarget.ret
}
// CHECK:      .version 8.0
// CHECK-NEXT: .target sm_90a
// CHECK-NEXT: .address_size 64
// CHECK:      .visible .entry scale(
// CHECK-NEXT:   .param .u64 scale_param_0,
// CHECK-NEXT:   .param .u32 scale_param_1
// CHECK-NEXT: )
// CHECK-NEXT: .maxntid 128, 1, 1
// CHECK-NEXT: {
// CHECK-NEXT:   .reg .pred %p<1>;
// CHECK-NEXT:   .reg .b32 %r<3>;
// CHECK-NEXT:   .reg .b64 %rd<2>;
// CHECK-NEXT:   .reg .f32 %f<1>;
// CHECK-EMPTY:
// CHECK-NEXT:   ld.param.u64 %rd0, [scale_param_0];
// CHECK-NEXT:   ld.param.u32 %r2, [scale_param_1];
// CHECK-NEXT:   cvta.to.global.u64 %rd0, %rd0;
// CHECK-NEXT:   mov.u32 %r0, %tid.x;
// CHECK-NEXT:   mov.u32 %r1, %ctaid.x;
// CHECK-NEXT:   mad.lo.s32 %r0, %r1, 4, %r0;
// CHECK-NEXT:   setp.ge.u32 %p0, %r0, %r2;
// CHECK-NEXT:   @%p0 bra DONE;
// CHECK-NEXT:   mul.wide.u32 %rd1, %r0, 4;
// CHECK-NEXT:   add.s64 %rd1, %rd0, %rd1;
// CHECK-NEXT:   ld.global.f32 %f0, [%rd1];
// CHECK-NEXT:   mul.rn.f32 %f0, %f0, 0f40000000;
// CHECK-NEXT:   @!%p0 st.global.f32 [%rd1], %f0;
// CHECK-NEXT: DONE:
// CHECK-NEXT:   ret;
// CHECK-NEXT: }
