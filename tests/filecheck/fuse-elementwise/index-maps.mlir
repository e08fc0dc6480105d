// RUN: tessera-opt %s -p fuse-elementwise | filecheck %s

// A rotary embedding of a transposed projection: the transpose, both slices, the
// negation, the concat and the elementwise ops are one fused op.
func.func @rope(%x: tensor<2x6x3x16xbf16>, %cos: tensor<6x16xbf16>, %sin: tensor<6x16xbf16>) -> tensor<2x3x6x16xbf16> {
  %t = tgraph.transpose %x permutation = [0, 2, 1, 3] : (tensor<2x6x3x16xbf16>) -> tensor<2x3x6x16xbf16>
  %0 = tgraph.mul %t, %cos : (tensor<2x3x6x16xbf16>, tensor<6x16xbf16>) -> tensor<2x3x6x16xbf16>
  %1 = tgraph.slice %t start = [0, 0, 0, 8] limit = [2, 3, 6, 16] stride = [1, 1, 1, 1] : (tensor<2x3x6x16xbf16>) -> tensor<2x3x6x8xbf16>
  %2 = tgraph.slice %t start = [0, 0, 0, 0] limit = [2, 3, 6, 8] stride = [1, 1, 1, 1] : (tensor<2x3x6x16xbf16>) -> tensor<2x3x6x8xbf16>
  %3 = tgraph.neg %1 : (tensor<2x3x6x8xbf16>) -> tensor<2x3x6x8xbf16>
  %4 = tgraph.concat %3, %2 axis = 3 : (tensor<2x3x6x8xbf16>, tensor<2x3x6x8xbf16>) -> tensor<2x3x6x16xbf16>
  %5 = tgraph.mul %4, %sin : (tensor<2x3x6x16xbf16>, tensor<6x16xbf16>) -> tensor<2x3x6x16xbf16>
  %r = tgraph.add %0, %5 : (tensor<2x3x6x16xbf16>, tensor<2x3x6x16xbf16>) -> tensor<2x3x6x16xbf16>
  func.return %r : tensor<2x3x6x16xbf16>
}
// CHECK-LABEL: func.func @rope
// CHECK-NEXT:    %[[F:.*]] = tgraph.fused
// CHECK-DAG:       tgraph.transpose
// CHECK-DAG:       tgraph.slice
// CHECK-DAG:       tgraph.neg
// CHECK-DAG:       tgraph.concat
// CHECK:           tgraph.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]]

// Data movement alone: a stack of three tensors (reshapes and a concat) transposed back
// into a projection's layout is one op; the reshapes of the arguments stay views.
func.func @stack(%q: tensor<2x3x5x8xbf16>, %k: tensor<2x3x5x8xbf16>) -> tensor<2x5x2x3x8xbf16> {
  %0 = tgraph.reshape %q : (tensor<2x3x5x8xbf16>) -> tensor<1x2x3x5x8xbf16>
  %1 = tgraph.reshape %k : (tensor<2x3x5x8xbf16>) -> tensor<1x2x3x5x8xbf16>
  %2 = tgraph.concat %0, %1 axis = 0 : (tensor<1x2x3x5x8xbf16>, tensor<1x2x3x5x8xbf16>) -> tensor<2x2x3x5x8xbf16>
  %r = tgraph.transpose %2 permutation = [1, 3, 0, 2, 4] : (tensor<2x2x3x5x8xbf16>) -> tensor<2x5x2x3x8xbf16>
  func.return %r : tensor<2x5x2x3x8xbf16>
}
// CHECK-LABEL: func.func @stack
// CHECK-DAG:     %[[Q:.*]] = tgraph.reshape %q
// CHECK-DAG:     %[[K:.*]] = tgraph.reshape %k
// CHECK:         %[[F:.*]] = tgraph.fused %[[Q]], %[[K]]
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      tgraph.concat
// CHECK-NEXT:      tgraph.transpose
// CHECK-NEXT:      tgraph.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]]

// A reshape of size-1 dims between two fusible ops joins them.
func.func @link(%x: tensor<4x2x8xf32>) -> tensor<2x1x4x8xf32> {
  %t = tgraph.transpose %x permutation = [1, 0, 2] : (tensor<4x2x8xf32>) -> tensor<2x4x8xf32>
  %r = tgraph.reshape %t : (tensor<2x4x8xf32>) -> tensor<2x1x4x8xf32>
  %n = tgraph.neg %r : (tensor<2x1x4x8xf32>) -> tensor<2x1x4x8xf32>
  func.return %n : tensor<2x1x4x8xf32>
}
// CHECK-LABEL: func.func @link
// CHECK-NEXT:    %[[F:.*]] = tgraph.fused %x
// CHECK:           tgraph.transpose
// CHECK-NEXT:      tgraph.reshape
// CHECK-NEXT:      tgraph.neg
// CHECK:         func.return %[[F]]

// Stays: a transpose moving the last dim (the tiled transpose kernel), a lone slice, and
// a transpose a matmul also reads.
func.func @kept(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<8x4xf32>, tensor<4x4xf32>, tensor<8x8xf32>, tensor<8x8xf32>) {
  %t = tgraph.transpose %x permutation = [1, 0] : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %e = tgraph.exp %t : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %s = tgraph.slice %x start = [0, 0] limit = [4, 4] stride = [1, 1] : (tensor<4x8xf32>) -> tensor<4x4xf32>
  %u = tgraph.transpose %w permutation = [0, 1] : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %m = tgraph.matmul %u, %w : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %n = tgraph.neg %u : (tensor<8x8xf32>) -> tensor<8x8xf32>
  func.return %e, %s, %m, %n : tensor<8x4xf32>, tensor<4x4xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}
// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    %[[T:.*]] = tgraph.transpose %x
// CHECK-NEXT:    tgraph.exp %[[T]]
// CHECK-NEXT:    tgraph.slice %x
// CHECK-NEXT:    %[[U:.*]] = tgraph.transpose %w
// CHECK-NEXT:    tgraph.matmul %[[U]], %w
// CHECK-NEXT:    tgraph.neg %[[U]]

// A stack written as a concat along dim 0 and a reshape splitting it: the concat takes
// size-1 views of its inputs, and joins the transpose after it in one fused op.
func.func @stack_split(%q: tensor<2x3x5x8xbf16>, %k: tensor<2x3x5x8xbf16>) -> tensor<2x5x2x3x8xbf16> {
  %0 = tgraph.concat %q, %k axis = 0 : (tensor<2x3x5x8xbf16>, tensor<2x3x5x8xbf16>) -> tensor<4x3x5x8xbf16>
  %1 = tgraph.reshape %0 : (tensor<4x3x5x8xbf16>) -> tensor<2x2x3x5x8xbf16>
  %r = tgraph.transpose %1 permutation = [1, 3, 0, 2, 4] : (tensor<2x2x3x5x8xbf16>) -> tensor<2x5x2x3x8xbf16>
  func.return %r : tensor<2x5x2x3x8xbf16>
}
// CHECK-LABEL: func.func @stack_split
// CHECK-DAG:     %[[Q:.*]] = tgraph.reshape %q : (tensor<2x3x5x8xbf16>) -> tensor<1x2x3x5x8xbf16>
// CHECK-DAG:     %[[K:.*]] = tgraph.reshape %k : (tensor<2x3x5x8xbf16>) -> tensor<1x2x3x5x8xbf16>
// CHECK:         %[[F:.*]] = tgraph.fused %[[Q]], %[[K]]
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      tgraph.concat
// CHECK-NEXT:      tgraph.transpose
// CHECK-NEXT:      tgraph.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]]

// A fused projection cut into heads: the slice moves after the reshape (now a view of
// the projection) and joins the transpose in one fused op.
func.func @heads(%x: tensor<2x5x48xbf16>) -> tensor<2x2x5x8xbf16> {
  %0 = tgraph.slice %x start = [0, 0, 16] limit = [2, 5, 32] stride = [1, 1, 1] : (tensor<2x5x48xbf16>) -> tensor<2x5x16xbf16>
  %1 = tgraph.reshape %0 : (tensor<2x5x16xbf16>) -> tensor<2x5x2x8xbf16>
  %r = tgraph.transpose %1 permutation = [0, 2, 1, 3] : (tensor<2x5x2x8xbf16>) -> tensor<2x2x5x8xbf16>
  func.return %r : tensor<2x2x5x8xbf16>
}
// CHECK-LABEL: func.func @heads
// CHECK-NEXT:    %[[V:.*]] = tgraph.reshape %x : (tensor<2x5x48xbf16>) -> tensor<2x5x6x8xbf16>
// CHECK-NEXT:    %[[F:.*]] = tgraph.fused %[[V]]
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      tgraph.slice %{{.*}} start = [0, 0, 2, 0] limit = [2, 5, 4, 8] stride = [1, 1, 1, 1]
// CHECK-NEXT:      tgraph.transpose
// CHECK-NEXT:      tgraph.yield
// CHECK:         func.return %[[F]]

// Heads merged back into a projection's width and concatenated: the concat moves before
// the merge, along the heads, and joins the transposes in one fused op.
func.func @merge(%q: tensor<2x2x5x8xbf16>, %k: tensor<2x2x5x8xbf16>) -> tensor<2x5x32xbf16> {
  %0 = tgraph.transpose %q permutation = [0, 2, 1, 3] : (tensor<2x2x5x8xbf16>) -> tensor<2x5x2x8xbf16>
  %1 = tgraph.reshape %0 : (tensor<2x5x2x8xbf16>) -> tensor<2x5x16xbf16>
  %2 = tgraph.transpose %k permutation = [0, 2, 1, 3] : (tensor<2x2x5x8xbf16>) -> tensor<2x5x2x8xbf16>
  %3 = tgraph.reshape %2 : (tensor<2x5x2x8xbf16>) -> tensor<2x5x16xbf16>
  %r = tgraph.concat %1, %3 axis = 2 : (tensor<2x5x16xbf16>, tensor<2x5x16xbf16>) -> tensor<2x5x32xbf16>
  func.return %r : tensor<2x5x32xbf16>
}
// CHECK-LABEL: func.func @merge
// CHECK-NEXT:    %[[F:.*]] = tgraph.fused
// CHECK:           tgraph.concat %{{.*}}, %{{.*}} axis = 2 : (tensor<2x5x2x8xbf16>, tensor<2x5x2x8xbf16>) -> tensor<2x5x4x8xbf16>
// CHECK-NEXT:      tgraph.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[R:.*]] = tgraph.reshape %[[F]] : (tensor<2x5x4x8xbf16>) -> tensor<2x5x32xbf16>
// CHECK-NEXT:    func.return %[[R]]
