# RUN: %python %s | filecheck %s
"""ts.tile.range shares its iterations out (the guide's process_chunks): the chunk loop
across tiles (lb = 0 + tile_id * 128, step = 128 * num_tiles), the element loop across
the lanes of a tile (lb = chunk_start + local_id, step = 1 * group_size). prefetch=2
pipelines the async copies of a loop: its barrier waits with wait_group 1, and a
wait_group 0 drains the pipeline after the loop."""

import tessera as ts

k = ts.kernel.from_source("""
@ts.kernel
def process_chunks(input: ts.Tensor["N", ts.f32], output: ts.Tensor["N", ts.f32]):
    for chunk_start in ts.tile.range(0, N, 128):
        chunk_end = min(chunk_start + 128, N)
        for i in ts.tile.range(chunk_start, chunk_end):
            output[i] = input[i] * 2.0
""", {"ts": ts})
print(k.inspect_ir("tile"))

# CHECK-LABEL: ttile.kernel @process_chunks
# CHECK-DAG:     %[[G:.*]] = ttile.group_size
# CHECK-DAG:     %[[L:.*]] = ttile.local_id
# CHECK-DAG:     %[[T:.*]] = ttile.num_tiles x
# CHECK-DAG:     %[[TID:.*]] = ttile.tile_id x
# CHECK:         %[[C0:.*]] = arith.constant 0 : index
# CHECK-NEXT:    %[[C128:.*]] = arith.constant 128 : index
# CHECK-NEXT:    %[[OFF:.*]] = arith.muli %[[TID]], %[[C128]] : index
# CHECK-NEXT:    %[[LB:.*]] = arith.addi %[[C0]], %[[OFF]] : index
# CHECK-NEXT:    %[[ST:.*]] = arith.muli %[[C128]], %[[T]] : index
# CHECK-NEXT:    scf.for %[[CS:.*]] = %[[LB]] to %N step %[[ST]] {
# CHECK:           %[[END:.*]] = arith.select
# CHECK:           %[[C1:.*]] = arith.constant 1 : index
# CHECK-NEXT:      %[[LOFF:.*]] = arith.muli %[[L]], %[[C1]] : index
# CHECK-NEXT:      %[[ILB:.*]] = arith.addi %[[CS]], %[[LOFF]] : index
# CHECK-NEXT:      %[[IST:.*]] = arith.muli %[[C1]], %[[G]] : index
# CHECK-NEXT:      scf.for %{{.*}} = %[[ILB]] to %[[END]] step %[[IST]] {
# CHECK:           } {tessera.shared_by = "lanes"}
# CHECK-NEXT:    } {tessera.shared_by = "tiles"}

AXPY = """
@ts.kernel
def axpy(X: ts.Tensor["m", ts.f16], Y: ts.Tensor["m", ts.f16], alpha: ts.f16):
    s0 = ts.tile.alloc_shared((128,), ts.f16)
    s1 = ts.tile.alloc_shared((128,), ts.f16)
    for t in ts.tile.range(0, m, 128{prefetch}):
        ts.tile.cp_async(s1, X[t:t+128])
        ts.tile.barrier()
        if t > 0:
            for i in range(ts.tile.local_id(), 128, ts.tile.group_size()):
                Y[t - 128 + i] = alpha * s0[i] + Y[t - 128 + i]
        ts.tile.barrier()
        s0, s1 = s1, s0
"""
for pf in ("", ", prefetch=2"):
    print(ts.kernel.from_source(AXPY.format(prefetch=pf), {"ts": ts}).inspect_ir("tile"))

# CHECK-LABEL: ttile.kernel @axpy
# CHECK:         scf.for
# CHECK:           ttile.copy_async
# CHECK:           ttile.commit_group
# CHECK-NEXT:      ttile.wait_group 0
# CHECK-NEXT:      ttile.barrier
# CHECK-NOT:       ttile.wait_group 1
# CHECK:         ttile.return

# CHECK-LABEL: ttile.kernel @axpy
# CHECK:         scf.for
# CHECK:           ttile.copy_async
# CHECK:           ttile.commit_group
# CHECK-NEXT:      ttile.wait_group 1
# CHECK-NEXT:      ttile.barrier
# CHECK:           ttile.commit_group
# CHECK-NEXT:      ttile.wait_group 1
# CHECK-NEXT:      ttile.barrier
# CHECK:         } {tessera.prefetch = 2 : i64}
# CHECK-NEXT:    ttile.commit_group
# CHECK-NEXT:    ttile.wait_group 0
# CHECK-NEXT:    ttile.return
