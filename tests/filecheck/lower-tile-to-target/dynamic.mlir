// RUN: tessera-opt %s --split-input-file -p lower-tile-to-target | filecheck %s
// RUN: tessera-opt %s --split-input-file -p lower-tile-to-target -t ptx | filecheck %s --check-prefix=PTX

// Memrefs with dynamic dims: the sizes named by `sizes = [...]` are index
// parameters, and row-major strides over dynamic dims are computed from them.

// A[i, j] of memref<?x?xf32> with sizes [%m, %n]: offset i * n + j, times 4 bytes.
ttile.kernel @dyn2d(%a: memref<?x?xf32>, %b: memref<?x8x?xf32>, %m: index, %n: index, %k: index) group_size = 64 sizes = [%m, %n, %k, %n] {
  %i = ttile.tile_id x
  %j = ttile.local_id
  %v = ttile.load %a[%i, %j] : memref<?x?xf32> -> f32
  ttile.store %v, %b[%i, %j, %j] : f32, memref<?x8x?xf32>
  ttile.return
}
// CHECK-LABEL: ttarget.func @dyn2d
// CHECK-SAME:   (%{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<u64>, [[PN:%.*]]: !ttarget.param<u64>, %{{.*}}: !ttarget.param<u64>)
// CHECK:        ttarget.ld_param "u64" [[NR:%.*]], [[PN]] :
// The load: i * n + j, then base + 4 * that.
// CHECK:        ttarget.mad "lo.s64" [[LIN:%.*]], [[I:%.*]], [[NR]], [[J:%.*]]
// CHECK-NEXT:   [[ADDR:%.*]] = ttarget.reg "b64"
// CHECK-NEXT:   ttarget.mad "lo.s64" [[ADDR]], [[LIN]], %{{.*}}, %{{.*}}
// CHECK-NEXT:   [[V:%.*]] = ttarget.reg "f32"
// CHECK-NEXT:   ttarget.ld "global.f32" ([[V]]), [[[ADDR]] + 0]
// The store into ?x8x?: j + j * n' + i * (8 * n'), n' being the size of the last dim (%n).
// CHECK:        ttarget.mad "lo.s64" [[T1:%.*]], [[J]], [[NR]], [[J]]
// CHECK-NEXT:   [[S8:%.*]] = ttarget.reg "b64"
// CHECK-NEXT:   ttarget.mul "lo.s64" [[S8]], [[NR]], %{{.*}}
// CHECK-NEXT:   [[T2:%.*]] = ttarget.reg "b64"
// CHECK-NEXT:   ttarget.mad "lo.s64" [[T2]], [[I]], [[S8]], [[T1]]
// CHECK:        ttarget.st "global.f32"

// PTX-LABEL: .visible .entry dyn2d(
// PTX-NEXT:    .param .u64 dyn2d_param_0,
// PTX-NEXT:    .param .u64 dyn2d_param_1,
// PTX-NEXT:    .param .u64 dyn2d_param_2,
// PTX-NEXT:    .param .u64 dyn2d_param_3,
// PTX-NEXT:    .param .u64 dyn2d_param_4
// PTX:         mad.lo.s64
// PTX:         ld.global.f32

// -----

// Only the leading dim of a 1-D memref is dynamic: addressing needs no size.
ttile.kernel @lead(%x: memref<?xf32>, %r: memref<?xf32>, %n: index) group_size = 32 sizes = [%n, ?] {
  %i = ttile.linear_id
  %v = ttile.load %x[%i] : memref<?xf32> -> f32
  ttile.store %v, %r[%i] : f32, memref<?xf32>
  ttile.return
}
// CHECK-LABEL: ttarget.func @lead
// CHECK:        ttarget.ld "global.f32"
// CHECK:        ttarget.st "global.f32"
