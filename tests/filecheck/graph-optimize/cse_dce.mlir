// RUN: tessera-opt %s -p cse | filecheck %s --check-prefix=CSE
// RUN: tessera-opt %s -p dce | filecheck %s --check-prefix=DCE

// tgraph ops are Pure, so xDSL's cse and dce apply to them (fused ops included,
// compared by their bodies); random ops and communication are not Pure and stay.
// (xDSL's cse also drops ops left without users.)
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %c0 = tgraph.constant dense<2.0> : tensor<f32> -> tensor<4x8xf32>
  %c1 = tgraph.constant dense<2.0> : tensor<f32> -> tensor<4x8xf32>
  %0 = tgraph.mul %x, %c0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tgraph.mul %x, %c1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tgraph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %3 = tgraph.matmul %x, %w transpose_rhs : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %f0 = tgraph.fused %x : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %e = tgraph.exp %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
    tgraph.yield %e : tensor<4x8xf32>
  }
  %f1 = tgraph.fused %x : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%b: tensor<4x8xf32>):
    %e2 = tgraph.exp %b : (tensor<4x8xf32>) -> tensor<4x8xf32>
    tgraph.yield %e2 : tensor<4x8xf32>
  }
  %s = tgraph.add %f0, %f1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %dead = tgraph.softmax %x axis = 1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %r = tgraph.randn seed = 3 : tensor<4x8xf32>
  %g = tgraph.all_reduce %x op = "sum" axis = "tp" : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %0, %1, %s, %3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
// CSE-LABEL: func.func @f
// CSE-NEXT:    %c0 = tgraph.constant
// CSE-NEXT:    %0 = tgraph.mul %x, %c0
// CSE-NEXT:    %[[T:[0-9]+]] = tgraph.matmul %x, %w transpose_rhs
// CSE-NEXT:    %f0 = tgraph.fused %x
// CSE:         %s = tgraph.add %f0, %f0
// CSE-NEXT:    %r = tgraph.randn
// CSE-NEXT:    %g = tgraph.all_reduce
// CSE-NEXT:    func.return %0, %0, %s, %[[T]]

// DCE-LABEL: func.func @f
// DCE-NOT:     tgraph.matmul %x, %w :
// DCE-NOT:     tgraph.softmax
// DCE:         %r = tgraph.randn seed = 3
// DCE-NEXT:    %g = tgraph.all_reduce %x
// DCE-NEXT:    func.return
