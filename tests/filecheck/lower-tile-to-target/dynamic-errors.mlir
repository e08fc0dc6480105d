// RUN: not tessera-opt %s -p lower-tile-to-target 2>&1 | filecheck %s

// A dynamic inner dim whose size no argument holds cannot be addressed.

// CHECK: lower-tile-to-target: ttile.load in kernel @nosize: dim 1 of memref<4x?xf32> is dynamic and no kernel argument holds its size
ttile.kernel @nosize(%a: memref<4x?xf32>, %r: memref<4xf32>) group_size = 32 sizes = [?] {
  %i = ttile.local_id
  %v = ttile.load %a[%i, %i] : memref<4x?xf32> -> f32
  ttile.store %v, %r[%i] : f32, memref<4xf32>
  ttile.return
}
