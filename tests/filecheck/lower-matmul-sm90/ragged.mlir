// RUN: tessera-opt %s -p lower-matmul-sm90 | filecheck %s
// RUN: tessera-opt %s -p lower-matmul-sm90,lower-tile-to-target -t ptx | filecheck %s --check-prefix=PTX
// RUN: tessera-opt %s -p 'lower-matmul-sm90{sm90_store=registers}' | filecheck %s --check-prefix=REGS

// Row lengths that are no 16-byte multiple (TMA row strides) still take the TMA + wgmma
// kernel. @lm_head (x @ wte.T, a vocabulary of 50257): both operands K-major with K = 768
// are read as they are; C (N = 50257) is staged through shared memory (packed pairs,
// st.shared.b32) and stored row by row with st.global.b16 (N odd: rows are only 2-byte
// aligned), bounds-checked; sm90_store=registers stores it from the accumulators instead,
// element by element. @odd (257 x 1001 x 77, A stored
// K x M): both operands are first copied into buffers with rows padded to 128 bytes
// (320 and 1024 elements, zeros past the end), which the kernel reads by TMA.

func.func @lm_head(%x: tensor<512x768xbf16>, %w: tensor<50257x768xbf16>) -> tensor<512x50257xbf16> {
  %c = tgraph.matmul %x, %w transpose_rhs : (tensor<512x768xbf16>, tensor<50257x768xbf16>) -> tensor<512x50257xbf16>
  func.return %c : tensor<512x50257xbf16>
}

// CHECK-LABEL: ttarget.func @lm_head_matmul_0(%{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<tmap>, %{{.*}}: !ttarget.param<tmap>)
// CHECK-NOT:     ttarget.cp_async_bulk_tensor_store
// CHECK:         ttarget.wgmma "m64n{{[0-9]+}}k16.f32.bf16.bf16"
// CHECK:         ttarget.cvt "rn.bf16x2.f32"
// CHECK:         ttarget.st "shared.b32"
// CHECK:         ttarget.ld "shared.b16"
// CHECK:         ttarget.st "global.b16"
// CHECK-LABEL: func.func @lm_head
// CHECK-NOT:     ttile.launch
// CHECK:         ttarget.launch_ex @lm_head_matmul_0(%{{.*}}, %x, %w) {{.*}} boxes = [0, 0, 64, 128, 64, {{[0-9]+}}]

func.func @odd(%a: tensor<77x257xbf16>, %b: tensor<77x1001xbf16>) -> tensor<257x1001xbf16> {
  %c = tgraph.matmul %a, %b transpose_lhs : (tensor<77x257xbf16>, tensor<77x1001xbf16>) -> tensor<257x1001xbf16>
  func.return %c : tensor<257x1001xbf16>
}

// CHECK:       ttile.kernel @odd_pad_a_0(%{{.*}}: memref<77x320xbf16>, %{{.*}}: memref<77x257xbf16>)
// CHECK:       ttile.kernel @odd_pad_b_0(%{{.*}}: memref<77x1024xbf16>, %{{.*}}: memref<77x1001xbf16>)
// CHECK:       ttarget.func @odd_matmul_0(%{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<tmap>, %{{.*}}: !ttarget.param<tmap>)
// CHECK:         ttarget.wgmma
// CHECK-SAME:      trans_a = 1 trans_b = 1
// CHECK:         ttarget.st "global.b16"
// CHECK-LABEL: func.func @odd
// CHECK:         ttile.launch @odd_pad_a_0(%[[PA:.*]], %a)
// CHECK:         ttile.launch @odd_pad_b_0(%[[PB:.*]], %b)
// CHECK:         ttarget.launch_ex @odd_matmul_0(%{{.*}}, %[[PA]], %[[PB]])

// PTX:      .visible .entry lm_head_matmul_0(
// PTX-NEXT:   .param .u64 lm_head_matmul_0_param_0,
// PTX:        wgmma.mma_async.sync.aligned
// PTX:        cvt.rn.bf16x2.f32
// PTX:        st.shared.b32
// PTX:        ld.shared.b16
// PTX:        st.global.b16

// REGS-LABEL: ttarget.func @lm_head_matmul_0(
// REGS-NOT:     ttarget.ld "shared
// REGS:         ttarget.cvt "rn.bf16.f32"
// REGS:         ttarget.st "global.b16"
// REGS-LABEL: func.func @lm_head
