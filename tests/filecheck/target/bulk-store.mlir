// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s -t ptx | filecheck %s --check-prefix=PTX

// The TMA-store epilogue ops: a named barrier of one warpgroup, the TMA store of a
// shared-memory box, its bulk group commit and the waits (for the read, then for all).

ttarget.func @store(%c: !ttarget.param<tmap>) maxntid = 128 {
  ttarget.extern_shared "smem" align = 1024
  %s = ttarget.reg "b32"
  %x = ttarget.reg "b32"
  %p = ttarget.reg "pred"
  %map = ttarget.reg "b64"
  ttarget.extern_shared_addr %s, "smem"
  ttarget.param_addr %map, %c : !ttarget.param<tmap>
  ttarget.bulk_wait 0 read
  ttarget.bar_sync 1 threads = 128
  ttarget.st "shared.b32" [%s + 1024], (%x)
  ttarget.fence "proxy_async"
  ttarget.bar_sync 1 threads = 128
  ttarget.cp_async_bulk_tensor_store [%map, %x, %x], [%s] if %p
  ttarget.fence "bulk_commit"
  ttarget.bulk_wait 0
  ttarget.ret
}

// CHECK:      ttarget.bulk_wait 0 read
// CHECK-NEXT: ttarget.bar_sync 1 threads = 128
// CHECK-NEXT: ttarget.st "shared.b32" [%s + 1024], (%x)
// CHECK-NEXT: ttarget.fence "proxy_async"
// CHECK-NEXT: ttarget.bar_sync 1 threads = 128
// CHECK-NEXT: ttarget.cp_async_bulk_tensor_store [%map, %x, %x], [%s] if %p
// CHECK-NEXT: ttarget.fence "bulk_commit"
// CHECK-NEXT: ttarget.bulk_wait 0

// PTX:      cp.async.bulk.wait_group.read 0;
// PTX-NEXT: bar.sync 1, 128;
// PTX-NEXT: st.shared.b32 [%r0+1024], %r1;
// PTX-NEXT: fence.proxy.async.shared::cta;
// PTX-NEXT: bar.sync 1, 128;
// PTX-NEXT: @%p0 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd0, {%r1, %r1}], [%r0];
// PTX-NEXT: cp.async.bulk.commit_group;
// PTX-NEXT: cp.async.bulk.wait_group 0;
