// RUN: tessera-opt %s -p fuse-attention | tessera-opt | filecheck %s

// A -inf constant reads back as -inf (not as the integer 4286578688) whether it is
// written as a bare hexadecimal bit pattern or, as Tessera prints it, MLIR's hex string.
func.func @ninf(%x: tensor<4xf32>) -> tensor<4xf32> {
  %ninf = tgraph.constant dense<0xFF800000> : tensor<f32> -> tensor<f32>
  %y = tgraph.maximum %x, %ninf : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: tgraph.constant dense<"0x000080FF"> : tensor<f32>
