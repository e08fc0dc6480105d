// RUN: tessera-opt %s -p lower-tile-to-target -t ptx | filecheck %s

// The f64 transcendentals lower without the f32-only approx instructions: exp and exp2 by
// a Cody-Waite reduction, a degree-13 Taylor polynomial and 2^n as two exponent fields;
// log and log2 from the bits (subnormals scaled by 2^54) and an atanh series in
// double-double; tanh from expm1; erf piecewise; powf as exp(b ln|a|) in double-double.

ttile.kernel @m(%x: memref<8xf64>, %o: memref<8xf64>) group_size = 8 {
  %i = ttile.linear_id
  %a = ttile.load %x[%i] : memref<8xf64> -> f64
  %e = math.exp %a : f64
  %f = math.exp %a fastmath<afn> : f64
  %e2 = math.exp2 %e : f64
  %l = math.log %e2 : f64
  %l2 = math.log2 %l : f64
  %t = math.tanh %l2 : f64
  %r = math.erf %t : f64
  %p = math.powf %r, %f : f64
  ttile.store %p, %o[%i] : f64, memref<8xf64>
  ttile.return
}
// CHECK-NOT:  ex2.approx
// CHECK-NOT:  lg2.approx
// CHECK:      max.f64 [[XC:%fd[0-9]+]], [[X:%fd[0-9]+]], 0dC087700000000000;
// CHECK-NEXT: min.f64 [[XC]], [[XC]], 0d4086300000000000;
// CHECK-NEXT: mul.rn.f64 [[T:%fd[0-9]+]], [[XC]], 0d3FF71547652B82FE;
// CHECK-NEXT: cvt.rni.f64.f64
// CHECK:      fma.rn.f64 {{%fd[0-9]+}}, {{%fd[0-9]+}}, 0d3FE62E42FEFA39EF, [[XC]];
// CHECK:      shl.b64 {{%rd[0-9]+}}, {{%rd[0-9]+}}, 52;
// CHECK:      setp.nan.f64
// CHECK:      shr.u64 {{%rd[0-9]+}}, {{%rd[0-9]+}}, 52;
// CHECK:      setp.gt.u64 {{%p[0-9]+}}, {{%rd[0-9]+}}, 4609047870845172685;
// CHECK:      div.rn.f64
// CHECK:      setp.equ.f64
// CHECK:      copysign.f64
// CHECK:      copysign.f64
// CHECK:      setp.neu.f64
// CHECK-NOT:  ex2.approx
