// RUN: tessera-opt %s -p tessera-ptx-pipeline -t ptx | filecheck %s

// f16 -> bf16 rounds (bf16 has fewer fraction bits): the cvt carries .rn and verifies.
func.func @f16_to_bf16(%a: tensor<8xf16>) -> tensor<8xbf16> {
  %0 = tgraph.cast %a : (tensor<8xf16>) -> tensor<8xbf16>
  func.return %0 : tensor<8xbf16>
}
// CHECK: cvt.rn.bf16.f16

func.func @bf16_to_f16(%a: tensor<8xbf16>) -> tensor<8xf16> {
  %0 = tgraph.cast %a : (tensor<8xbf16>) -> tensor<8xf16>
  func.return %0 : tensor<8xf16>
}
// CHECK: cvt.rn.f16.bf16
