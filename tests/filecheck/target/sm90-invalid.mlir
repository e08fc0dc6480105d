// RUN: tessera-opt %s --split-input-file --verify-diagnostics

ttarget.func @k() maxntid = 128 {
  %d = ttarget.reg "f32"
  %a = ttarget.reg "b64"
  %p = ttarget.reg "pred"
  // expected-error@+1 {{ttarget.wgmma: D needs 4 f32 registers for N=8, got 1}}
  ttarget.wgmma "m64n8k16.f32.bf16.bf16" (%d), %a, %a, %p trans_a = 0 trans_b = 0
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 128 {
  // expected-error@+1 {{ttarget.setmaxnreg: register count must be a multiple of 8 in [24, 256], got 20}}
  ttarget.setmaxnreg "dec" 20
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 128 {
  %r = ttarget.reg "b32"
  // expected-error@+1 {{ttarget.cp_async_bulk_tensor: tensor map address must be a b64 register}}
  ttarget.cp_async_bulk_tensor [%r], [%r, %r, %r], [%r]
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 128 {
  %d = ttarget.reg "f32"
  %b = ttarget.reg "b64"
  %a = ttarget.reg "b32"
  %p = ttarget.reg "pred"
  // expected-error@+1 {{ttarget.wgmma_rs: A needs 4 b32 registers, got 2}}
  ttarget.wgmma_rs "m64n8k16.f32.bf16.bf16" (%d, %d, %d, %d), (%a, %a), %b, %p trans_b = 1
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 128 {
  %d = ttarget.reg "f32"
  %b = ttarget.reg "b32"
  %a = ttarget.reg "b32"
  %p = ttarget.reg "pred"
  // expected-error@+1 {{ttarget.wgmma_rs: B descriptor must be a b64 register}}
  ttarget.wgmma_rs "m64n8k16.f32.bf16.bf16" (%d, %d, %d, %d), (%a, %a, %a, %a), %b, %p trans_b = 1
  ttarget.ret
}
