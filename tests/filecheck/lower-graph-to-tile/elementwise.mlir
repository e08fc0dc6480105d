// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s
// RUN: tessera-opt %s -p lower-graph-to-tile --print-op-generic | tessera-opt | filecheck %s

// Elementwise ops become one masked lane-per-element kernel each; the host function
// allocates the result and launches on ceil(N / 256) tiles. bf16 is computed in f32.

func.func @f(%a: tensor<37x53xbf16>, %b: tensor<53xbf16>) -> tensor<37x53xbf16> {
  %0 = tgraph.add %a, %b : (tensor<37x53xbf16>, tensor<53xbf16>) -> tensor<37x53xbf16>
  func.return %0 : tensor<37x53xbf16>
}
// CHECK:      ttile.kernel @f_add_0(%{{.*}}: memref<37x53xbf16>, %{{.*}}: memref<37x53xbf16>, %{{.*}}: memref<53xbf16>) group_size = 256 {
// CHECK-NEXT:   %[[LIN:.*]] = ttile.linear_id
// CHECK-NEXT:   %[[N:.*]] = arith.constant 1961 : index
// CHECK-NEXT:   %[[OK:.*]] = arith.cmpi slt, %[[LIN]], %[[N]] : index
// CHECK:        %[[X:.*]] = ttile.load %{{.*}}[%{{.*}}, %{{.*}}] mask %[[OK]] : memref<37x53xbf16> -> bf16
// CHECK-NEXT:   %[[Y:.*]] = ttile.load %{{.*}}[%{{.*}}] mask %[[OK]] : memref<53xbf16> -> bf16
// CHECK-NEXT:   %[[XF:.*]] = arith.extf %[[X]] : bf16 to f32
// CHECK-NEXT:   %[[YF:.*]] = arith.extf %[[Y]] : bf16 to f32
// CHECK-NEXT:   %[[S:.*]] = arith.addf %[[XF]], %[[YF]] : f32
// CHECK-NEXT:   %[[R:.*]] = arith.truncf %[[S]] : f32 to bf16
// CHECK-NEXT:   ttile.store %[[R]], %{{.*}}[%{{.*}}, %{{.*}}] mask %[[OK]] : bf16, memref<37x53xbf16>
// CHECK-NEXT:   ttile.return
// CHECK:      func.func @f(%a: memref<37x53xbf16>, %b: memref<53xbf16>) -> memref<37x53xbf16> {
// CHECK-NEXT:   %[[OUT:.*]] = memref.alloc() : memref<37x53xbf16>
// CHECK-NEXT:   ttile.launch @f_add_0(%[[OUT]], %a, %b) grid = [8, 1, 1] : (memref<37x53xbf16>, memref<37x53xbf16>, memref<53xbf16>)
// CHECK-NEXT:   func.return %[[OUT]] : memref<37x53xbf16>
// CHECK-NOT:  tgraph.
