// RUN: tessera-opt %s -p lower-tile-to-target -t ptx | filecheck %s

// fp8 tensor-core product: m16n8k32, four fp8 codes per .b32 fragment register.
ttile.kernel @mma8(%x: memref<1xf32>) group_size = 32 {
  %a = arith.constant dense<1.0> : vector<16xf8E4M3FN>
  %b = arith.constant dense<2.0> : vector<8xf8E4M3FN>
  %c = arith.constant dense<0.0> : vector<4xf32>
  %d = ttile.mma %a, %b, %c accum = f32 : vector<16xf8E4M3FN>, vector<8xf8E4M3FN>, vector<4xf32> -> vector<4xf32>
  %d0 = vector.extract %d[0] : f32 from vector<4xf32>
  %c0 = arith.constant 0 : index
  ttile.store %d0, %x[%c0] : f32, memref<1xf32>
  ttile.return
}

// CHECK: .version 8.4
// CHECK-LABEL: .visible .entry mma8(
// CHECK: mov.b16 %rs{{[0-9]+}}, 56;
// CHECK: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%f{{.*}}}, {%r{{.*}}}, {%r{{.*}}}, {%f{{.*}}};

// f32 -> e4m3: saturating cvt, then NaN for |x| > 464 (0x43E80000) and NaN inputs.
ttile.kernel @to_e4m3(%x: memref<4xf32>, %y: memref<4xf8E4M3FN>) group_size = 4 {
  %i = ttile.local_id
  %v = ttile.load %x[%i] : memref<4xf32> -> f32
  %q = arith.truncf %v : f32 to f8E4M3FN
  ttile.store %q, %y[%i] : f8E4M3FN, memref<4xf8E4M3FN>
  ttile.return
}

// CHECK-LABEL: .visible .entry to_e4m3(
// CHECK: cvt.rn.satfinite.e4m3x2.f32 %rs[[C:[0-9]+]], %f[[X:[0-9]+]], %f[[X]];
// CHECK: setp.gt.u32 %p[[O:[0-9]+]], %r{{[0-9]+}}, 1139277824;
// CHECK: or.b16 %rs[[N:[0-9]+]], %rs{{[0-9]+}}, 127;
// CHECK: selp.b16 %rs{{[0-9]+}}, %rs[[N]], %rs[[C]], %p[[O]];
// CHECK: st.global.b8

// e5m2 -> f32: both bytes get the code, widened exactly through f16x2.
ttile.kernel @from_e5m2(%x: memref<4xf8E5M2>, %y: memref<4xf32>) group_size = 4 {
  %i = ttile.local_id
  %v = ttile.load %x[%i] : memref<4xf8E5M2> -> f8E5M2
  %w = arith.extf %v : f8E5M2 to f32
  ttile.store %w, %y[%i] : f32, memref<4xf32>
  ttile.return
}

// CHECK-LABEL: .visible .entry from_e5m2(
// CHECK: ld.global.b8
// CHECK: cvt.rn.f16x2.e5m2x2 %r{{[0-9]+}}, %rs{{[0-9]+}};
// CHECK: cvt.f32.f16
