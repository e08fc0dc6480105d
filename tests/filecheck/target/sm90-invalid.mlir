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
  %d = ttarget.reg "f32"
  %a = ttarget.reg "b64"
  %p = ttarget.reg "pred"
  // expected-error@+1 {{ttarget.wgmma: tf32 operands are K-major: trans_a and trans_b must be 0}}
  ttarget.wgmma "m64n8k8.f32.tf32.tf32" (%d, %d, %d, %d), %a, %a, %p trans_a = 0 trans_b = 1
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 128 {
  %d = ttarget.reg "f32"
  %a = ttarget.reg "b64"
  %p = ttarget.reg "pred"
  // expected-error@+1 {{ttarget.wgmma: shape m64n8k16: needs m64, k8 and N a multiple of 8 in [8, 256]}}
  ttarget.wgmma "m64n8k16.f32.tf32.tf32" (%d, %d, %d, %d), %a, %a, %p trans_a = 0 trans_b = 0
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 128 minnctapersm = 1 {
  // expected-error@+1 {{ttarget.setmaxnreg: register count must be a multiple of 8 in [24, 256], got 20}}
  ttarget.setmaxnreg "dec" 20
  ttarget.ret
}

// -----

// expected-error@+1 {{ttarget.func @k: ttarget.setmaxnreg needs minnctapersm on the kernel (without it ptxas cannot fix the register count at entry and ignores setmaxnreg)}}
ttarget.func @k() maxntid = 384 {
  ttarget.setmaxnreg "dec" 24
  ttarget.ret
}

// -----

// expected-error@+1 {{ttarget.func @k: minnctapersm must be in [1, 32], got 0}}
ttarget.func @k() maxntid = 384 minnctapersm = 0 {
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

// -----

// expected-error@+1 {{ttarget.func @k: cluster must be in [1, 8] CTAs, got 16}}
ttarget.func @k() maxntid = 128 cluster = 16 {
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 128 {
  %r = ttarget.reg "b32"
  %tx = ttarget.imm 64 : i32
  // expected-error@+1 {{ttarget.mbarrier_arrive: expect_tx and cluster cannot be combined}}
  ttarget.mbarrier_arrive [%r] expect_tx %tx cluster
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 128 {
  %r = ttarget.reg "b32"
  %m = ttarget.reg "b64"
  // expected-error@+1 {{ttarget.cp_async_bulk_tensor: multicast mask register of class b64 cannot hold a .b16 value}}
  ttarget.cp_async_bulk_tensor [%r], [%m, %r, %r], [%r] multicast %m
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 128 {
  %r = ttarget.reg "b32"
  %p = ttarget.reg "pred"
  // expected-error@+1 {{ttarget.mapa: CTA rank register of class pred cannot hold a .u32 value}}
  ttarget.mapa %r, %r, %p
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 128 {
  // expected-error@+1 {{ttarget.bar_sync: thread count must be a multiple of 32 in [32, 1024], got 100}}
  ttarget.bar_sync 1 threads = 100
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 256 {
  // expected-error@+1 {{ttarget.bar_arrive: barrier id must be in [1, 15] (0 is the CTA barrier), got 0}}
  ttarget.bar_arrive 0 threads = 256
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 256 {
  // expected-error@+1 {{ttarget.bar_arrive: thread count must be a multiple of 32 in [32, 1024], got 200}}
  ttarget.bar_arrive 1 threads = 200
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 128 {
  %r = ttarget.reg "b32"
  // expected-error@+1 {{ttarget.cp_async_bulk_tensor_store: tensor map address must be a b64 register}}
  ttarget.cp_async_bulk_tensor_store [%r, %r, %r], [%r]
  ttarget.ret
}

// -----

ttarget.func @k() maxntid = 128 {
  // expected-error@+1 {{ttarget.bulk_wait: pending groups must be in [0, 7], got 9}}
  ttarget.bulk_wait 9 read
  ttarget.ret
}
