// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s -t ptx | filecheck %s --check-prefix=PTX

// Thread-block clusters: the kernel's cluster size, cluster special registers, mapa,
// remote mbarrier arrives, TMA multicast and the cluster barrier round-trip and print as PTX.

ttarget.func @pair(%t: !ttarget.param<tmap>) maxntid = 128 cluster = 2 {
  ttarget.extern_shared "smem" align = 1024
  %s = ttarget.reg "b32"
  %rank = ttarget.reg "b32"
  %remote = ttarget.reg "b32"
  %x = ttarget.reg "b32"
  %map = ttarget.reg "b64"
  %mask = ttarget.imm 3 : i16
  %one = ttarget.imm 1 : i32
  ttarget.extern_shared_addr %s, "smem"
  ttarget.sreg %rank, "cluster_ctarank"
  ttarget.param_addr %map, %t : !ttarget.param<tmap>
  ttarget.fence "cluster_arrive"
  ttarget.fence "cluster_wait"
  ttarget.cp_async_bulk_tensor [%s], [%map, %x, %x], [%s] multicast %mask
  ttarget.mapa %remote, %s, %one
  ttarget.mbarrier_arrive [%remote] cluster
  ttarget.ret
}

// CHECK:      ttarget.func @pair(%t: !ttarget.param<tmap>) maxntid = 128 cluster = 2 {
// CHECK:        ttarget.sreg %rank, "cluster_ctarank"
// CHECK:        ttarget.fence "cluster_arrive"
// CHECK-NEXT:   ttarget.fence "cluster_wait"
// CHECK-NEXT:   ttarget.cp_async_bulk_tensor [%s], [%map, %x, %x], [%s] multicast %mask
// CHECK-NEXT:   ttarget.mapa %remote, %s, %one
// CHECK-NEXT:   ttarget.mbarrier_arrive [%remote] cluster

// PTX:      .maxntid 128, 1, 1
// PTX-NEXT: .reqnctapercluster 2, 1, 1
// PTX:      mov.u32 %r1, %cluster_ctarank;
// PTX:      barrier.cluster.arrive.release;
// PTX-NEXT: barrier.cluster.wait.acquire;
// PTX-NEXT: cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%r0], [%rd0, {%r3, %r3}], [%r0], 3;
// PTX-NEXT: mapa.shared::cluster.u32 %r2, %r0, 1;
// PTX-NEXT: mbarrier.arrive.shared::cluster.b64 _, [%r2];
