// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s

// Two equal layers: the second launches the first one's kernels (the kernel memo), so
// there is one tanh kernel, launched twice, and one add kernel per distinct producer.

func.func @layers(%x: tensor<64xf32>, %y: tensor<64xf32>) -> tensor<64xf32> {
  %a = tgraph.tanh %x : (tensor<64xf32>) -> tensor<64xf32>
  %b = tgraph.add %a, %y : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  %c = tgraph.tanh %b : (tensor<64xf32>) -> tensor<64xf32>
  %d = tgraph.add %c, %y : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  func.return %d : tensor<64xf32>
}

// CHECK:     ttile.kernel @layers_tanh_0(
// CHECK:     ttile.kernel @layers_add_0(
// CHECK:     ttile.kernel @layers_tanh_1(
// CHECK-NOT: ttile.kernel
// CHECK:     func.func @layers(
// CHECK:       ttile.launch @layers_tanh_0(
// CHECK:       ttile.launch @layers_add_0(
// CHECK:       ttile.launch @layers_tanh_1(
// CHECK:       ttile.launch @layers_add_0(
