// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s
// RUN: tessera-opt %s -p lower-graph-to-tile,lower-tile-to-target -t ptx | filecheck %s --check-prefix=PTX

// An elementwise op whose operands have its result's shape: each lane computes 8
// consecutive bf16 elements (4 f32) with 16-byte vector loads and one vector store; with
// a broadcast operand it stays one lane per element.

func.func @f(%a: tensor<4x64xbf16>, %b: tensor<4x64xbf16>, %c: tensor<4x64xf32>,
             %r: tensor<64xf32>) -> (tensor<4x64xbf16>, tensor<4x64xf32>, tensor<4x64xf32>) {
  %0 = tgraph.add %a, %b : (tensor<4x64xbf16>, tensor<4x64xbf16>) -> tensor<4x64xbf16>
  %1 = tgraph.exp %c : (tensor<4x64xf32>) -> tensor<4x64xf32>
  %2 = tgraph.mul %c, %r : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
  func.return %0, %1, %2 : tensor<4x64xbf16>, tensor<4x64xf32>, tensor<4x64xf32>
}

// CHECK-LABEL: ttile.kernel @f_add_0(
// CHECK:         ttile.load_vector {{.*}} -> vector<8xbf16>
// CHECK:         ttile.load_vector {{.*}} -> vector<8xbf16>
// CHECK:         ttile.store_vector
// CHECK-LABEL: ttile.kernel @f_exp_0(
// CHECK:         ttile.load_vector {{.*}} -> vector<4xf32>
// CHECK:         ttile.store_vector
// CHECK-LABEL: ttile.kernel @f_mul_0(
// CHECK-NOT:     ttile.load_vector
// CHECK:         ttile.return
// CHECK:       func.func @f(
// CHECK:         ttile.launch @f_add_0({{.*}}) grid = [1, 1, 1]
// CHECK:         ttile.launch @f_exp_0({{.*}}) grid = [1, 1, 1]
// CHECK:         ttile.launch @f_mul_0({{.*}}) grid = [1, 1, 1]

// PTX: .entry f_add_0(
// PTX: ld.global.v4.b32
// PTX: st.global.v4.b32
