// RUN: not tessera-opt %s -p lower-tile-to-target 2>&1 | filecheck %s

// Transcendentals are lowered for f32 and f64 only (f64-math.mlir has the f64 forms).

ttile.kernel @k16(%x: memref<4xf16>) group_size = 32 {
  %c0 = arith.constant 0 : index
  %v = ttile.load %x[%c0] : memref<4xf16> -> f16
  %y = math.exp %v : f16
  ttile.store %y, %x[%c0] : f16, memref<4xf16>
  ttile.return
}
// CHECK: errors-f64.mlir:8:3: error: lower-tile-to-target: math.exp in kernel @k16: only f32 and f64 are lowered, got f16
