"""A host plan's launches replayed as one CUDA graph.

A repeated call of a host plan (:meth:`tessera.runtime.cuda.HostPlan.runner`) spends a
few microseconds of Python and one ``cuLaunchKernel`` per kernel, and the GPU waits for
each launch to arrive: a training step of a thousand kernels can take longer to issue
than to run. What such a call launches is fixed by a short key: the addresses of its
inputs, its outputs and its intermediates' arena block, and its scalar arguments (the
kernels, grids, constants and shapes belong to the plan). So:

* the first call with a key launches as usual and remembers the key;
* the second records the launches into a graph by stream capture on a private stream
  (nothing runs while capturing: the driver copies each launch's parameters, tensor
  maps included, into the graph), instantiates it and launches it;
* later calls with that key launch the graph: one driver call for the whole plan.

With graphs on, a plan keeps its intermediates' arena between calls (one block per
stream: calls on one stream are ordered, so they can share it) instead of taking it
from torch's caching allocator per call; otherwise the key would hardly ever repeat.
That holds the arena's memory (the largest set of intermediates live at once) for the
plan's lifetime.

Replay gives the same kernels with the same parameters, so the same bits. A key covers
every address a kernel of the plan is given; a call whose addresses differ (a new
input, an output or arena block placed elsewhere by torch's caching allocator) is
another key. At most :data:`GRAPHS_PER_PLAN` executables are kept per plan (the oldest
is destroyed) and a plan stops capturing after :data:`MAX_CAPTURES` captures, so keys
that never repeat cost a dictionary lookup per call. A capture the driver refuses turns
graphs off for that plan with a warning; its calls launch kernel by kernel as before.

On with ``TESSERA_CUDA_GRAPHS=1``, or for the plans first run inside
:func:`requested_here` (``torch.compile(..., backend="tessera", mode="reduce-overhead")``
runs its partitions so: as Inductor's mode of that name, it trades memory for launch
overhead); never under ``TESSERA_CUDA_SYNC=1`` (which synchronizes after each launch) or
with a stand-in driver (no ``libcuda``).

Measured (H100, GPT-2 124M through ``torch.compile(backend="tessera")``, bf16, batch
8 x 1024, docs/PERFORMANCE.md): inference 8.89 -> 8.25 ms a step (225 kernels);
a training step unchanged (32.8 / 33.0 ms: its 1,057 kernels take 29.9 ms and the host
issues them in 18 ms either way). Keys repeat only where the caching allocator hands out
the same addresses each call: a loop whose results die before the next call. A loop that
allocates other tensors between calls (optimizer steps, copies of results) seldom
repeats a key and replays nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

GRAPHS_PER_PLAN = 4
"""Graph executables kept per host plan (per distinct key)."""

MAX_CAPTURES = 16
"""Captures a host plan makes before it only replays the graphs it has."""


_REQUESTED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "tessera_cuda_graphs_requested", default=False)


@contextlib.contextmanager
def requested_here() -> Iterator[None]:
    """Host plans first run inside this context use CUDA graphs (as with
    ``TESSERA_CUDA_GRAPHS=1``); a plan decides when it is first run and keeps to it."""
    token = _REQUESTED.set(True)
    try:
        yield
    finally:
        _REQUESTED.reset(token)


def requested() -> bool:
    """Whether the caller is inside :func:`requested_here`."""
    return _REQUESTED.get()


class GraphCache:
    """The graphs of one host plan, by key, on one device (``driver``: cuda.bindings'
    driver module, or a stand-in with the same calls)."""

    def __init__(self, driver: Any, name: str) -> None:
        self.driver = driver
        self.name = name
        self.graphs: OrderedDict[Hashable, Any] = OrderedDict()
        self.seen: OrderedDict[Hashable, None] = OrderedDict()
        self.captures = 0
        self.replays = 0
        self.enabled = True
        self._capture_stream: Any = None
        self._streams: dict[int, Any] = {}
        self._lock = threading.Lock()
        self.arenas: dict[int, Any] = {}
        """The plan's intermediates' block per raw stream handle, kept between calls."""

    def get(self, key: Hashable) -> Any:
        """The executable recorded for ``key``, or None."""
        return self.graphs.get(key)

    def should_capture(self, key: Hashable) -> bool:
        """Whether a call with ``key`` should be recorded now: the key was seen before
        (keys seen once are remembered, a few at a time) and captures remain."""
        if not self.enabled or self.captures >= MAX_CAPTURES:
            return False
        if key in self.seen:
            del self.seen[key]
            return True
        self.seen[key] = None
        if len(self.seen) > 2 * GRAPHS_PER_PLAN:
            self.seen.popitem(last=False)
        return False

    def capture(self, key: Hashable, launch_all: Callable[[int], None]) -> Any:
        """Record ``launch_all(stream)`` (the plan's launches on the raw stream handle it
        is given) as a graph for ``key`` and return its executable, or None when the
        driver refuses (graphs are then off for this plan; nothing was launched)."""
        with self._lock:  # one capture at a time on the private stream
            return self._capture(key, launch_all)

    def _capture(self, key: Hashable, launch_all: Callable[[int], None]) -> Any:
        d = self.driver
        self.captures += 1
        try:
            stream = self._capture_stream
            if stream is None:
                stream = self._capture_stream = _ok(
                    d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate"
                )
            _ok(d.cuStreamBeginCapture(
                stream, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
            ), "cuStreamBeginCapture")
            try:
                launch_all(int(stream))
            finally:
                graph = _ok(d.cuStreamEndCapture(stream), "cuStreamEndCapture")
            try:
                exe = _ok(d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
            finally:
                d.cuGraphDestroy(graph)
        except Exception as e:  # the plan then launches kernel by kernel (same results)
            self.enabled = False
            warnings.warn(f"tessera: {self.name} launches kernel by kernel (CUDA graph "
                          f"capture failed: {e})", RuntimeWarning, stacklevel=3)
            return None
        self.graphs[key] = exe
        if len(self.graphs) > GRAPHS_PER_PLAN:
            _, old = self.graphs.popitem(last=False)
            d.cuGraphExecDestroy(old)
        return exe

    def launch(self, exe: Any, stream: int) -> None:
        """Launch the executable ``exe`` on the raw stream handle ``stream``."""
        s = self._streams.get(stream)
        if s is None:
            s = self._streams[stream] = self.driver.CUstream(stream)
        _ok(self.driver.cuGraphLaunch(exe, s), f"cuGraphLaunch({self.name})")
        self.replays += 1

    def close(self) -> None:
        """Destroy every executable and the capture stream."""
        d = self.driver
        for exe in self.graphs.values():
            d.cuGraphExecDestroy(exe)
        self.graphs.clear()
        self.arenas.clear()
        if self._capture_stream is not None:
            d.cuStreamDestroy(self._capture_stream)
            self._capture_stream = None


def _ok(result: Any, what: str) -> Any:
    """The value of a cuda.bindings ``(CUresult, value...)`` tuple; raise on an error."""
    from tessera.runtime.cuda import check

    return check(result, what)
