// RUN: tessera-opt %s -p lower-graph-to-tile | filecheck %s
// RUN: tessera-opt %s -p 'lower-graph-to-tile{deterministic=false}' | filecheck %s --check-prefix=FAST

// CompileOptions.deterministic (the pass's `deterministic` option): by default only the
// all_reduce the program marks nondeterministic may use the communication library's
// reduction order; with deterministic=false every all_reduce may.

func.func @f(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  %a = tgraph.all_reduce %x op = "sum" axis = "tp" : (tensor<8xf32>) -> tensor<8xf32>
  %b = tgraph.all_reduce %x op = "max" axis = "tp" nondeterministic : (tensor<8xf32>) -> tensor<8xf32>
  func.return %a, %b : tensor<8xf32>, tensor<8xf32>
}
// CHECK:      ttile.all_reduce %x op = "sum" axis = "tp" :
// CHECK-NEXT: ttile.all_reduce %x op = "max" axis = "tp" nondeterministic :

// FAST:      ttile.all_reduce %x op = "sum" axis = "tp" nondeterministic :
// FAST-NEXT: ttile.all_reduce %x op = "max" axis = "tp" nondeterministic :
