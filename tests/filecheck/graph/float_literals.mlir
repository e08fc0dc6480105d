// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s | tessera-opt | filecheck %s

// Float constants without a short decimal form (inf, -inf, NaN, long f32/f64
// integers) print as a hex string of their bytes, which parses back bit for bit;
// an element printed as a bare hex token would be read as an integer.

func.func @literals() -> (tensor<f32>, tensor<2xf64>, tensor<3xf32>, tensor<f16>, tensor<f32>) {
  %0 = tgraph.constant dense<"0x000080FF"> : tensor<f32> -> tensor<f32>
  %1 = tgraph.constant dense<"0x000000000000F07F000000000000F87F"> : tensor<2xf64> -> tensor<2xf64>
  %2 = tgraph.constant dense<[1.500000e+00, -0.000000e+00, 2.500000e+00]> : tensor<3xf32> -> tensor<3xf32>
  %3 = tgraph.constant dense<"0x00FC"> : tensor<f16> -> tensor<f16>
  %4 = tgraph.constant dense<"0xA379EB4C"> : tensor<f32> -> tensor<f32>
  func.return %0, %1, %2, %3, %4 : tensor<f32>, tensor<2xf64>, tensor<3xf32>, tensor<f16>, tensor<f32>
}

// CHECK:      tgraph.constant dense<"0x000080FF"> : tensor<f32> -> tensor<f32>
// CHECK-NEXT: tgraph.constant dense<"0x000000000000F07F000000000000F87F"> : tensor<2xf64> -> tensor<2xf64>
// CHECK-NEXT: tgraph.constant dense<[1.500000e+00, -0.000000e+00, 2.500000e+00]> : tensor<3xf32> -> tensor<3xf32>
// CHECK-NEXT: tgraph.constant dense<"0x00FC"> : tensor<f16> -> tensor<f16>
// CHECK-NEXT: tgraph.constant dense<"0xA379EB4C"> : tensor<f32> -> tensor<f32>

func.func @vector_literal() -> vector<2xf32> {
  %0 = arith.constant dense<"0x000080FF0000803F"> : vector<2xf32>
  func.return %0 : vector<2xf32>
}

// CHECK:      arith.constant dense<"0x000080FF0000803F"> : vector<2xf32>
