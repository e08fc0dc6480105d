// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s
// RUN: tessera-opt %s -p 'lower-graph-to-tile,lower-tile-to-target' -t ptx | filecheck %s --check-prefix=PTX

// Ops whose results have no elements launch nothing: each result is an allocation of
// no elements. A program of only such ops has no kernels, and its PTX says so.
func.func @empty(%x: tensor<1x0x3xf32>, %y: tensor<3xf32>) -> (tensor<1x0x3xf32>, tensor<0x3xf32>) {
  %0 = tgraph.cos %x : (tensor<1x0x3xf32>) -> tensor<1x0x3xf32>
  %1 = tgraph.broadcast %y : (tensor<3xf32>) -> tensor<0x3xf32>
  %2 = tgraph.add %0, %0 : (tensor<1x0x3xf32>, tensor<1x0x3xf32>) -> tensor<1x0x3xf32>
  func.return %2, %1 : tensor<1x0x3xf32>, tensor<0x3xf32>
}
// CHECK-LABEL: func.func @empty
// CHECK-NOT:     ttile.launch
// CHECK:         %[[A:.*]] = memref.alloc() : memref<1x0x3xf32>
// CHECK-NOT:     ttile.launch
// CHECK:         func.return
// CHECK-NOT:   ttile.kernel
// PTX: // no kernels
