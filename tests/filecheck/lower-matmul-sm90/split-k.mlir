// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true split_k=auto}' | filecheck %s
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true}' | filecheck %s --check-prefix=OFF
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true split_k=3}' | filecheck %s --check-prefix=THREE
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true split_k=auto},lower-tile-to-target' -t ptx | filecheck %s --check-prefix=PTX
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true split_k=auto sm90_store=registers}' | filecheck %s --check-prefix=REGS

// Split-K (matmul_config.split_k's cost rule): 512 x 512 has 16 tiles of 128 x 128 for
// 132 SMs, and K = 8192 is 128 stages, so K is cut into 8 ranges: the kernel stores f32
// partials in an [8, 512, 512] workspace and a second kernel adds them in range order,
// then rounds to bf16. 2048^3 fills the SMs and is not split. A fused bias + relu is
// applied by the reduction kernel. With split_k=3 every unbatched product is cut in 3.
// The partials leave through shared memory (the staged store: each consumer warpgroup
// writes 32 f32 columns of its 64 rows, synchronizes on its named barrier, then stores
// whole rows in 16-byte vectors); sm90_store=registers stores them from the accumulators.

func.func @mm(%a: tensor<512x8192xbf16>, %b: tensor<8192x512xbf16>, %x: tensor<2048x2048xbf16>, %w: tensor<1024x16384xbf16>, %v: tensor<1024x16384xbf16>, %bias: tensor<1024xbf16>) -> (tensor<512x512xbf16>, tensor<2048x2048xbf16>, tensor<1024x1024xbf16>) {
  %c = tgraph.matmul %a, %b : (tensor<512x8192xbf16>, tensor<8192x512xbf16>) -> tensor<512x512xbf16>
  %y = tgraph.matmul %x, %x : (tensor<2048x2048xbf16>, tensor<2048x2048xbf16>) -> tensor<2048x2048xbf16>
  %z = tgraph.matmul_epilogue %w, %v bias %bias transpose_rhs activation = "relu" : (tensor<1024x16384xbf16>, tensor<1024x16384xbf16>, tensor<1024xbf16>) -> tensor<1024x1024xbf16>
  func.return %c, %y, %z : tensor<512x512xbf16>, tensor<2048x2048xbf16>, tensor<1024x1024xbf16>
}

// CHECK:      ttarget.func @mm_matmul_0(%{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<tmap>, %{{.*}}: !ttarget.param<tmap>)
// CHECK:        ttarget.div "u32"
// CHECK:        ttarget.min "u32"
// CHECK:        ttarget.wgmma "m64n128k16.f32.bf16.bf16"
// CHECK-NOT:    ttarget.st "global.v2.f32"
// CHECK:        ttarget.bar_sync 1 threads = 128
// CHECK:        ttarget.st "shared.v2.f32"
// CHECK:        ttarget.bar_sync 1 threads = 128
// CHECK:        ttarget.ld "shared.v4.b32"
// CHECK:        ttarget.st "global.v4.b32"
// CHECK:      ttile.kernel @mm_split_k_reduce_0(%{{.*}}: memref<512x512xbf16>, %{{.*}}: memref<8x512x512xf32>) group_size = 256
// CHECK-COUNT-8: ttile.load_vector
// CHECK:        arith.truncf
// CHECK:        ttile.store_vector
// CHECK:      ttarget.func @mm_matmul_1(%{{.*}}: !ttarget.param<tmap>,
// CHECK:      ttarget.func @mm_matmul_2(%{{.*}}: !ttarget.param<u64>, %{{.*}}: !ttarget.param<tmap>, %{{.*}}: !ttarget.param<tmap>)
// CHECK:      ttile.kernel @mm_split_k_reduce_1(%{{.*}}: memref<1024x1024xbf16>, %{{.*}}: memref<2x1024x1024xf32>, %{{.*}}: memref<1024xbf16>)
// CHECK:        arith.cmpf olt
// CHECK:      func.func @mm
// CHECK:        %[[WS:.*]] = memref.alloc() : memref<8x512x512xf32>
// CHECK:        ttarget.launch_ex @mm_matmul_0(%[[WS]], %a, %b) grid = [128, 1, 1]
// CHECK:        ttile.launch @mm_split_k_reduce_0(%{{.*}}, %[[WS]]) grid = [256, 1, 1]
// CHECK:        ttarget.launch_ex @mm_matmul_1(%{{.*}}, %x, %x) grid = [128, 1, 1]
// CHECK:        ttarget.launch_ex @mm_matmul_2
// CHECK:        ttile.launch @mm_split_k_reduce_1(%{{.*}}, %{{.*}}, %bias)

// OFF-NOT:    split_k_reduce
// OFF:        ttarget.launch_ex @mm_matmul_0(%{{.*}}, %a, %b) grid = [16, 1, 1]

// THREE:      memref.alloc() : memref<3x512x512xf32>
// THREE:      memref.alloc() : memref<3x2048x2048xf32>
// THREE:      memref.alloc() : memref<3x1024x1024xf32>

// PTX:        .visible .entry mm_matmul_0(
// PTX:        st.shared.v2.f32
// PTX:        ld.shared.v4.b32
// PTX:        st.global.v4.b32
// PTX:        .visible .entry mm_split_k_reduce_0(
// PTX:        ld.global.v4.f32

// REGS:       ttarget.func @mm_matmul_0(
// REGS-NOT:   ttarget.ld "shared
// REGS:       ttarget.st "global.v2.f32"
// REGS:       ttile.kernel @mm_split_k_reduce_0(
