// RUN: not tessera-opt %s -p lower-tile-to-target 2>&1 | filecheck %s

// Constructs without a lowering are reported with the op and the kernel.

ttile.kernel @k(%x: memref<4xf32>) group_size = 32 {
  %c0 = arith.constant 0 : index
  %v = ttile.load %x[%c0] : memref<4xf32> -> f32
  %y = math.atan %v : f32
  ttile.store %y, %x[%c0] : f32, memref<4xf32>
  ttile.return
}
// CHECK: errors.mlir:8:3: error: lower-tile-to-target: math.atan in kernel @k: no lowering to Target IR for this op
