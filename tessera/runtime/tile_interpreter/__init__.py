"""Numpy reference interpreter for Tile IR, on xDSL's interpreter framework.

A kernel runs over its whole grid in lockstep: every SSA value inside a kernel
is a numpy array with one entry per lane of the grid (shape ``(L,)`` for scalars,
``(L, W)`` for ``vector<W>`` values), or a numpy scalar / ``(W,)`` array when the
value is the same on every lane. Each op therefore executes once per launch.
Control flow whose condition differs between lanes runs under an active-lane
mask: only active lanes store, and region results are merged with ``np.where``.
``ttile.barrier`` is a no-op in lockstep (exact for race-free programs) but
checks that whole tiles reach it; shared memory is one numpy buffer per tile.

Entry points:

* :func:`run_kernel` runs one ``ttile.kernel`` on numpy arrays (in place).
* :func:`run_host` runs a host ``func.func`` (``memref.alloc``, ``memref.collapse_shape`` /
  ``expand_shape`` (numpy views),
  ``memref.get_global``, ``ttile.launch``, host collectives such as
  ``ttile.all_reduce``, ``func.return``) on numpy inputs, as produced by
  ``lower-graph-to-tile``.

A package: :mod:`.state` (dtypes, the launch state, memory accesses), :mod:`.tile_ops`
(``ttile``), :mod:`.lockstep` (``scf``, ``arith``, ``math``, ``vector``, ``memref`` in
kernels) and :mod:`.host` (the entry points and host functions); this module
re-exports their public names.
"""

from __future__ import annotations

from tessera.runtime.tile_interpreter.host import (
    HostCollectiveFunctions,
    HostFunctions,
    run_host,
    run_kernel,
)
from tessera.runtime.tile_interpreter.lockstep import (
    KERNEL_FUNCTIONS,
    LockstepArithFunctions,
    LockstepMathFunctions,
    LockstepMemrefFunctions,
    LockstepScfFunctions,
    LockstepVectorFunctions,
)
from tessera.runtime.tile_interpreter.state import (
    LaunchData,
    LaunchState,
    SharedBuffer,
    compute_dtype,
    np_dtype,
    scalar_type,
)
from tessera.runtime.tile_interpreter.tile_ops import (
    TileFunctions,
)

__all__ = [
    "HostCollectiveFunctions",
    "HostFunctions",
    "KERNEL_FUNCTIONS",
    "LaunchData",
    "LaunchState",
    "LockstepArithFunctions",
    "LockstepMathFunctions",
    "LockstepMemrefFunctions",
    "LockstepScfFunctions",
    "LockstepVectorFunctions",
    "SharedBuffer",
    "TileFunctions",
    "compute_dtype",
    "np_dtype",
    "run_host",
    "run_kernel",
    "scalar_type",
]
