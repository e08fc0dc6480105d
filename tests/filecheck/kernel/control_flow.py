# RUN: %python %s | filecheck %s
"""Python variables become SSA values carried through scf.if / scf.for / scf.while."""

import tessera as ts

k = ts.kernel.from_source("""
@kernel
def cf(x: f32[n], y: mut f32[n]):
    i = tile.linear_id()
    acc = 0.0
    for t in tile.range(0, n, 4, prefetch=2):
        acc += x[t]
    if i < 3:
        v = acc
    else:
        v = 1
    s = 8
    while s > 1:
        s //= 2
    y[0] = v + s
""")
print(k.inspect_ir("tile"))

# CHECK:      %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
# CHECK:      %acc = scf.for %[[T:.*]] = %{{.*}} to %n step %{{.*}} iter_args(%[[A:.*]] = %[[ZERO]]) -> (f32) {
# CHECK-NEXT:   %[[X:.*]] = ttile.load %x[%[[T]]] : memref<?xf32> -> f32
# CHECK-NEXT:   %[[NEW:.*]] = arith.addf %[[A]], %[[X]] : f32
# CHECK-NEXT:   scf.yield %[[NEW]] : f32
# CHECK-NEXT: } {tessera.prefetch = 2 : i64}
# CHECK:      %v = scf.if %{{.*}} -> (f32) {
# CHECK-NEXT:   scf.yield %acc : f32
# CHECK-NEXT: } else {
# CHECK-NEXT:   %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
# CHECK-NEXT:   scf.yield %[[ONE]] : f32
# CHECK-NEXT: }
# CHECK:      %s = scf.while (%[[S:.*]] = %{{.*}}) : (index) -> index {
# CHECK:        scf.condition(%{{.*}}) %[[S]] : index
# CHECK:      } do {
# CHECK:        arith.shrsi
# CHECK:        scf.yield
# CHECK:      arith.index_cast %s : index to i64
