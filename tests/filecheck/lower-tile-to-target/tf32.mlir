// RUN: tessera-opt %s -p lower-tile-to-target -t ptx | filecheck %s

// tf32 tensor-core product: m16n8k8, one f32 value per .b32 fragment register.
ttile.kernel @mma_tf32(%x: memref<32x4xf32>, %y: memref<32x4xf32>) group_size = 32 {
  %l = ttile.local_id
  %z = arith.constant 0 : index
  %a = ttile.load_vector %x[%l, %z] : memref<32x4xf32> -> vector<4xf32>
  %b = arith.constant dense<2.0> : vector<2xf32>
  %c = arith.constant dense<0.0> : vector<4xf32>
  %d = ttile.mma %a, %b, %c accum = f32 : vector<4xf32>, vector<2xf32>, vector<4xf32> -> vector<4xf32>
  ttile.store_vector %d, %y[%l, %z] : vector<4xf32>, memref<32x4xf32>
  ttile.return
}

// CHECK-LABEL: .visible .entry mma_tf32(
// CHECK: ld.global.v4.f32 {%f[[A0:[0-9]+]], %f{{[0-9]+}}, %f{{[0-9]+}}, %f{{[0-9]+}}}
// CHECK: mov.b32 %r[[R0:[0-9]+]], %f[[A0]];
// CHECK: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%f{{.*}}}, {%r[[R0]], %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}}, {%f{{.*}}};
