// RUN: not tessera-opt %s -p lower-tile-to-target 2>&1 | filecheck %s

// Transcendentals are lowered for f32 only.

ttile.kernel @k64(%x: memref<4xf64>) group_size = 32 {
  %c0 = arith.constant 0 : index
  %v = ttile.load %x[%c0] : memref<4xf64> -> f64
  %y = math.exp %v : f64
  ttile.store %y, %x[%c0] : f64, memref<4xf64>
  ttile.return
}
// CHECK: errors-f64.mlir:8:3: error: lower-tile-to-target: math.exp in kernel @k64: only f32 is lowered, got f64
