// RUN: tessera-opt %s --split-input-file --verify-diagnostics
// RUN: not tessera-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=LOC

// Each verifier names the op and what is wrong.
// LOC: invalid.mlir:{{[0-9]+}}:3: error: ttarget.reg: unknown register class

ttarget.func @k() maxntid = 32 {
  // expected-error @+1 {{ttarget.reg: unknown register class 'b33'; valid: pred, b16, b32, b64, f32, f64}}
  %r = ttarget.reg "b33"
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  %r = ttarget.reg "b32"
  // expected-error @+1 {{ttarget.add: destination register of class f32 cannot hold a .s32 value}}
  ttarget.add "s32" %f, %r, %r
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  // expected-error @+1 {{ttarget.add: unknown modifier 'rx' in "rx.f32"}}
  ttarget.add "rx.f32" %f, %f, %f
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  // expected-error @+1 {{ttarget.div: .f32 needs a rounding modifier (rn, rz, rm, rp) or approx}}
  ttarget.div "f32" %f, %f, %f
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  %c = ttarget.imm 1 : i32
  // expected-error @+1 {{ttarget.add: destination must be a register declared by ttarget.reg}}
  ttarget.add "rn.f32" %c, %f, %f
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  %c = ttarget.imm 1 : i32
  // expected-error @+1 {{ttarget.add: a .f32 operand needs a f32 float immediate}}
  ttarget.add "rn.f32" %f, %f, %c
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  %r = ttarget.reg "b32"
  // expected-error @+1 {{ttarget.ld: "global.v4.f32" moves 4 value(s) but 1 are given}}
  ttarget.ld "global.v4.f32" (%f), [%r + 0]
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  %r = ttarget.reg "b32"
  // expected-error @+1 {{ttarget.ld: global address must be a b64 register, got b32}}
  ttarget.ld "global.f32" (%f), [%r + 0]
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  %rd = ttarget.reg "b64"
  // expected-error @+1 {{ttarget.ld: needs exactly one state space}}
  ttarget.ld "f32" (%f), [%rd + 0]
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  %r = ttarget.reg "b32"
  // expected-error @+1 {{ttarget.cvt: int .s32 to float .f32 needs a rounding modifier (rn, rz, rm, rp)}}
  ttarget.cvt "f32.s32" %f, %r
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  %r = ttarget.reg "b32"
  // expected-error @+1 {{ttarget.cvt: float .f32 to int .s32 needs an integer rounding (rni, rzi, rmi, rpi)}}
  ttarget.cvt "s32.f32" %r, %f
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  %h = ttarget.reg "b16"
  // expected-error @+1 {{ttarget.cvt: cvt to .e4m3x2 needs .satfinite}}
  ttarget.cvt "rn.e4m3x2.f32" %h, %f, %f
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  // expected-error @+1 {{ttarget.ex2: only the .approx form exists}}
  ttarget.ex2 "f32" %f, %f
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  %p = ttarget.reg "pred"
  // expected-error @+1 {{ttarget.setp: comparison 'lo' is not defined on .f32}}
  ttarget.setp "lo.f32" %p, %f, %f
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %r = ttarget.reg "b32"
  // expected-error @+1 {{ttarget.sreg: unknown special register 'tid.w'}}
  ttarget.sreg %r, "tid.w"
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %r = ttarget.reg "b32"
  // expected-error @+1 {{ttarget.bra: guard must be a pred register}}
  ttarget.bra "NOWHERE" if %r
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %p = ttarget.reg "pred"
  // expected-error @+1 {{ttarget.bra: no ttarget.label "NOWHERE" in this function}}
  ttarget.bra "NOWHERE" if %p
  ttarget.ret
}

// -----

// expected-error @+1 {{ttarget.func @k: label "A" defined twice}}
ttarget.func @k() maxntid = 32 {
  ttarget.label "A"
  ttarget.label "A"
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %r = ttarget.reg "b32"
  // expected-error @+1 {{ttarget.shared_addr: no ttarget.shared array named 'nope' in this function}}
  ttarget.shared_addr %r, "nope"
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  // expected-error @+1 {{ttarget.shared: size 300000 exceeds 227 KiB of shared memory}}
  ttarget.shared "big" size = 300000 align = 16
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  // expected-error @+1 {{ttarget.mma: mma inputs must be .bf16, .f16, .tf32, .e4m3 or .e5m2, got .f32}}
  ttarget.mma "f32" (%f, %f, %f, %f), (%f, %f, %f, %f), (%f, %f), (%f, %f, %f, %f)
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
  // expected-error @+1 {{ttarget.mma: A fragment registers must be b32, got f32}}
  ttarget.mma "bf16" (%f, %f, %f, %f), (%f, %f, %f, %f), (%f, %f), (%f, %f, %f, %f)
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %r = ttarget.reg "b32"
  %rd = ttarget.reg "b64"
  // expected-error @+1 {{ttarget.cp_async: .cg copies must be 16 bytes}}
  ttarget.cp_async "cg.shared.global" [%r + 0], [%rd + 0], 8
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %rd = ttarget.reg "b64"
  // expected-error @+1 {{ttarget.cp_async_mbarrier_arrive: barrier address}}
  ttarget.cp_async_mbarrier_arrive [%rd]
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 32 {
  %r = ttarget.reg "b32"
  // expected-error @+1 {{ttarget.mul: integer mul needs exactly one of lo, hi, wide (got "s32")}}
  ttarget.mul "s32" %r, %r, %r
  ttarget.ret
}

// -----

// expected-error @+1 {{ttarget.func @k: maxntid must be in [1, 1024], got 2048}}
ttarget.func @k() maxntid = 2048 {
  ttarget.ret
}

// -----

// expected-error @+1 {{ttarget.func @k: unknown target 'sm_70'; valid: sm_80, sm_86, sm_89, sm_90, sm_90a}}
ttarget.func @k() maxntid = 32 target = "sm_70" {
  ttarget.ret
}

// -----

// expected-error @+1 {{ttarget.func @k: ttarget.cvt needs sm_89, target is sm_80}}
ttarget.func @k() maxntid = 32 target = "sm_80" {
  %f = ttarget.reg "f32"
  %h = ttarget.reg "b16"
  ttarget.cvt "rn.satfinite.e4m3x2.f32" %h, %f, %f
  ttarget.ret
}

// -----

// expected-error @+1 {{ttarget.func @k: body must end with ttarget.ret or an unpredicated ttarget.bra}}
ttarget.func @k() maxntid = 32 {
  %f = ttarget.reg "f32"
}

// -----

func.func @host(%x: memref<4xf32>) {
  // expected-error @+1 {{ttarget.launch: kernel @k takes 1 parameters, got 2 arguments}}
  ttarget.launch @k(%x, %x) grid = [1, 1, 1] : (memref<4xf32>, memref<4xf32>)
  func.return
}
ttarget.func @k(%x: !ttarget.param<u64>) maxntid = 32 {
  ttarget.ret
}

// -----

func.func @host(%x: memref<4xf32>) {
  // expected-error @+1 {{ttarget.launch: no ttarget.func named @missing}}
  ttarget.launch @missing(%x) grid = [1, 1, 1] : (memref<4xf32>)
  func.return
}
