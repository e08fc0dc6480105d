// RUN: tessera-opt %s -p lower-tile-to-target | filecheck %s
// RUN: tessera-opt %s -p lower-tile-to-target -t ptx | filecheck %s --check-prefix=PTX

// Shared memory (with XOR swizzle), async copies, barriers, vector accesses,
// reductions and tensor-core MMA.

ttile.kernel @smem(%a: memref<16x64xbf16>, %out: memref<16x64xbf16>, %sum: memref<1xf32>) group_size = 128 {
  %l = ttile.local_id
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %row = arith.divui %l, %c8 : index
  %col8 = arith.remui %l, %c8 : index
  %col = arith.muli %col8, %c8 : index
  %s = ttile.alloc_shared swizzle = "xor" : memref<16x64xbf16, #tessera.smem>
  %inb = arith.cmpi ult, %row, %c16 : index
  scf.if %inb {
    ttile.copy_async %s[%row, %col], %a[%row, %col] elems = 8 : memref<16x64xbf16, #tessera.smem>, memref<16x64xbf16>
  }
  ttile.commit_group
  ttile.wait_group 0
  ttile.barrier
  %v = ttile.load_vector %s[%row, %col] mask %inb : memref<16x64xbf16, #tessera.smem> -> vector<8xbf16>
  ttile.store_vector %v, %out[%row, %col] mask %inb : vector<8xbf16>, memref<16x64xbf16>
  %e = vector.extract %v[0] : bf16 from vector<8xbf16>
  %f = arith.extf %e : bf16 to f32
  %t = ttile.reduce %f kind = sum scope = group : f32
  %lead = arith.cmpi eq, %l, %c0 : index
  ttile.store %t, %sum[%c0] mask %lead : f32, memref<1xf32>
  ttile.return
}
// CHECK-LABEL: ttarget.func @smem
// CHECK:        ttarget.shared "red1" size = 16 align = 16
// CHECK:        ttarget.shared "smem0" size = 2048 align = 16
// CHECK:        ttarget.shared_addr [[S:%.*]], "smem0"
// Swizzle: chunk (col*2/16) XOR (row % 8), times 16, plus the byte within the chunk.
// CHECK:        ttarget.shr "u32" [[CHUNK:%.*]], [[CB:%.*]], %{{.*}}
// CHECK-NEXT:   [[RM:%.*]] = ttarget.reg "b32"
// CHECK-NEXT:   ttarget.and "b32" [[RM]], [[ROW:%.*]], [[SEVEN:%.*]]
// CHECK-NEXT:   [[SW:%.*]] = ttarget.reg "b32"
// CHECK-NEXT:   ttarget.xor "b32" [[SW]], [[CHUNK]], [[RM]]
// CHECK:        ttarget.cp_async "cg.shared.global" [%{{.*}} + 0], [%{{.*}} + 0], 16
// CHECK:        ttarget.cp_async_commit
// CHECK-NEXT:   ttarget.cp_async_wait 0
// CHECK-NEXT:   ttarget.bar_sync 0
// CHECK:        ttarget.ld "shared.v4.b32" ([[W0:%.*]], [[W1:%.*]], [[W2:%.*]], [[W3:%.*]]), [%{{.*}} + 0] if
// CHECK:        ttarget.unpack "b32" ([[E0:%.*]], [[E1:%.*]]), [[W0]]
// CHECK:        ttarget.st "global.v4.b32" [%{{.*}} + 0], (%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) if
// A bf16 widens to f32 by a shift of its bits (exact, NaN sign and payload kept).
// CHECK:        ttarget.cvt "u32.u16" [[WIDE:%.*]], %{{.*}}
// CHECK-NEXT:   ttarget.shl "b32" [[WIDE]], [[WIDE]], %{{.*}}
// CHECK-NEXT:   ttarget.mov "b32" %{{.*}}, [[WIDE]]
// Butterfly over the warp, then the warps in order through shared memory.
// CHECK:        ttarget.shfl "bfly.b32" %{{.*}}, %{{.*}}, [[O16:%.*]], %{{.*}}, %{{.*}}
// CHECK:        ttarget.shfl "bfly.b32"
// CHECK:        ttarget.shfl "bfly.b32"
// CHECK:        ttarget.shfl "bfly.b32"
// CHECK:        ttarget.shfl "bfly.b32"
// CHECK-NOT:    ttarget.shfl
// CHECK:        ttarget.st "shared.f32" [%{{.*}} + 0], (%{{.*}}) if
// CHECK-NEXT:   ttarget.bar_sync 0
// CHECK:        ttarget.ld "shared.f32" (%{{.*}}), [%{{.*}} + 0]
// CHECK:        ttarget.ld "shared.f32" (%{{.*}}), [%{{.*}} + 4]
// CHECK:        ttarget.ld "shared.f32" (%{{.*}}), [%{{.*}} + 8]
// CHECK:        ttarget.ld "shared.f32" (%{{.*}}), [%{{.*}} + 12]
// CHECK:        ttarget.bar_sync 0

// PTX: .shared .align 16 .b8 smem0[2048];
// PTX: cp.async.cg.shared.global [%r{{[0-9]+}}], [%rd{{[0-9]+}}], 16;
// PTX: ld.shared.v4.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, [%r{{[0-9]+}}];
// PTX: shfl.sync.bfly.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, 16, 31, -1;

ttile.kernel @mma(%x: memref<1xf32>) group_size = 32 {
  %a = arith.constant dense<1.0> : vector<8xbf16>
  %b = arith.constant dense<2.0> : vector<4xbf16>
  %c = arith.constant dense<0.0> : vector<4xf32>
  %d = ttile.mma %a, %b, %c accum = f32 : vector<8xbf16>, vector<4xbf16>, vector<4xf32> -> vector<4xf32>
  %d0 = vector.extract %d[0] : f32 from vector<4xf32>
  %c0 = arith.constant 0 : index
  ttile.store %d0, %x[%c0] : f32, memref<1xf32>
  ttile.return
}
// CHECK-LABEL: ttarget.func @mma
// CHECK:        ttarget.mov "b16" %{{.*}}, [[ONE:%.*]]
// CHECK:        ttarget.pack "b32" [[A0:%.*]], (%{{.*}}, %{{.*}})
// CHECK:        ttarget.mma "bf16" ([[D0:%.*]], %{{.*}}, %{{.*}}, %{{.*}}), ([[A0]], %{{.*}}, %{{.*}}, %{{.*}}), (%{{.*}}, %{{.*}}), (%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// CHECK:        ttarget.mov "f32" %{{.*}}, [[D0]]
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f{{[0-9]+}}, %f{{[0-9]+}}, %f{{[0-9]+}}, %f{{[0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}}, {%f{{[0-9]+}}, %f{{[0-9]+}}, %f{{[0-9]+}}, %f{{[0-9]+}}};

// Scalar accesses of a 1-D shared buffer at constant distances from one index (a
// stencil's taps) share one address register: the constant part is the instruction's
// immediate offset (f32: 4 bytes per element); global accesses keep theirs in the address.
ttile.kernel @taps(%g: memref<64xf32>) group_size = 32 {
  %l = ttile.local_id
  %s = ttile.alloc_shared : memref<64xf32, #tessera.smem>
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %i2 = arith.addi %l, %c2 : index
  %i5 = arith.addi %i2, %c3 : index
  %v = ttile.load %g[%i5] : memref<64xf32> -> f32
  ttile.store %v, %s[%i2] : f32, memref<64xf32, #tessera.smem>
  ttile.barrier
  %a = ttile.load %s[%l] : memref<64xf32, #tessera.smem> -> f32
  %b = ttile.load %s[%i5] : memref<64xf32, #tessera.smem> -> f32
  %t = arith.addf %a, %b : f32
  ttile.store %t, %g[%l] : f32, memref<64xf32>
  ttile.return
}
// CHECK-LABEL: ttarget.func @taps
// CHECK:        ttarget.ld "global.f32" (%{{.*}}), [%{{.*}} + 0]
// CHECK:        ttarget.st "shared.f32" [[[A:%.*]] + 8], (%{{.*}})
// CHECK:        ttarget.bar_sync 0
// CHECK:        ttarget.ld "shared.f32" (%{{.*}}), [[[B:%.*]] + 0]
// CHECK:        ttarget.ld "shared.f32" (%{{.*}}), [[[B2:%.*]] + 20]
