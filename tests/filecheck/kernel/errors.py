# RUN: not %python %s 2>&1 | filecheck %s
"""Compile errors name the kernel's file and line and quote the line."""

import tessera as ts

k = ts.kernel.from_source("""
@kernel
def bad(x: f32[n], y: mut f32[n]):
    i = tile.linear_id()
    x[i] = y[i]
""", file="bad_kernel.py")
k.inspect_ir("tile")

# CHECK: KernelCompileError: bad_kernel.py:5: error: cannot write to 'x': the argument is read-only (declare it mut, e.g. 'y: mut[f32[n]]')
# CHECK-NEXT:     x[i] = y[i]
