// RUN: tessera-opt %s -p lower-tile-to-target -t ptx | filecheck %s

// math.sin / math.cos: a Cody-Waite reduction r = x - k pi/2 (k = rni(x 2/pi), pi/2 in
// three fma steps), f32 arguments above 2^17 branching to the same reduction in f64,
// then Taylor polynomials chosen and signed by the quadrant k mod 4 (cosine one
// quadrant on); |x| > 2^40 gives NaN. No sin.approx / cos.approx.

ttile.kernel @s(%x: memref<8xf32>, %o: memref<8xf32>) group_size = 8 {
  %i = ttile.linear_id
  %a = ttile.load %x[%i] : memref<8xf32> -> f32
  %r = math.sin %a : f32
  ttile.store %r, %o[%i] : f32, memref<8xf32>
  ttile.return
}
// CHECK-LABEL: .entry s(
// CHECK-NOT:  sin.approx
// CHECK:      abs.f32 [[AX:%f[0-9]+]], [[X:%f[0-9]+]];
// CHECK-NEXT: mul.rn.f32 [[J:%f[0-9]+]], [[X]], 0f3F22F983;
// CHECK-NEXT: cvt.rni.f32.f32 [[K:%f[0-9]+]], [[J]];
// CHECK-NEXT: neg.f32 [[NK:%f[0-9]+]], [[K]];
// CHECK-NEXT: fma.rn.f32 [[R:%f[0-9]+]], [[NK]], 0f3FC90FDB, [[X]];
// CHECK-NEXT: fma.rn.f32 [[R]], [[NK]], 0fB33BBD2E, [[R]];
// CHECK-NEXT: fma.rn.f32 [[R]], [[NK]], 0fA6F72CED, [[R]];
// CHECK-NEXT: cvt.rzi.s32.f32 [[Q:%r[0-9]+]], [[K]];
// CHECK-NEXT: setp.gt.f32 [[BIG:%p[0-9]+]], [[AX]], 0f48000000;
// CHECK-NEXT: @![[BIG]] bra [[DONE:L_sincos_reduced_[0-9]+]];
// CHECK-NEXT: cvt.f64.f32 [[XD:%fd[0-9]+]], [[X]];
// CHECK:      fma.rn.f64 [[RD:%fd[0-9]+]], {{%fd[0-9]+}}, 0d3FF921FB54442D18, [[XD]];
// CHECK-NEXT: fma.rn.f64 [[RD]], {{%fd[0-9]+}}, 0d3C91A62633145C07, [[RD]];
// CHECK-NEXT: fma.rn.f64 [[RD]], {{%fd[0-9]+}}, 0dB91F1976B7ED8FBC, [[RD]];
// CHECK:      cvt.rmi.f64.f64
// CHECK:      cvt.rzi.s32.f64 [[Q]],
// CHECK-NEXT: cvt.rn.f32.f64 [[R]], [[RD]];
// CHECK-NEXT: [[DONE]]:
// CHECK-NEXT: setp.eq.f32 [[K0:%p[0-9]+]], [[K]], 0f00000000;
// CHECK-NEXT: selp.f32 [[R]], [[X]], [[R]], [[K0]];
// CHECK-NOT:  add.s32
// CHECK:      and.b32 {{%r[0-9]+}}, [[Q]], 1;
// CHECK:      and.b32 {{%r[0-9]+}}, [[Q]], 2;
// CHECK:      setp.eq.f32 [[Z:%p[0-9]+]], [[X]], 0f00000000;
// CHECK-NEXT: selp.f32 {{%f[0-9]+}}, [[X]], {{%f[0-9]+}}, [[Z]];
// CHECK-NEXT: setp.gt.f32 [[OUT:%p[0-9]+]], [[AX]], 0f53800000;
// CHECK-NEXT: selp.f32 {{%f[0-9]+}}, 0f7FC00000, {{%f[0-9]+}}, [[OUT]];

ttile.kernel @c(%x: memref<8xf64>, %o: memref<8xf64>) group_size = 8 {
  %i = ttile.linear_id
  %a = ttile.load %x[%i] : memref<8xf64> -> f64
  %r = math.cos %a : f64
  ttile.store %r, %o[%i] : f64, memref<8xf64>
  ttile.return
}
// CHECK-LABEL: .entry c(
// CHECK-NOT:  bra
// CHECK:      mul.rn.f64 {{%fd[0-9]+}}, [[Y:%fd[0-9]+]], 0d3FE45F306DC9C883;
// CHECK:      fma.rn.f64 [[RY:%fd[0-9]+]], {{%fd[0-9]+}}, 0d3FF921FB54442D18, [[Y]];
// CHECK:      cvt.rzi.s32.f64 [[QY:%r[0-9]+]],
// CHECK:      add.s32 [[QY]], [[QY]], 1;
// CHECK:      setp.gt.f64 [[OUTY:%p[0-9]+]], {{%fd[0-9]+}}, 0d4270000000000000;
// CHECK-NEXT: selp.f64 {{%fd[0-9]+}}, 0d7FF8000000000000, {{%fd[0-9]+}}, [[OUTY]];
