// RUN: tessera-opt %s -p lower-tile-to-target -t ptx | filecheck %s

// math.powf follows C's powf: |a|^b by exp2(b log2 |a|), negated for a < 0 and an odd
// integer b, NaN for a < 0 and a non-integer b, exactly 1 for b == 0 or a == 1.

ttile.kernel @p(%x: memref<8xf32>, %y: memref<8xf32>, %o: memref<8xf32>) group_size = 8 {
  %i = ttile.linear_id
  %a = ttile.load %x[%i] : memref<8xf32> -> f32
  %b = ttile.load %y[%i] : memref<8xf32> -> f32
  %r = math.powf %a, %b : f32
  ttile.store %r, %o[%i] : f32, memref<8xf32>
  ttile.return
}
// CHECK:      abs.f32 [[ABS:%f[0-9]+]], [[A:%f[0-9]+]];
// CHECK-NEXT: lg2.approx.f32 [[LG:%f[0-9]+]], [[ABS]];
// CHECK-NEXT: mul.rn.f32 [[T:%f[0-9]+]], [[LG]], [[B:%f[0-9]+]];
// CHECK-NEXT: ex2.approx.f32 [[MAG:%f[0-9]+]], [[T]];
// CHECK-NEXT: cvt.rzi.f32.f32 {{%f[0-9]+}}, [[B]];
// CHECK:      setp.lt.f32 [[NEG:%p[0-9]+]], [[A]], 0f00000000;
// CHECK:      selp.f32 {{%f[0-9]+}}, {{%f[0-9]+}}, 0f7FC00000, {{%p[0-9]+}};
// CHECK:      setp.eq.f32 {{%p[0-9]+}}, [[B]], 0f00000000;
// CHECK:      setp.eq.f32 {{%p[0-9]+}}, [[A]], 0f3F800000;
