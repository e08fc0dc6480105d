// RUN: tessera-opt %s -p lower-tile-to-target -t ptx | filecheck %s

// math.exp lowers to e^x within about 2 ulps over the whole f32 range: x = n ln2 + r with
// a two-part ln2, ex2.approx of r log2e (|r log2e| <= 1/2), times 2^n as two exponent
// fields (subnormal and overflowing results round once), NaN passed through. An exp
// marked fastmath<afn> (the kernels' own arithmetic) is ex2.approx of x log2e. math.log
// splits x into 2^e m (m in [sqrt(2)/2, sqrt(2)), subnormals scaled first) and takes
// log1p(m - 1) by the fdlibm polynomial, so x near 1 keeps its relative accuracy.

ttile.kernel @e(%x: memref<8xf32>, %o: memref<8xf32>, %p: memref<8xf32>, %q: memref<8xf32>) group_size = 8 {
  %i = ttile.linear_id
  %a = ttile.load %x[%i] : memref<8xf32> -> f32
  %r = math.exp %a : f32
  ttile.store %r, %o[%i] : f32, memref<8xf32>
  %f = math.exp %a fastmath<afn> : f32
  ttile.store %f, %p[%i] : f32, memref<8xf32>
  %l = math.log %a : f32
  ttile.store %l, %q[%i] : f32, memref<8xf32>
  ttile.return
}
// CHECK:      max.f32 [[XC:%f[0-9]+]], [[X:%f[0-9]+]], 0fC2D00000;
// CHECK-NEXT: min.f32 [[XC]], [[XC]], 0f42B20000;
// CHECK-NEXT: mul.rn.f32 [[T:%f[0-9]+]], [[XC]], 0f3FB8AA3B;
// CHECK-NEXT: cvt.rni.f32.f32 [[N:%f[0-9]+]], [[T]];
// CHECK-NEXT: fma.rn.f32 [[R:%f[0-9]+]], [[N]], 0fBF317200, [[XC]];
// CHECK-NEXT: fma.rn.f32 [[R]], [[N]], 0f{{[0-9A-F]+}}, [[R]];
// CHECK-NEXT: mul.rn.f32 [[U:%f[0-9]+]], [[R]], 0f3FB8AA3B;
// CHECK-NEXT: ex2.approx.f32 [[P:%f[0-9]+]], [[U]];
// CHECK-NEXT: cvt.rni.s32.f32 [[NI:%r[0-9]+]], [[N]];
// CHECK-NEXT: shr.s32 [[N1:%r[0-9]+]], [[NI]], 1;
// CHECK-NEXT: sub.s32 [[N2:%r[0-9]+]], [[NI]], [[N1]];
// CHECK:      mul.rn.f32
// CHECK:      mul.rn.f32 [[Y:%f[0-9]+]]
// CHECK:      setp.nan.f32 [[NAN:%p[0-9]+]], [[X]], [[X]];
// CHECK-NEXT: selp.f32 %f{{[0-9]+}}, [[X]], [[Y]], [[NAN]];
// The fast exp: two instructions.
// CHECK:      mul.rn.f32 [[FT:%f[0-9]+]], [[X]], 0f3FB8AA3B;
// CHECK-NEXT: ex2.approx.f32 %f{{[0-9]+}}, [[FT]];
// CHECK-NOT:  lg2.approx
// CHECK:      setp.lt.f32 {{%p[0-9]+}}, [[X]], 0f00800000;
// CHECK:      setp.gt.u32 {{%p[0-9]+}}, {{%r[0-9]+}}, 1068827891;
// CHECK:      div.rn.f32
// CHECK:      cvt.rn.f32.s32
// CHECK:      setp.eq.f32 {{%p[0-9]+}}, [[X]], 0f00000000;
// CHECK:      setp.lt.f32 {{%p[0-9]+}}, [[X]], 0f00000000;
// CHECK:      setp.equ.f32 [[SP:%p[0-9]+]], [[X]], 0f7F800000;
// CHECK-NEXT: selp.f32 %f{{[0-9]+}}, [[X]], %f{{[0-9]+}}, [[SP]];
