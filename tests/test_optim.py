"""``tessera.optim`` and the ops under it (``tgraph.adamw_update``, ``tgraph.sgd_update``):
several steps against ``torch.optim`` on fresh random parameters and gradients (float64
and f32), the lowered multi-tensor kernels on the Tile IR interpreter against the
reference semantics bit for bit, in-place updates of donated buffers, ptxas on the PTX,
and the refused options."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, Float64Type, f32

import tessera.optim as topt
from tessera.errors import TesseraError, TesseraTypeError
from tessera.ir import graph as g
from tessera.passes import pipelines
from tessera.passes.tile_optim import LANES, MAX_TENSORS, UNROLL
from tessera.runtime import ptxas
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host

ODD_SHAPES = [(1,), (7, 3), (33,), (4, 8), (2, 3, 5), (1000003,)]
"""One element, ragged tails, a 16-byte multiple, and one of 1e6 + 3 elements."""


def _torch_pair(rng, shapes, dt):
    ps = [rng.standard_normal(s).astype(dt) for s in shapes]
    return ps, [torch.tensor(p.copy(), requires_grad=True) for p in ps]


def _run_both(make_ours, make_torch, shapes, dt, steps, seed):
    rng = np.random.default_rng(seed)
    ours, theirs = _torch_pair(rng, shapes, dt)
    opt, ref = make_ours(ours), make_torch(theirs)
    for _ in range(steps):
        gs = [rng.standard_normal(s).astype(dt) for s in shapes]
        for t, gr in zip(theirs, gs):
            t.grad = torch.tensor(gr)
        opt.step(gs)
        ref.step()
    return ours, [t.detach().numpy() for t in theirs], opt, ref


def _rel_err(ours, theirs):
    return max(float(np.max(np.abs(a - b)) / max(1e-30, np.max(np.abs(b))))
               for a, b in zip(ours, theirs))


@pytest.mark.parametrize("dt,tol", [(np.float64, 1e-14), (np.float32, 2e-6)])
def test_adamw_matches_torch(dt, tol):
    ours, theirs, opt, ref = _run_both(
        lambda ps: topt.AdamW(ps, lr=3e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1),
        lambda ps: torch.optim.AdamW(ps, lr=3e-2, betas=(0.8, 0.95), eps=1e-6,
                                     weight_decay=0.1),
        ODD_SHAPES, dt, 4, 0,
    )
    assert _rel_err(ours, theirs) < tol
    for k, p in enumerate(ref.param_groups[0]["params"]):
        st = ref.state[p]
        assert _rel_err([opt.state[k]["exp_avg"]], [st["exp_avg"].numpy()]) < tol
        assert _rel_err([opt.state[k]["exp_avg_sq"]], [st["exp_avg_sq"].numpy()]) < tol
        assert opt.state[k]["step"] == 4


@pytest.mark.parametrize("dt,tol", [(np.float64, 1e-14), (np.float32, 2e-6)])
@pytest.mark.parametrize("kw", [
    {"momentum": 0.0},
    {"momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01},
    {"momentum": 0.9, "nesterov": True, "weight_decay": 0.05},
])
def test_sgd_matches_torch(dt, tol, kw):
    ours, theirs, opt, _ = _run_both(
        lambda ps: topt.SGD(ps, lr=0.1, **kw), lambda ps: torch.optim.SGD(ps, lr=0.1, **kw),
        ODD_SHAPES, dt, 3, 1,
    )
    assert _rel_err(ours, theirs) < tol


def test_torch_cpu_params_and_grads_attribute():
    """CPU torch parameters: ``step()`` reads ``.grad``, skips parameters without one (as
    torch does), updates in place; bf16 parameters keep bf16 state."""
    rng = np.random.default_rng(2)
    shapes = [(5, 3), (9,), (4,)]
    ps = [torch.tensor(rng.standard_normal(s), dtype=torch.float32) for s in shapes]
    ts_ = [p.clone().requires_grad_(True) for p in ps]
    ps[0].requires_grad_(True)  # a leaf that requires grad is updated as torch.optim does
    ids = [id(p) for p in ps]
    opt = topt.AdamW(ps, lr=0.01)
    ref = torch.optim.AdamW(ts_, lr=0.01)
    for step in range(3):
        for k, (p, t) in enumerate(zip(ps, ts_)):
            if step == 1 and k == 1:
                p.grad = t.grad = None
                continue
            gr = torch.tensor(rng.standard_normal(shapes[k]), dtype=torch.float32)
            p.grad, t.grad = gr, gr.clone()
        opt.step()
        ref.step()
    assert [id(p) for p in ps] == ids
    assert opt.state[1]["step"] == 2 and opt.state[0]["step"] == 3
    for p, t in zip(ps, ts_):
        torch.testing.assert_close(p.detach(), t.detach(), rtol=2e-6, atol=1e-7)


def test_bf16_params_math_in_f32():
    """bf16 parameters: state in bf16, math in f32, each stored value rounded once (the
    same bits as an f32 computation of the step, rounded to bf16)."""
    rng = np.random.default_rng(3)
    p = rng.standard_normal(37).astype(ml_dtypes.bfloat16)
    gr = rng.standard_normal(37).astype(ml_dtypes.bfloat16)
    opt = topt.SGD([p.copy()], lr=0.1, momentum=0.9)
    opt.step([gr])
    want = (p.astype(np.float32) - np.float32(0.1) * gr.astype(np.float32))
    np.testing.assert_array_equal(opt.params[0], want.astype(ml_dtypes.bfloat16))
    assert opt.state[0]["momentum_buffer"].dtype == ml_dtypes.bfloat16


def _lowered_vs_reference(opt, shapes, dt, seed):
    """One step of ``opt``'s Graph IR function on the reference interpreter and, lowered,
    on the Tile IR interpreter: the same bits; donated buffers are updated in place."""
    rng = np.random.default_rng(seed)
    et = {np.float32: f32, np.float64: Float64Type(), np.float16: Float16Type()}.get(
        dt, BFloat16Type())
    params = [rng.standard_normal(s).astype(dt) for s in shapes]
    opt.params = params
    module = opt._module("step", params, et)
    nstate = len(opt._state_names())
    args = [rng.standard_normal(s).astype(dt) for _ in range(2 + nstate) for s in shapes]
    if nstate:  # second moments are non-negative
        args[-len(shapes):] = [np.abs(a) for a in args[-len(shapes):]]
    hyper = np.asarray(opt._hyper(3), np.float64 if dt == np.float64 else np.float32)
    want = run_function(module, "step", [*args, hyper])
    tile = pipelines.lower_to_tile(module)
    bufs = [a.copy() for a in args]
    got = run_host(tile, "step", [*bufs, hyper])
    n = len(shapes)
    for w, o in zip(want, got):
        assert o.dtype == w.dtype and o.shape == w.shape
        np.testing.assert_array_equal(o.view(np.uint8), w.view(np.uint8))
    # written in place: the host function returns the donated arguments themselves and
    # copies nothing
    host = next(op for op in tile.body.block.ops if isinstance(op, func.FuncOp))
    ret = host.body.block.last_op
    assert isinstance(ret, func.ReturnOp)
    args_ = list(host.body.block.args)
    assert [args_.index(v) for v in ret.arguments] == [*range(n), *range(2 * n, (2 + nstate) * n)]
    assert "_copy_" not in str(tile)
    return tile


@pytest.mark.parametrize("dt", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
def test_adamw_kernel_on_tile_interpreter(dt):
    shapes = [(1,), (7, 3), (16,), (LANES * UNROLL * 4 + 5,), (3, 2)]
    opt = topt.AdamW([np.zeros(1, np.float32)], lr=0.05, weight_decay=0.1)
    _lowered_vs_reference(opt, shapes, dt, 4)


@pytest.mark.parametrize("kw", [{}, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1}])
def test_sgd_kernel_on_tile_interpreter(kw):
    opt = topt.SGD([np.zeros(1, np.float32)], lr=0.05, **kw)
    _lowered_vs_reference(opt, [(5,), (4, 4), (1,)], np.float32, 5)


def test_undonated_update_copies():
    """Without ``tessera.donate`` the update writes fresh buffers: the inputs keep their
    values (the op is a pure function)."""
    opt = topt.SGD([np.zeros(1, np.float32)], lr=0.5, momentum=0.5)
    rng = np.random.default_rng(6)
    shapes = [(6,), (3,)]
    module = opt._module("step", [np.zeros(s, np.float32) for s in shapes], f32)
    del module.body.block.first_op.attributes["tessera.donate"]
    args = [rng.standard_normal(s).astype(np.float32) for _ in range(3) for s in shapes]
    keep = [a.copy() for a in args]
    hyper = np.asarray(opt._hyper(2), np.float32)
    got = run_host(pipelines.lower_to_tile(module), "step", [*args, hyper])
    want = run_function(module, "step", [*keep, hyper])
    assert "_copy_" in str(pipelines.lower_to_tile(module))
    for a, k in zip(args, keep):
        np.testing.assert_array_equal(a, k)
    for o, w in zip(got, want):
        np.testing.assert_array_equal(o, w)


def test_many_tensors_split_into_launches():
    """More tensors than one launch's parameter space holds: several kernels, and the
    tile offsets of each still find every tensor."""
    opt = topt.AdamW([np.zeros(1, np.float32)], lr=0.01)
    shapes = [((k % 7) + 1,) for k in range(MAX_TENSORS * 2 + 3)]
    tile = _lowered_vs_reference(opt, shapes, np.float32, 7)
    assert str(tile).count("ttile.launch") == 3


def test_ptxas_accepts_the_kernels():
    tool = ptxas.find_ptxas()
    if tool is None:
        pytest.skip("ptxas not found")
    for dt, et in ((np.float32, f32), (ml_dtypes.bfloat16, BFloat16Type())):
        for opt in (topt.AdamW([np.zeros(1, dt)], lr=0.01),
                    topt.SGD([np.zeros(1, dt)], lr=0.1, momentum=0.9, nesterov=True)):
            params = [np.zeros(s, dt) for s in [(1,), (7, 3), (4096,), (1000003,)]]
            module = opt._module("step", params, et)
            target = pipelines.lower_to_target(pipelines.lower_to_tile(module))
            ptx = pipelines.to_ptx(target)
            assert "ld.global.v4" in ptx and "st.global.v4" in ptx
            ptxas.check(ptx)


def test_refused_options():
    p = [np.zeros(3, np.float32)]
    with pytest.raises(TesseraError, match="amsgrad=True is not supported"):
        topt.AdamW(p, amsgrad=True)
    with pytest.raises(TesseraError, match="maximize=True is not supported"):
        topt.SGD(p, maximize=True)
    with pytest.raises(TesseraError, match="nesterov needs a momentum > 0"):
        topt.SGD(p, lr=0.1, nesterov=True)
    with pytest.raises(TesseraTypeError, match="parameter 0 is int32"):
        topt.SGD([np.zeros(3, np.int32)], lr=0.1)
    with pytest.raises(TesseraError, match="gradient 0 has shape"):
        topt.SGD(p, lr=0.1).step([np.zeros(4, np.float32)])
    with pytest.raises(TesseraError, match="1 gradients for 2 parameters"):
        topt.SGD([p[0], p[0].copy()], lr=0.1).step([np.zeros(3, np.float32)])
    with pytest.raises(TesseraError, match="appears more than once"):
        topt.AdamW(p * 2)
    with pytest.raises(TesseraError, match="empty parameter list"):
        topt.AdamW([])


def test_op_types():
    assert isinstance(g.hyper_type(f32, 3).element_type, Float32Type)
    assert isinstance(g.hyper_type(Float64Type(), 3).element_type, Float64Type)


def test_costs():
    from tessera.profiler.costs import op_cost

    opt = topt.AdamW([np.zeros(1, np.float32)], lr=0.01)
    module = opt._module("step", [np.zeros(s, np.float32) for s in [(3, 4), (5,)]], f32)
    op = module.body.block.first_op.body.block.first_op
    c = op_cost(op)
    assert c.flops == 14 * 17
    assert c.bytes == 4 * 17 * (4 + 3) + 4 * 3  # read p, g, m, v and hyper; write p, m, v
    sgd = topt.SGD([np.zeros(1, np.float32)], lr=0.1, momentum=0.9, nesterov=True,
                   weight_decay=0.1)
    module = sgd._module("step", [np.zeros((2, 5), np.float32)], f32)
    assert op_cost(module.body.block.first_op.body.block.first_op).flops == 9 * 10


def test_update_functions_in_a_traced_function():
    """``ts.adamw_update`` in a ``ts.jit`` function: a pure function (its inputs keep
    their values) that computes what ``tessera.optim.AdamW`` computes."""
    import tessera as ts

    rng = np.random.default_rng(8)
    shapes = [(3, 5), (4,)]
    p, gr, m = ([rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3))
    v = [np.abs(rng.standard_normal(s)).astype(np.float32) for s in shapes]
    opt = topt.AdamW([x.copy() for x in p], lr=0.01, betas=(0.8, 0.9), weight_decay=0.2)
    opt.state = [{"exp_avg": a.copy(), "exp_avg_sq": b.copy(), "step": 1} for a, b in zip(m, v)]
    hyper = np.asarray(opt._hyper(2), np.float32)

    @ts.jit
    def step(p0, p1, g0, g1, m0, m1, v0, v1, h):
        new_p, new_m, new_v = ts.adamw_update([p0, p1], [g0, g1], [m0, m1], [v0, v1], h,
                                              beta1=0.8, beta2=0.9)
        return (*new_p, *new_m, *new_v)

    keep = [x.copy() for x in (*p, *gr, *m, *v)]
    out = step(*p, *gr, *m, *v, hyper)
    for a, b in zip((*p, *gr, *m, *v), keep):
        np.testing.assert_array_equal(a, b)
    opt.step(gr)
    for got, want in zip(out, [*opt.params, *(s["exp_avg"] for s in opt.state),
                               *(s["exp_avg_sq"] for s in opt.state)]):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TesseraTypeError, match="sgd_update: params must be a list of tensors"):
        ts.jit(lambda x, h: ts.sgd_update(x, [x], [], h)[0][0])(p[1], hyper)


def test_bench_parameter_list():
    """``bench/optim.py`` times GPT-2 124M's parameter list: 148 tensors, 124.4M elements."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.optim import gpt2_shapes

    shapes = gpt2_shapes()
    assert len(shapes) == 148
    assert sum(int(np.prod(s)) for s in shapes) == 124_439_808


def test_cuda_path_on_stand_ins():
    """The CUDA path with the CPU stand-ins of ``bench/host_path.py`` (the launches are
    recorded, not run): after the first step every step is one launch per group through
    the prepared call, with the parameters', buffers' and gradients' own addresses (in
    place, flat views passed as their tensors), the hyper tensor reused while unchanged,
    and the parameters' autograd version counters bumped."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench import host_path

    shapes = [(4, 8), (3,), (16,)]
    with host_path.stand_ins(read=1 + 3 * len(shapes)) as fake:
        ps = [torch.randn(s) for s in shapes]
        gs = [torch.randn(s) for s in shapes]
        opt = topt.SGD(ps, lr=0.1, momentum=0.9)
        versions = [p._version for p in ps]
        opt.step(gs)
        assert opt._fast is not None and fake.launches == 1
        opt.step(gs)
        h2 = fake.last[4][0]
        opt.step(gs)
        assert fake.launches == 3
        _, grid, block, _, values = fake.last
        assert values[0] == h2  # [lr, momentum, 1 - dampening] from step 2 on
        bufs = [st["momentum_buffer"] for st in opt.state]
        assert values[1:] == [t.data_ptr() for p, b, gr in zip(ps, bufs, gs) for t in (p, b, gr)]
        assert block == (LANES, 1, 1) and grid[0] == 3  # 8 vectors, 1 tail slot, 4 vectors
        assert all(p._version > v for p, v in zip(ps, versions))
        assert [st["step"] for st in opt.state] == [3, 3, 3]
