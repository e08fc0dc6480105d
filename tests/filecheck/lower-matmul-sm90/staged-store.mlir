// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true}' | filecheck %s
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true sm90_store=registers}' | filecheck %s --check-prefix=REGS
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true},lower-tile-to-target' -t ptx | filecheck %s --check-prefix=PTX

// Which store each result takes. 16-bit results with N % 8 == 0 (@tma, N = 4096) leave by
// TMA. The others are staged through shared memory: each consumer warpgroup writes one
// 128-byte chunk of its 64 rows (rows padded to 144 bytes for 16-bit, 160 for f32),
// synchronizes on its named barrier (bar.sync 1 or 2, 128 threads), reads the chunk back
// row by row and stores it with the widest vector the rows allow: @n4100 (bf16,
// N % 8 == 4: 8 bytes), @vocab (bf16, N = 50257 odd: 2 bytes, after the fused bias and
// gelu), @f32 (an f32 result, N % 4 == 0: 16 bytes). sm90_store=registers stores them
// from the accumulators (4-byte pairs, 2-byte elements, 8-byte f32 pairs).

func.func @tma(%a: tensor<256x64xbf16>, %b: tensor<4096x64xbf16>) -> tensor<256x4096xbf16> {
  %c = tgraph.matmul %a, %b transpose_rhs : (tensor<256x64xbf16>, tensor<4096x64xbf16>) -> tensor<256x4096xbf16>
  func.return %c : tensor<256x4096xbf16>
}

func.func @n4100(%a: tensor<333x64xbf16>, %b: tensor<4100x64xbf16>) -> tensor<333x4100xbf16> {
  %c = tgraph.matmul %a, %b transpose_rhs : (tensor<333x64xbf16>, tensor<4100x64xbf16>) -> tensor<333x4100xbf16>
  func.return %c : tensor<333x4100xbf16>
}

func.func @vocab(%a: tensor<333x64xbf16>, %b: tensor<50257x64xbf16>, %bias: tensor<50257xbf16>) -> tensor<333x50257xbf16> {
  %c = tgraph.matmul_epilogue %a, %b bias %bias transpose_rhs activation = "gelu" : (tensor<333x64xbf16>, tensor<50257x64xbf16>, tensor<50257xbf16>) -> tensor<333x50257xbf16>
  func.return %c : tensor<333x50257xbf16>
}

func.func @f32(%a: tensor<333x64xbf16>, %b: tensor<1000x64xbf16>) -> tensor<333x1000xf32> {
  %c = tgraph.matmul %a, %b transpose_rhs : (tensor<333x64xbf16>, tensor<1000x64xbf16>) -> tensor<333x1000xf32>
  func.return %c : tensor<333x1000xf32>
}

// CHECK-LABEL: ttarget.func @tma_matmul_0(%{{.*}}: !ttarget.param<tmap>,
// CHECK-NOT:     ttarget.ld "shared
// CHECK:         ttarget.cp_async_bulk_tensor_store
// CHECK-LABEL: func.func @tma

// CHECK-LABEL: ttarget.func @n4100_matmul_0(%{{.*}}: !ttarget.param<u64>,
// CHECK-NOT:     ttarget.cp_async_bulk_tensor_store
// CHECK:         ttarget.bar_sync 1 threads = 128
// CHECK:         ttarget.cvt "rn.bf16x2.f32"
// CHECK-NEXT:    ttarget.st "shared.b32"
// CHECK:         ttarget.bar_sync 1 threads = 128
// CHECK:         ttarget.ld "shared.v2.b32"
// CHECK:         ttarget.st "global.v2.b32"
// CHECK-LABEL: func.func @n4100

// CHECK-LABEL: ttarget.func @vocab_matmul_0(%{{.*}}: !ttarget.param<u64>,
// CHECK:         ttarget.ex2 "approx.f32"
// CHECK:         ttarget.st "shared.b32"
// CHECK:         ttarget.ld "shared.b16"
// CHECK:         ttarget.st "global.b16"
// CHECK-LABEL: func.func @vocab

// CHECK-LABEL: ttarget.func @f32_matmul_0(%{{.*}}: !ttarget.param<u64>,
// CHECK:         ttarget.st "shared.v2.f32"
// CHECK:         ttarget.ld "shared.v4.b32"
// CHECK:         ttarget.st "global.v4.b32"
// CHECK-LABEL: func.func @f32

// REGS-LABEL: ttarget.func @tma_matmul_0(%{{.*}}: !ttarget.param<tmap>,
// REGS:         ttarget.cp_async_bulk_tensor_store
// REGS-LABEL: ttarget.func @n4100_matmul_0(
// REGS-NOT:     ttarget.ld "shared
// REGS:         ttarget.st "global.b32"
// REGS-LABEL: func.func @n4100
// REGS-LABEL: ttarget.func @vocab_matmul_0(
// REGS-NOT:     ttarget.ld "shared
// REGS:         ttarget.st "global.b16"
// REGS-LABEL: func.func @vocab
// REGS-LABEL: ttarget.func @f32_matmul_0(
// REGS-NOT:     ttarget.ld "shared
// REGS:         ttarget.st "global.v2.f32"
// REGS-LABEL: func.func @f32

// PTX-LABEL: .visible .entry n4100_matmul_0(
// PTX:         bar.sync 1, 128;
// PTX:         st.shared.b32
// PTX:         bar.sync 2, 128;
// PTX:         ld.shared.v2.b32
// PTX:         st.global.v2.b32
