// RUN: tessera-opt %s -p fuse-attention | tessera-opt | filecheck %s

// A -inf constant prints as a hexadecimal bit pattern, and reads back as -inf (not as
// the integer 4286578688).
func.func @ninf(%x: tensor<4xf32>) -> tensor<4xf32> {
  %ninf = tgraph.constant dense<0xFF800000> : tensor<f32> -> tensor<f32>
  %y = tgraph.maximum %x, %ninf : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: tgraph.constant dense<0xff800000> : tensor<f32>
