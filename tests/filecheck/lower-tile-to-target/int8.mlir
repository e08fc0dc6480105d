// RUN: tessera-opt %s -p lower-tile-to-target -t ptx | filecheck %s

// i8 values live in 16-bit registers, sign-extended: loads are ld.s8 (a plain .b8 load
// zero-extends, and -3 would widen to 253.0); a zero-extension (arith.extui, the packed
// fp6/fp4 byte reads) masks the low byte.
ttile.kernel @widen(%x: memref<4xi8>, %y: memref<4xf32>, %z: memref<4xi32>) group_size = 4 {
  %i = ttile.local_id
  %v = ttile.load %x[%i] : memref<4xi8> -> i8
  %f = arith.sitofp %v : i8 to f32
  ttile.store %f, %y[%i] : f32, memref<4xf32>
  %u = arith.extui %v : i8 to i32
  ttile.store %u, %z[%i] : i32, memref<4xi32>
  ttile.return
}

// CHECK-LABEL: .visible .entry widen(
// CHECK:       ld.global.s8 %rs[[V:[0-9]+]], [%rd{{[0-9]+}}];
// CHECK:       cvt.rn.f32.s16 %f{{[0-9]+}}, %rs[[V]];
// CHECK:       cvt.u32.u16 %r[[W:[0-9]+]], %rs[[V]];
// CHECK-NEXT:  and.b32 %r{{[0-9]+}}, %r[[W]], 255;
