// RUN: tessera-opt %s -p tessera-ptx-pipeline -t ptx | filecheck %s
// RUN: tessera-opt %s -p tessera-ptx-pipeline -t ptx | ptxas -arch=sm_90a - -o /dev/null

// The named pipeline takes Graph IR to PTX: a bf16 matmul on the tensor cores
// with fp32 accumulation, and a row softmax.

func.func @mm(%a: tensor<37x53xbf16>, %b: tensor<53x29xbf16>) -> tensor<37x29xf32> {
  %c = tgraph.matmul %a, %b : (tensor<37x53xbf16>, tensor<53x29xbf16>) -> tensor<37x29xf32>
  func.return %c : tensor<37x29xf32>
}

func.func @sm(%x: tensor<5x300xf32>) -> tensor<5x300xf32> {
  %y = tgraph.softmax %x axis = -1 : (tensor<5x300xf32>) -> tensor<5x300xf32>
  func.return %y : tensor<5x300xf32>
}

// CHECK: .version 8.0
// CHECK-NEXT: .target sm_90a
// CHECK: .visible .entry mm_
// CHECK: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK: .visible .entry sm_
// CHECK: shfl.sync.bfly
