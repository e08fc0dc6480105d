"""Repeated calls replayed as a CUDA graph (tessera/runtime/cuda_graphs.py), driven on the
CPU with bench/host_path.py's stand-ins and a driver stand-in that records launches made
while a stream captures and replays them on ``cuGraphLaunch``: a replayed call must give
the GPU exactly the launches (kernels, grids, parameter values) of a call launched kernel
by kernel, a new address must be a new graph, and a refused capture must leave the plan
launching as before."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import host_path  # noqa: E402
from tessera.runtime import cuda, cuda_graphs  # noqa: E402


class CapturingDriver(host_path.FakeDriver):
    """Launches on a capturing stream are recorded into the graph, not run; a graph
    launch runs its records. ``ran`` lists what ran: (function, grid, parameter values)."""

    CUstream_flags = SimpleNamespace(CU_STREAM_NON_BLOCKING=1)
    CUstreamCaptureMode = SimpleNamespace(CU_STREAM_CAPTURE_MODE_RELAXED=2)

    def __init__(self, read: int, refuse: bool = False) -> None:
        super().__init__(read)
        self.ran: list[tuple] = []
        self.capturing: dict[int, list] = {}
        self.refuse = refuse
        self.graph_launches = 0

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # noqa: N802
        super().cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra)
        record = (fn, (gx, gy, gz), tuple(self.last[4]))
        if stream in self.capturing:
            self.capturing[stream].append(record)
        else:
            self.ran.append(record)
        return (0,)

    def cuStreamCreate(self, flags):  # noqa: N802
        return (0, 7)

    def cuStreamBeginCapture(self, stream, mode):  # noqa: N802
        self.capturing[int(stream)] = []
        return (0,)

    def cuStreamEndCapture(self, stream):  # noqa: N802
        return (0, self.capturing.pop(int(stream)))

    def cuGraphInstantiate(self, graph, flags):  # noqa: N802
        if self.refuse:
            return (1,)
        return (0, list(graph))

    def cuGraphLaunch(self, exe, stream):  # noqa: N802
        self.graph_launches += 1
        self.ran.extend(exe)
        return (0,)

    def cuGraphDestroy(self, graph):  # noqa: N802
        return (0,)

    def cuGraphExecDestroy(self, exe):  # noqa: N802
        return (0,)

    def cuStreamDestroy(self, stream):  # noqa: N802
        return (0,)

    def cuGetErrorName(self, err):  # noqa: N802
        return (0, b"CUDA_ERROR_INVALID_VALUE")

    def cuGetErrorString(self, err):  # noqa: N802
        return (0, b"refused")


class Recycling:
    """``torch.empty`` as torch's caching allocator behaves in a steady loop whose results
    die before the next call: after :meth:`next_call`, the n-th allocation of a shape and
    dtype gets the n-th buffer of that shape and dtype of the calls before."""

    def __init__(self) -> None:
        self.pool: dict[tuple, list[torch.Tensor]] = {}
        self.n: dict[tuple, int] = {}
        self.real = torch.empty

    def next_call(self) -> None:
        self.n = {}

    def __call__(self, *shape, **kw):
        t = self.real(*shape, **kw)
        key = (tuple(t.shape), t.dtype)
        bufs, i = self.pool.setdefault(key, []), self.n.get(key, 0)
        self.n[key] = i + 1
        if i < len(bufs):
            return bufs[i]
        bufs.append(t)
        return t


def _plan(monkeypatch, tmp_path, refuse=False):
    import tessera as ts

    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TESSERA_CUDA_GRAPHS", "1")
    monkeypatch.delenv("TESSERA_CUDA_SYNC", raising=False)
    stack = host_path.stand_ins(read=2)
    fake = stack.__enter__()
    driver = CapturingDriver(2, refuse)  # every kernel: its output, an input
    monkeypatch.setattr(cuda, "_driver", lambda: driver)
    monkeypatch.setattr(cuda, "raw_launch", lambda: (lambda *a: 0))  # a real driver's launch

    @ts.jit
    def f(x, w):
        h = ts.tanh(x @ w)
        return ts.exp(ts.transpose(h, [1, 0])) * 2.0, ts.sum(h, axis=1)

    x, w = torch.randn(64, 32), torch.randn(32, 48)
    spec = f.specialize(x, w)
    plan = cuda.host_plan(spec.launch_module(), spec.name, spec.ir("ptx"))
    monkeypatch.setattr(torch, "empty", Recycling())
    return stack, fake, driver, plan, x, w


def test_second_call_records_and_later_calls_replay_the_same_launches(monkeypatch, tmp_path):
    stack, _, driver, plan, x, w = _plan(monkeypatch, tmp_path)
    try:
        run = plan.runner()
        calls = []
        for _ in range(4):
            before = len(driver.ran)
            torch.empty.next_call()  # the last call's results are dead by now
            outs = run([x, w])
            calls.append((driver.ran[before:], [o.data_ptr() for o in outs]))
        graphs = run.__closure__ and [c.cell_contents for c in run.__closure__
                                      if isinstance(c.cell_contents, cuda_graphs.GraphCache)][0]
        assert graphs.captures == 1 and graphs.replays == 3 and driver.graph_launches == 3
        first, addresses = calls[0]
        assert len(first) >= 3, "the function has several kernels"
        for launches, addr in calls[1:]:
            assert addr == addresses, "the recycling allocator gives the same outputs"
            assert launches == first, "a replay runs exactly the launches of a direct call"
        # a new input address: another key, launched directly (then recorded on its second call)
        x2 = x.clone()
        before = len(driver.ran)
        torch.empty.next_call()
        run([x2, w])
        direct = driver.ran[before:]
        assert driver.graph_launches == 3
        assert [r[2] for r in direct] != [r[2] for r in first]
        assert any(x2.data_ptr() in r[2] for r in direct)
        torch.empty.next_call()
        run([x2, w])
        assert graphs.captures == 2 and driver.graph_launches == 4
        assert driver.ran[-len(direct):] == direct
    finally:
        stack.__exit__(None, None, None)


def test_a_refused_capture_leaves_the_plan_launching_kernel_by_kernel(monkeypatch, tmp_path):
    stack, _, driver, plan, x, w = _plan(monkeypatch, tmp_path, refuse=True)
    try:
        run = plan.runner()
        torch.empty.next_call()
        first = run([x, w])
        n = len(driver.ran)
        torch.empty.next_call()
        with pytest.warns(RuntimeWarning, match="CUDA graph capture failed"):
            second = run([x, w])
        assert driver.graph_launches == 0 and len(driver.ran) == 2 * n
        assert driver.ran[n:] == driver.ran[:n]
        assert [o.data_ptr() for o in first] == [o.data_ptr() for o in second]
        torch.empty.next_call()
        run([x, w])
        assert len(driver.ran) == 3 * n
    finally:
        stack.__exit__(None, None, None)


def test_graphs_are_off_unless_asked(monkeypatch, tmp_path):
    stack, _, driver, plan, x, w = _plan(monkeypatch, tmp_path)
    try:
        monkeypatch.delenv("TESSERA_CUDA_GRAPHS")
        run = plan.runner()
        for _ in range(3):
            torch.empty.next_call()
            run([x, w])
        assert driver.graph_launches == 0 and not driver.capturing
    finally:
        stack.__exit__(None, None, None)
