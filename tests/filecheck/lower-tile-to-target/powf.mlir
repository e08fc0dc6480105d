// RUN: tessera-opt %s -p lower-tile-to-target -t ptx | filecheck %s

// math.powf follows C's powf: |a|^b by exp(b ln |a|), negated for a < 0 and an odd
// integer b, NaN for a < 0 and a non-integer b, exactly 1 for b == 0 or a == 1.

ttile.kernel @p(%x: memref<8xf32>, %y: memref<8xf32>, %o: memref<8xf32>) group_size = 8 {
  %i = ttile.linear_id
  %a = ttile.load %x[%i] : memref<8xf32> -> f32
  %b = ttile.load %y[%i] : memref<8xf32> -> f32
  %r = math.powf %a, %b : f32
  ttile.store %r, %o[%i] : f32, memref<8xf32>
  ttile.return
}
// An f32 power is computed in f64 (double-double log, then exp) from its widened operands
// and rounded once.
// CHECK:      cvt.f64.f32 [[A:%fd[0-9]+]], {{%f[0-9]+}};
// CHECK-NEXT: cvt.f64.f32 [[B:%fd[0-9]+]], {{%f[0-9]+}};
// CHECK:      abs.f64 {{%fd[0-9]+}}, [[A]];
// CHECK:      cvt.rzi.f64.f64 {{%fd[0-9]+}}, [[B]];
// CHECK:      setp.lt.f64 [[NEG:%p[0-9]+]], [[A]], 0d0000000000000000;
// CHECK:      selp.f64 {{%fd[0-9]+}}, {{%fd[0-9]+}}, 0d7FF8000000000000, {{%p[0-9]+}};
// CHECK:      setp.eq.f64 {{%p[0-9]+}}, [[B]], 0d0000000000000000;
// CHECK:      setp.eq.f64 {{%p[0-9]+}}, [[A]], 0d3FF0000000000000;
// CHECK:      cvt.rn.f32.f64 {{%f[0-9]+}}, {{%fd[0-9]+}};
