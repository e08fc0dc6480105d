// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s
// RUN: tessera-opt %s -p lower-graph-to-tile,lower-tile-to-target -t ptx | filecheck %s --check-prefix=PTX

// Single elementwise ops (and casts, selects, splat constants) are vector kernels.
// Dims that every operand spans, or broadcasts, alike are merged first, through host
// views: a same-shape op is one flat row (no index division in the kernel), an op
// with a broadcast row is [rows, cols]. Each lane then computes 8 bf16 / 4 f32
// consecutive elements: a spanning operand is one 16-byte vector access, a broadcast
// column ([4, 1]) one scalar load per lane. An odd flat length leaves one element
// per lane; rows of an odd length (6x101 with a broadcast column) are mapped as rows:
// tile (row, chunk), each lane 4 elements of the row 256 apart (adjacent across the
// warp), the broadcast column read once, no index division.

func.func @f(%a: tensor<4x64xbf16>, %b: tensor<4x64xbf16>, %c: tensor<4x64xf32>,
             %r: tensor<64xf32>, %s: tensor<4x1xf32>, %o: tensor<3x5x7xbf16>,
             %v: tensor<6x101xbf16>, %m: tensor<6x1xf32>)
    -> (tensor<4x64xbf16>, tensor<4x64xf32>, tensor<4x64xf32>, tensor<4x64xf32>,
        tensor<3x5x7xf32>, tensor<6x101xf32>) {
  %0 = tgraph.add %a, %b : (tensor<4x64xbf16>, tensor<4x64xbf16>) -> tensor<4x64xbf16>
  %1 = tgraph.exp %c : (tensor<4x64xf32>) -> tensor<4x64xf32>
  %2 = tgraph.mul %c, %r : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
  %3 = tgraph.sub %c, %s : (tensor<4x64xf32>, tensor<4x1xf32>) -> tensor<4x64xf32>
  %4 = tgraph.cast %o : (tensor<3x5x7xbf16>) -> tensor<3x5x7xf32>
  %5 = tgraph.cast %v : (tensor<6x101xbf16>) -> tensor<6x101xf32>
  %6 = tgraph.sub %5, %m : (tensor<6x101xf32>, tensor<6x1xf32>) -> tensor<6x101xf32>
  func.return %0, %1, %2, %3, %4, %6 : tensor<4x64xbf16>, tensor<4x64xf32>, tensor<4x64xf32>, tensor<4x64xf32>, tensor<3x5x7xf32>, tensor<6x101xf32>
}

// CHECK-LABEL: ttile.kernel @f_add_0(%{{.*}}: memref<256xbf16>, %{{.*}}: memref<256xbf16>, %{{.*}}: memref<256xbf16>)
// CHECK-NOT:     arith.divui
// CHECK:         ttile.load_vector {{.*}} -> vector<8xbf16>
// CHECK:         ttile.load_vector {{.*}} -> vector<8xbf16>
// CHECK:         ttile.store_vector
// CHECK-LABEL: ttile.kernel @f_exp_0(%{{.*}}: memref<256xf32>, %{{.*}}: memref<256xf32>)
// CHECK:         ttile.load_vector {{.*}} -> vector<4xf32>
// CHECK:         ttile.store_vector
// CHECK-LABEL: ttile.kernel @f_mul_0(%{{.*}}: memref<4x64xf32>, %{{.*}}: memref<4x64xf32>, %{{.*}}: memref<64xf32>)
// CHECK:         ttile.load_vector {{.*}} : memref<4x64xf32> -> vector<4xf32>
// CHECK:         ttile.load_vector {{.*}} : memref<64xf32> -> vector<4xf32>
// CHECK:         ttile.store_vector
// CHECK-LABEL: ttile.kernel @f_sub_0(%{{.*}}: memref<4x64xf32>, %{{.*}}: memref<4x64xf32>, %{{.*}}: memref<4x1xf32>)
// CHECK:         ttile.load_vector {{.*}} : memref<4x64xf32> -> vector<4xf32>
// CHECK:         ttile.load %{{.*}} : memref<4x1xf32> -> f32
// CHECK-NOT:     ttile.load
// CHECK:         ttile.store_vector
// CHECK-LABEL: ttile.kernel @f_cast_0(%{{.*}}: memref<105xf32>, %{{.*}}: memref<105xbf16>)
// CHECK-NOT:     ttile.load_vector
// CHECK:         ttile.return
// CHECK-LABEL: ttile.kernel @f_sub_1(%{{.*}}: memref<6x101xf32>, %{{.*}}: memref<6x101xf32>, %{{.*}}: memref<6x1xf32>)
// CHECK:         ttile.tile_id x
// CHECK:         ttile.tile_id y
// CHECK-NOT:     arith.divui
// CHECK:         ttile.load %{{.*}} : memref<6x1xf32> -> f32
// CHECK-COUNT-4: ttile.load %{{.*}} mask %{{.*}} : memref<6x101xf32> -> f32
// CHECK:         ttile.return
// CHECK:       func.func @f(
// CHECK:         ttile.launch @f_add_0({{.*}}) grid = [1, 1, 1]
// CHECK:         ttile.launch @f_exp_0({{.*}}) grid = [1, 1, 1]
// CHECK:         ttile.launch @f_mul_0({{.*}}) grid = [1, 1, 1]
// CHECK:         ttile.launch @f_sub_0({{.*}}) grid = [1, 1, 1]
// CHECK:         ttile.launch @f_cast_0({{.*}}) grid = [1, 1, 1]
// CHECK:         ttile.launch @f_sub_1({{.*}}) grid = [6, 1, 1]

// PTX: .entry f_add_0(
// PTX: ld.global.v4.b32
// PTX: st.global.v4.b32
