// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true}' | filecheck %s --check-prefix=SM90

// A matmul of packed fp6 operands is one tensor-core kernel: its shared-memory tile fill
// reads each element's 6-bit code from the packed bytes (two byte loads when the field
// straddles bytes), dequantizes it exactly with integer arithmetic and stores bf16; the
// m16n8k16 bf16 mma accumulates in f32. With the sm90 kernels, cast kernels unpack each
// operand to bf16 for the TMA + wgmma GEMM.

func.func @mm(%a: tensor<64x96xf6E3M2FN>, %b: tensor<96x64xf6E3M2FN>) -> tensor<64x64xf32> {
  %c = tgraph.matmul %a, %b : (tensor<64x96xf6E3M2FN>, tensor<96x64xf6E3M2FN>) -> tensor<64x64xf32>
  func.return %c : tensor<64x64xf32>
}
// CHECK:      ttile.kernel @mm_matmul_0(%{{.*}}: memref<64x64xf32>, %{{.*}}: memref<64x72xi8>, %{{.*}}: memref<96x48xi8>) group_size = 128 {
// CHECK:        ttile.alloc_shared alignment = 16 : memref<64x32xbf16, #tessera.smem>
// CHECK:        ttile.load %{{.*}} : memref<64x72xi8> -> i8
// CHECK:        ttile.load %{{.*}} : memref<64x72xi8> -> i8
// CHECK:        arith.sitofp %{{.*}} : i32 to f32
// CHECK:        arith.bitcast %{{.*}} : i32 to f32
// CHECK:        %[[H:[0-9]+]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT:   ttile.store %[[H]], %{{.*}} : bf16, memref<64x32xbf16, #tessera.smem>
// CHECK:        ttile.mma
// CHECK-NOT:  ttile.kernel
// CHECK:      func.func @mm(
// CHECK-NEXT:   memref.alloc() : memref<64x64xf32>
// CHECK-NEXT:   ttile.launch @mm_matmul_0

// SM90:      ttile.kernel @mm_cast_0(%{{.*}}: memref<64x96xbf16>, %{{.*}}: memref<64x72xi8>)
// SM90:      ttile.kernel @mm_cast_1(%{{.*}}: memref<96x64xbf16>, %{{.*}}: memref<96x48xi8>)
// SM90:      ttarget.func @mm_matmul_0(
// SM90:      ttile.launch @mm_cast_0
// SM90-NEXT: memref.alloc
// SM90-NEXT: ttile.launch @mm_cast_1
// SM90:      ttarget.launch_ex @mm_matmul_0
