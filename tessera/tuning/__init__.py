"""Autotuning: both tuners, their timer and their on-disk store, in one place.

* :mod:`tessera.tuning.store`: JSON files under :func:`tessera.options.cache_root`,
  read-modify-written under a file lock (:class:`~tessera.tuning.store.JsonStore`).
* :mod:`tessera.tuning.timer`: the CUDA-event timer (median of repeated runs).
* :mod:`tessera.tuning.sm90`: tile configs of the sm90 (TMA + wgmma) matmul, per
  device and shape (``matmul_sm90.json``), and the tuner that fills them.
* :mod:`tessera.tuning.kernel`: the search of ``@kernel.autotune`` (``autotune.json``).

This layer sits above the passes and the runtime (it builds kernels and times
them on the GPU) and below the front ends and the compiler driver.
"""
