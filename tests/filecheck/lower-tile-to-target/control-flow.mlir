// RUN: tessera-opt %s -p lower-tile-to-target | filecheck %s

// scf becomes labels and branches; loop-carried values are registers
// written at the yield through temporaries.

ttile.kernel @loops(%x: memref<64xf32>, %y: memref<1xf32>) group_size = 32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %z = arith.constant 0.0 : f32
  %s = scf.for %i = %c0 to %c64 step %c1 iter_args(%acc = %z) -> (f32) {
    %v = ttile.load %x[%i] : memref<64xf32> -> f32
    %n = arith.addf %acc, %v : f32
    scf.yield %n : f32
  }
  %pos = arith.cmpf ogt, %s, %z : f32
  %r = scf.if %pos -> (f32) {
    scf.yield %s : f32
  } else {
    %neg = arith.negf %s : f32
    scf.yield %neg : f32
  }
  %w = scf.while (%k = %c0) : (index) -> index {
    %more = arith.cmpi slt, %k, %c64 : index
    scf.condition(%more) %k : index
  } do {
  ^bb0(%k2: index):
    %k3 = arith.addi %k2, %c1 : index
    scf.yield %k3 : index
  }
  ttile.store %r, %y[%c0] : f32, memref<1xf32>
  ttile.return
}
// CHECK-LABEL: ttarget.func @loops
// CHECK:        ttarget.mov "f32" [[ZERO:%[0-9]+]], {{%[0-9]+}}
// CHECK-NEXT:   [[IV:%.*]] = ttarget.reg "b64"
// CHECK-NEXT:   ttarget.mov "b64" [[IV]], [[LB:%.*]]
// CHECK-NEXT:   [[ACC:%.*]] = ttarget.reg "f32"
// CHECK-NEXT:   [[TMP0:%.*]] = ttarget.reg "f32"
// CHECK-NEXT:   ttarget.mov "f32" [[TMP0]], [[INIT:%.*]]
// CHECK-NEXT:   ttarget.mov "f32" [[ACC]], [[TMP0]]
// CHECK-NEXT:   ttarget.label "L_for_1"
// CHECK-NEXT:   [[DONE:%.*]] = ttarget.reg "pred"
// CHECK-NEXT:   ttarget.setp "ge.s64" [[DONE]], [[IV]], [[UB:%.*]]
// CHECK-NEXT:   ttarget.bra "L_endfor_2" if [[DONE]]
// CHECK:        ttarget.ld "global.f32" ([[V:%.*]]), [%{{.*}} + 0]
// CHECK-NEXT:   [[N:%.*]] = ttarget.reg "f32"
// CHECK-NEXT:   ttarget.add "rn.f32" [[N]], [[ACC]], [[V]]
// CHECK-NEXT:   [[TMP1:%.*]] = ttarget.reg "f32"
// CHECK-NEXT:   ttarget.mov "f32" [[TMP1]], [[N]]
// CHECK-NEXT:   ttarget.mov "f32" [[ACC]], [[TMP1]]
// CHECK-NEXT:   ttarget.add "s64" [[IV]], [[IV]], [[STEP:%.*]]
// CHECK-NEXT:   ttarget.bra "L_for_1"
// CHECK-NEXT:   ttarget.label "L_endfor_2"
// CHECK:        ttarget.setp "gt.f32" [[POS:%.*]], [[ACC]], %{{.*}}
// CHECK-NEXT:   [[R:%.*]] = ttarget.reg "f32"
// CHECK-NEXT:   ttarget.bra "L_else_3" if [[POS]] negated
// CHECK:        ttarget.mov "f32" [[R]], %{{.*}}
// CHECK-NEXT:   ttarget.bra "L_endif_4"
// CHECK-NEXT:   ttarget.label "L_else_3"
// CHECK:        ttarget.neg "f32"
// CHECK:        ttarget.mov "f32" [[R]], %{{.*}}
// CHECK-NEXT:   ttarget.label "L_endif_4"
// CHECK:        ttarget.label "L_while_5"
// CHECK:        ttarget.setp "lt.s64" [[MORE:%.*]], %{{.*}}, %{{.*}}
// CHECK:        ttarget.bra "L_endwhile_6" if [[MORE]] negated
// CHECK:        ttarget.add "s64"
// CHECK:        ttarget.bra "L_while_5"
// CHECK-NEXT:   ttarget.label "L_endwhile_6"
// CHECK:        ttarget.st "global.f32" [%{{.*}} + 0], ([[R]])
// CHECK-NEXT:   ttarget.ret
