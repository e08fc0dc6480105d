// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// Every ttarget op in custom syntax, printed back identically and through the generic form.

ttarget.func @all(%x: !ttarget.param<u64>, %n: !ttarget.param<u32>, %s: !ttarget.param<f32>) maxntid = 128 {
  ttarget.shared "buf" size = 512 align = 16
  %p = ttarget.reg "pred"
  %h = ttarget.reg "b16"
  %h2 = ttarget.reg "b16"
  %r = ttarget.reg "b32"
  %r2 = ttarget.reg "b32"
  %sm = ttarget.reg "b32"
  %rd = ttarget.reg "b64"
  %f = ttarget.reg "f32"
  %g = ttarget.reg "f32"
  %fd = ttarget.reg "f64"
  %c0 = ttarget.imm 0 : i32
  %c4 = ttarget.imm 4 : i32
  %m1 = ttarget.imm -1 : i32
  %one = ttarget.imm 1.000000e+00 : f32
  ttarget.ld_param "u64" %rd, %x : !ttarget.param<u64>
  ttarget.ld_param "u32" %r, %n : !ttarget.param<u32>
  ttarget.ld_param "f32" %f, %s : !ttarget.param<f32>
  ttarget.cvta "to.global.u64" %rd, %rd
  ttarget.sreg %r2, "tid.x"
  ttarget.shared_addr %sm, "buf"
  ttarget.mov "f32" %g, %one
  ttarget.mov "f32" %g, %f if %p negated
  ttarget.pack "b32" %r, (%h, %h2)
  ttarget.unpack "b32" (%h, %h2), %r
  ttarget.ld "global.v2.f32" (%f, %g), [%rd + 8] if %p
  ttarget.st "shared.f32" [%sm + 0], (%f)
  ttarget.cp_async "cg.shared.global" [%sm + 16], [%rd + 0], 16 src_size %r
  ttarget.cp_async_commit
  ttarget.cp_async_mbarrier_arrive [%r]
  ttarget.cp_async_wait 0
  ttarget.bar_sync 0
  ttarget.bar_arrive 2 threads = 256
  ttarget.add "rn.f32" %f, %f, %one
  ttarget.sub "s32" %r, %r, %c4
  ttarget.mul "wide.s32" %rd, %r, %c4
  ttarget.div "rn.f32" %f, %f, %g
  ttarget.rem "u32" %r, %r, %c4
  ttarget.min "NaN.f32" %f, %f, %g
  ttarget.max "s32" %r, %r, %c0
  ttarget.and "b32" %r, %r, %c4
  ttarget.or "pred" %p, %p, %p
  ttarget.xor "b32" %r, %r, %m1
  ttarget.copysign "f32" %f, %f, %g
  ttarget.shl "b32" %r, %r, %c4
  ttarget.shr "s32" %r, %r, %c4
  ttarget.neg "f32" %f, %f
  ttarget.abs "f32" %f, %f
  ttarget.not "b32" %r, %r
  ttarget.rcp "rn.f32" %f, %f
  ttarget.sqrt "rn.f32" %f, %f
  ttarget.rsqrt "approx.f32" %f, %f
  ttarget.ex2 "approx.ftz.f32" %f, %f
  ttarget.lg2 "approx.f32" %f, %f
  ttarget.sin "approx.f32" %f, %f
  ttarget.cos "approx.f32" %f, %f
  ttarget.tanh "approx.f32" %f, %f
  ttarget.fma "rn.f32" %f, %f, %g, %one
  ttarget.mad "lo.s32" %r, %r, %c4, %r2
  ttarget.selp "f32" %f, %f, %g, %p
  ttarget.setp "lt.f32" %p, %f, %g
  ttarget.cvt "rn.f32.s32" %f, %r
  ttarget.cvt "f64.f32" %fd, %f
  ttarget.cvt "rn.bf16.f32" %h, %f
  ttarget.cvt "rn.satfinite.e4m3x2.f32" %h, %f, %g
  ttarget.shfl "bfly.b32" %r, %r, %c4, %c4, %m1
  ttarget.label "LOOP"
  ttarget.bra "LOOP" if %p
  ttarget.ret
}
// CHECK-LABEL: ttarget.func @all(%x: !ttarget.param<u64>, %n: !ttarget.param<u32>, %s: !ttarget.param<f32>) maxntid = 128 {
// CHECK-NEXT: ttarget.shared "buf" size = 512 align = 16
// CHECK-NEXT: %p = ttarget.reg "pred"
// CHECK: %c0 = ttarget.imm 0 : i32
// CHECK: %one = ttarget.imm 1.000000e+00 : f32
// CHECK-NEXT: ttarget.ld_param "u64" %rd, %x : !ttarget.param<u64>
// CHECK: ttarget.cvta "to.global.u64" %rd, %rd
// CHECK-NEXT: ttarget.sreg %r2, "tid.x"
// CHECK-NEXT: ttarget.shared_addr %sm, "buf"
// CHECK-NEXT: ttarget.mov "f32" %g, %one
// CHECK-NEXT: ttarget.mov "f32" %g, %f if %p negated
// CHECK-NEXT: ttarget.pack "b32" %r, (%h, %h2)
// CHECK-NEXT: ttarget.unpack "b32" (%h, %h2), %r
// CHECK-NEXT: ttarget.ld "global.v2.f32" (%f, %g), [%rd + 8] if %p
// CHECK-NEXT: ttarget.st "shared.f32" [%sm + 0], (%f)
// CHECK-NEXT: ttarget.cp_async "cg.shared.global" [%sm + 16], [%rd + 0], 16 src_size %r
// CHECK-NEXT: ttarget.cp_async_commit
// CHECK-NEXT: ttarget.cp_async_mbarrier_arrive [%r]
// CHECK-NEXT: ttarget.cp_async_wait 0
// CHECK-NEXT: ttarget.bar_sync 0
// CHECK-NEXT: ttarget.bar_arrive 2 threads = 256
// CHECK-NEXT: ttarget.add "rn.f32" %f, %f, %one
// CHECK: ttarget.mul "wide.s32" %rd, %r, %c4
// CHECK: ttarget.fma "rn.f32" %f, %f, %g, %one
// CHECK: ttarget.cvt "rn.satfinite.e4m3x2.f32" %h, %f, %g
// CHECK-NEXT: ttarget.shfl "bfly.b32" %r, %r, %c4, %c4, %m1
// CHECK-NEXT: ttarget.label "LOOP"
// CHECK-NEXT: ttarget.bra "LOOP" if %p
// CHECK-NEXT: ttarget.ret
// GENERIC: "ttarget.func"() <{sym_name = "all", maxntid = #builtin.int<128>, target = "sm_90a"}>
// GENERIC: "ttarget.add"(%{{.*}}, %{{.*}}, %{{.*}}) <{mods = "rn.f32"}> : (!ttarget.reg, !ttarget.reg, !ttarget.reg) -> ()

ttarget.func @tensor_core() maxntid = 32 target = "sm_80" {
  %a0 = ttarget.reg "b32"
  %a1 = ttarget.reg "b32"
  %a2 = ttarget.reg "b32"
  %a3 = ttarget.reg "b32"
  %b0 = ttarget.reg "b32"
  %b1 = ttarget.reg "b32"
  %c0 = ttarget.reg "f32"
  %c1 = ttarget.reg "f32"
  %c2 = ttarget.reg "f32"
  %c3 = ttarget.reg "f32"
  ttarget.mma "bf16" (%c0, %c1, %c2, %c3), (%a0, %a1, %a2, %a3), (%b0, %b1), (%c0, %c1, %c2, %c3)
  ttarget.mma "tf32" (%c0, %c1, %c2, %c3), (%a0, %a1, %a2, %a3), (%b0, %b1), (%c0, %c1, %c2, %c3)
  ttarget.ret
}
// CHECK-LABEL: ttarget.func @tensor_core() maxntid = 32 target = "sm_80" {
// CHECK: ttarget.mma "bf16" (%c0, %c1, %c2, %c3), (%a0, %a1, %a2, %a3), (%b0, %b1), (%c0, %c1, %c2, %c3)
// CHECK: ttarget.mma "tf32" (%c0, %c1, %c2, %c3), (%a0, %a1, %a2, %a3), (%b0, %b1), (%c0, %c1, %c2, %c3)

func.func @host(%x: memref<64xf32>, %n: index) {
  ttarget.launch @k(%x, %n) grid = [2, 1, 1] : (memref<64xf32>, index)
  func.return
}
ttarget.func @k(%x: !ttarget.param<u64>, %n: !ttarget.param<u64>) maxntid = 32 {
  ttarget.ret
}
// CHECK-LABEL: func.func @host
// CHECK-NEXT: ttarget.launch @k(%x, %n) grid = [2, 1, 1] : (memref<64xf32>, index)
