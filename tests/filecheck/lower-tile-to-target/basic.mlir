// RUN: tessera-opt %s -p lower-tile-to-target | filecheck %s
// RUN: tessera-opt %s -p lower-tile-to-target -t ptx | filecheck %s --check-prefix=PTX

// Lane coordinates, masked accesses and launches.

ttile.kernel @axpy(%x: memref<100xf32>, %y: memref<100xf32>, %a: f32) group_size = 128 {
  %i = ttile.linear_id
  %n = arith.constant 100 : index
  %m = arith.cmpi ult, %i, %n : index
  %o = arith.constant -1.0 : f32
  %v = ttile.load %x[%i] mask %m other %o : memref<100xf32> -> f32
  %w = arith.mulf %v, %a : f32
  ttile.store %w, %y[%i] mask %m : f32, memref<100xf32>
  ttile.return
}
func.func @main(%x: memref<100xf32>, %a: f32) -> memref<100xf32> {
  %y = memref.alloc() : memref<100xf32>
  ttile.launch @axpy(%x, %y, %a) grid = [1, 1, 1] : (memref<100xf32>, memref<100xf32>, f32)
  func.return %y : memref<100xf32>
}
// CHECK:      ttarget.func @axpy(%{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<f32>) maxntid = 128 {
// CHECK:        ttarget.ld_param "u64" [[RAW:%.*]], %{{.*}} : !ttarget.param<u64>
// CHECK-NEXT:   [[X:%.*]] = ttarget.reg "b64"
// CHECK-NEXT:   ttarget.cvta "to.global.u64" [[X]], [[RAW]]
// CHECK:        ttarget.sreg [[TID:%.*]], "tid.x"
// CHECK:        ttarget.sreg [[CTA:%.*]], "ctaid.x"
// CHECK:        ttarget.mul "wide.u32" [[W:%.*]], [[CTA]], %{{.*}}
// CHECK:        ttarget.cvt "u64.u32" [[T64:%.*]], [[TID]]
// CHECK-NEXT:   ttarget.add "s64" [[I:%.*]], [[W]], [[T64]]
// CHECK:        ttarget.setp "lt.u64" [[M:%.*]], [[I]], %{{.*}}
// CHECK:        ttarget.mad "lo.s64" [[ADDR:%.*]], [[I]], %{{.*}}, [[X]]
// CHECK:        ttarget.mov "f32" [[V:%.*]], [[OTHER:%.*]]
// CHECK-NEXT:   ttarget.ld "global.f32" ([[V]]), [[[ADDR]] + 0] if [[M]]
// CHECK:        ttarget.mul "rn.f32" [[PROD:%.*]], [[V]], %{{.*}}
// CHECK:        ttarget.st "global.f32" [%{{.*}} + 0], ([[PROD]]) if [[M]]
// CHECK-NEXT:   ttarget.ret
// CHECK:      func.func @main
// CHECK:        ttarget.launch @axpy(%x, %y, %a) grid = [1, 1, 1] : (memref<100xf32>, memref<100xf32>, f32)

// PTX:      .visible .entry axpy(
// PTX:      .maxntid 128, 1, 1
// PTX:      mov.u32 %r{{[0-9]+}}, %tid.x;
// PTX:      setp.lt.u64 %p0, %rd{{[0-9]+}}, %rd{{[0-9]+}};
// PTX:      mov.f32 %f{{[0-9]+}}, %f{{[0-9]+}};
// PTX-NEXT: @%p0 ld.global.f32 %f{{[0-9]+}}, [%rd{{[0-9]+}}];
// PTX:      @%p0 st.global.f32 [%rd{{[0-9]+}}], %f{{[0-9]+}};
