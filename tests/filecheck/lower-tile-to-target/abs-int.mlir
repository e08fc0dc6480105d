// RUN: tessera-opt %s -p lower-tile-to-target -t ptx | filecheck %s

// math.absi is PTX abs on the register width: i8 values are held sign-extended in 16-bit
// registers, so abs.s16 (abs of -128 wraps back to -128 when stored, as torch's).
ttile.kernel @absi(%a: memref<4xi64>, %b: memref<4xi32>, %c: memref<4xi8>) group_size = 4 {
  %i = ttile.local_id
  %x = ttile.load %a[%i] : memref<4xi64> -> i64
  %y = ttile.load %b[%i] : memref<4xi32> -> i32
  %z = ttile.load %c[%i] : memref<4xi8> -> i8
  %ax = math.absi %x : i64
  %ay = math.absi %y : i32
  %az = math.absi %z : i8
  ttile.store %ax, %a[%i] : i64, memref<4xi64>
  ttile.store %ay, %b[%i] : i32, memref<4xi32>
  ttile.store %az, %c[%i] : i8, memref<4xi8>
  ttile.return
}
// CHECK-LABEL: .visible .entry absi(
// CHECK-DAG:   abs.s64 %rd{{[0-9]+}}, %rd{{[0-9]+}};
// CHECK-DAG:   abs.s32 %r{{[0-9]+}}, %r{{[0-9]+}};
// CHECK-DAG:   abs.s16 %rs{{[0-9]+}}, %rs{{[0-9]+}};
