"""Compute/communication overlap (tessera.dist.overlap) without processes: collectives
hoisted to right after their inputs, segments cut at the first use of an in-flight
collective, and the schedule (which segments run while each collective is in flight).
Bitwise equality with and without overlap over gloo is in tests/dist/test_dist_gloo.py; the
CUDA stream path in tests/gpu/test_dist_overlap_gpu.py."""

from __future__ import annotations

from tessera import dist
from tessera.dist.executor import parse
from tessera.dist.overlap import InFlight, overlap_plan
from tessera.dist.segments import CollectiveStep, Segment, SegmentedProgram

T = "tensor<8x8xf64>"


def program(late: bool) -> str:
    """``s = all_reduce(x @ w) + (tanh(v) @ tanh(v))``; with ``late`` the all_reduce is
    written after the independent compute."""
    g = f"%g = tgraph.matmul %x, %w : ({T}, {T}) -> {T}"
    r = f'%r = tgraph.all_reduce %g op = "sum" axis = "dp" : ({T}) -> {T}'
    ind = [f"%h = tgraph.tanh %v : ({T}) -> {T}",
           f"%k = tgraph.matmul %h, %h : ({T}, {T}) -> {T}"]
    body = [g, *ind, r] if late else [g, r, *ind]
    lines = "\n  ".join(body)
    return f"""func.func @ov(%x: {T}, %w: {T}, %v: {T}) -> {T} attributes {{tessera.mesh = #tessera.mesh<dp = 2>}} {{
  {lines}
  %s = tgraph.add %r, %k : ({T}, {T}) -> {T}
  func.return %s : {T}
}}"""


def shape(p: SegmentedProgram) -> list[str]:
    out = []
    for s in p.steps:
        if isinstance(s, CollectiveStep):
            out.append(s.op.name)
        else:
            assert isinstance(s, Segment)
            ops = s.spec.traced.walk()
            out.append("+".join(o.name.split(".")[1] for o in ops if o.name.startswith("tgraph")))
    return out


MESH = dist.Mesh(axes=["dp"], devices=range(2))


def test_without_overlap_the_program_order_is_kept():
    p = SegmentedProgram(parse(program(late=True)), "ov", MESH, overlap=False)
    assert shape(p) == ["matmul+tanh+matmul", "tgraph.all_reduce", "add"]
    assert overlap_plan(p.steps) == [InFlight(1, (), 2)]


def test_collective_hoisted_and_independent_compute_overlaps():
    for late in (False, True):
        p = SegmentedProgram(parse(program(late)), "ov", MESH, overlap=True)
        assert shape(p) == ["matmul", "tgraph.all_reduce", "tanh+matmul", "add"], late
        assert overlap_plan(p.steps) == [InFlight(1, (2,), 3)]
    # the caller's module is not reordered
    mod = parse(program(late=True))
    SegmentedProgram(mod, "ov", MESH, overlap=True)
    names = [o.name for o in mod.walk() if o.name.startswith("tgraph")]
    assert names == ["tgraph.matmul", "tgraph.tanh", "tgraph.matmul", "tgraph.all_reduce",
                     "tgraph.add"]


def test_collectives_keep_their_order_and_chain():
    text = f"""func.func @two(%x: {T}, %v: {T}) -> ({T}, {T}) attributes {{tessera.mesh = #tessera.mesh<dp = 2>}} {{
  %a = tgraph.exp %x : ({T}) -> {T}
  %b = tgraph.tanh %v : ({T}) -> {T}
  %c = tgraph.all_reduce %b op = "sum" axis = "dp" : ({T}) -> {T}
  %d = tgraph.all_reduce %a op = "max" axis = "dp" : ({T}) -> {T}
  %e = tgraph.exp %d : ({T}) -> {T}
  %f = tgraph.exp %c : ({T}) -> {T}
  func.return %e, %f : {T}, {T}
}}"""
    p = SegmentedProgram(parse(text), "two", MESH, overlap=True)
    # %c's all_reduce stays first; tanh (its input) moves before exp(x), so %c is in
    # flight while exp(x) runs; both exp consumers wait (the comm stream is in order)
    assert shape(p) == ["tanh", "tgraph.all_reduce", "exp", "tgraph.all_reduce", "exp+exp"]
    assert overlap_plan(p.steps) == [InFlight(1, (2,), 4), InFlight(3, (), 4)]


class _FakeCuda:
    """Records what StreamOverlap asks of torch.cuda (streams, events, waits)."""

    def __init__(self, log: list):
        self.log = log
        test = self

        class Stream:
            def __init__(self, name="comm", device=None):
                self.name, self.device = name, device

            def wait_event(self, ev):
                test.log.append(f"{self.name} waits {ev.name}")

        class Event:
            n = 0

            def __init__(self):
                Event.n += 1
                self.name = f"e{Event.n}"

            def record(self, stream):
                test.log.append(f"{self.name} on {stream.name}")

        class _Ctx:
            def __init__(self, s):
                self.s = s

            def __enter__(self):
                test.log.append(f"enter {self.s.name}")

            def __exit__(self, *a):
                test.log.append(f"exit {self.s.name}")

        self.Stream, self.Event = Stream, Event
        self.current_stream = lambda: Stream("compute")
        self.stream = _Ctx


class _FakeTorch:
    class Tensor:
        is_cuda = True

        def __init__(self, name, log):
            self.name, self.log = name, log

        def record_stream(self, s):
            self.log.append(f"{self.name} used on {s.name}")

    def __init__(self, log):
        self.cuda = _FakeCuda(log)


def test_stream_overlap_orders_with_events():
    from tessera.dist.overlap import StreamOverlap

    log: list = []
    fake = _FakeTorch(log)
    so = StreamOverlap(torch_module=fake)
    a, b, c = object(), object(), object()  # the IR values of a program
    x = fake.Tensor("x", log)
    so.before_segment([])
    (r,) = so.collective(lambda: [fake.Tensor("r", log)], [x], [b])
    so.before_segment([a])  # independent: no wait
    log.append("-- consumer")
    so.before_segment([b, c])  # uses the collective's result: waits for it
    so.finish([b])
    assert log == [
        "e1 on compute", "comm waits e1", "x used on comm", "enter comm", "exit comm",
        "e2 on comm", "r used on compute", "-- consumer", "compute waits e2",
    ]
    assert so.used_streams == ["compute", "comm", "compute", "compute"]
