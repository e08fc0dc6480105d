// RUN: tessera-opt %s -p lower-graph-to-tile,dedupe-kernels | filecheck %s
// RUN: tessera-opt %s -p 'lower-graph-to-tile{sm90=true},dedupe-kernels' | filecheck %s --check-prefix=SM90
// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s --check-prefix=KEEP

// Kernels that differ only in their name are merged: the two 4x8 adds launch one
// kernel, the 8x5 add keeps its own; launches are renamed, nothing else changes.
// The same holds for ttarget.func kernels (the sm90 GEMMs of two equal matmuls).

func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %c: tensor<8x5xf32>, %x: tensor<128x64xbf16>, %w: tensor<64x128xbf16>) -> (tensor<4x8xf32>, tensor<8x5xf32>, tensor<128x128xbf16>, tensor<128x128xbf16>) {
  %0 = tgraph.add %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tgraph.add %0, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tgraph.add %c, %c : (tensor<8x5xf32>, tensor<8x5xf32>) -> tensor<8x5xf32>
  %3 = tgraph.matmul %x, %w : (tensor<128x64xbf16>, tensor<64x128xbf16>) -> tensor<128x128xbf16>
  %4 = tgraph.matmul %x, %w : (tensor<128x64xbf16>, tensor<64x128xbf16>) -> tensor<128x128xbf16>
  func.return %1, %2, %3, %4 : tensor<4x8xf32>, tensor<8x5xf32>, tensor<128x128xbf16>, tensor<128x128xbf16>
}
// CHECK:     ttile.kernel @f_add_0(
// CHECK-NOT: ttile.kernel @f_add_1(
// CHECK:     ttile.kernel @f_add_2(
// CHECK:     ttile.launch @f_add_0(
// CHECK:     ttile.launch @f_add_0(
// CHECK:     ttile.launch @f_add_2(

// SM90:      ttarget.func @[[MM:[a-z_0-9]+]](
// SM90-NOT:  ttarget.func
// SM90:      ttarget.launch_ex @[[MM]](
// SM90:      ttarget.launch_ex @[[MM]](

// KEEP:      ttile.kernel @f_add_0(
// KEEP:      ttile.kernel @f_add_1(
