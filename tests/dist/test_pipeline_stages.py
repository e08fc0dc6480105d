"""``with ts.stage(k):`` -- the front-end spelling of pipeline stages: ops traced inside
carry ``tessera.stage = k``, and ``spmd-partition`` turns the values that cross stages
into ``tgraph.send`` / ``tgraph.recv`` over the mesh's ``pp`` axis. (Two gloo processes
run such a function in tests/dist/test_dist_gloo.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.parser import Parser

import tessera as ts
from tessera.dist.executor import partitioned
from tessera.ir.context import default_context

RNG = np.random.default_rng(41)


def make_pipe():
    @ts.jit(mesh={"pp": 2})
    def pipe(x, w1, w2):
        with ts.stage(0):
            h = ts.tanh(ts.matmul(x, w1))
        with ts.stage(1):
            y = ts.matmul(h, w2)
        return y

    return pipe


def test_stage_marks_the_traced_ops():
    pipe = make_pipe()
    x, w1, w2 = RNG.standard_normal((4, 8)), RNG.standard_normal((8, 16)), RNG.standard_normal((16, 8))
    # one process: the whole program, as the float64 reference
    np.testing.assert_allclose(pipe(x, w1, w2), np.tanh(x @ w1) @ w2, rtol=1e-12)
    traced = pipe.inspect_ir("traced")
    lines = [ln for ln in traced.splitlines() if "tgraph." in ln]
    assert [("stage = 0" in ln, "stage = 1" in ln) for ln in lines] == [
        (True, False), (True, False), (False, True)]


def test_spmd_partition_sends_across_the_boundary():
    pipe = make_pipe()
    x, w1, w2 = RNG.standard_normal((4, 8)), RNG.standard_normal((8, 16)), RNG.standard_normal((16, 8))
    pipe(x, w1, w2)
    mod = Parser(default_context(), pipe.inspect_ir("traced")).parse_module()
    text = str(partitioned(mod, "pipe"))
    send = [ln for ln in text.splitlines() if "tgraph.send" in ln]
    recv = [ln for ln in text.splitlines() if "tgraph.recv" in ln]
    assert len(send) == 1 and len(recv) == 1
    assert 'axis = "pp"' in send[0] and "peer = 1" in send[0] and "stage = 0" in send[0]
    assert "peer = -1" in recv[0] and "stage = 1" in recv[0]


def test_nested_stages_innermost_wins_and_unstaged_ops_have_none():
    @ts.jit(mesh={"pp": 3})
    def f(x):
        a = ts.exp(x)
        with ts.stage(0):
            b = ts.tanh(a)
            with ts.stage(2):
                c = ts.exp(b)
            d = ts.tanh(b)
        return c + d

    f(RNG.standard_normal(5))
    lines = [ln for ln in f.inspect_ir("traced").splitlines() if "tgraph." in ln]
    assert ["stage = 2" in ln for ln in lines] == [False, False, True, False, False]
    assert ["stage = 0" in ln for ln in lines] == [False, True, False, True, False]


def test_bad_stages_are_located_errors():
    with pytest.raises(ts.TraceError, match=r"ts.stage: used outside a traced function"):
        with ts.stage(0):
            pass

    @ts.jit(mesh={"pp": 2})
    def neg(x):
        with ts.stage(-1):
            return ts.exp(x)

    with pytest.raises(ts.TraceError, match=r"int >= 0, got -1 \(test_pipeline_stages.py:\d+\)"):
        neg(np.ones(3))

    @ts.jit(mesh={"pp": 2})
    def backwards(x):
        with ts.stage(1):
            h = ts.exp(x)
        with ts.stage(0):
            return ts.exp(h)

    backwards(np.ones(3))  # one process: runs the whole program
    mod = Parser(default_context(), backwards.inspect_ir("traced")).parse_module()
    with pytest.raises(Exception, match="uses a value computed at later stage 1"):
        partitioned(mod, "backwards")
