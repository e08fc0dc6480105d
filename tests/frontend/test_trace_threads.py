"""Tracing is per thread: concurrent ``@ts.jit`` calls (with ``ts.constant``) in 8 threads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import tessera as ts
from tessera.frontend.tracing import active_trace


def test_eight_threads_trace_and_run_concurrently() -> None:
    barrier = threading.Barrier(8)

    def work(k: int) -> list[np.ndarray]:
        # one function per thread and call: every call traces while the others trace
        outs = []
        for j in range(15):
            def body(x, k=k, j=j):
                if j == 0:
                    barrier.wait(timeout=30)  # all 8 threads are inside a trace now
                c = ts.constant(np.full(x.shape, float(k * 100 + j)))
                return ts.tanh(x) + c * 2.0

            f = ts.jit(body)
            x = np.linspace(-1.0, 1.0, 6).reshape(2, 3) * (k + 1)
            outs.append((f(x), np.tanh(x) + 2.0 * (k * 100 + j)))
        return outs

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(work, range(8)))
    assert len(results) == 8
    for outs in results:
        assert len(outs) == 15
        for got, want in outs:
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    assert active_trace() is None


def test_a_thread_does_not_see_another_threads_trace() -> None:
    inside = threading.Event()
    release = threading.Event()
    seen: list[object] = []

    def body(x):
        inside.set()
        release.wait(timeout=30)
        return x * 2.0

    t = threading.Thread(target=lambda: ts.jit(body)(np.ones(3)))
    t.start()
    assert inside.wait(timeout=30)
    seen.append(active_trace())  # the other thread is inside its trace now
    release.set()
    t.join(timeout=30)
    assert seen == [None]
