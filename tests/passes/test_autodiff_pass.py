"""The ``autodiff`` pass as a whole: errors, determinism, collectives and random ops.

Collectives are checked numerically on a simulated 2-rank SPMD run (one thread
per rank, exchanging values through the interpreter's collective hook) against
torch.autograd on the same program written out across ranks.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest
import torch
from xdsl.context import Context
from xdsl.ir import Operation

from tessera.autodiff.rules import AutodiffError
from tessera.ir import graph as g
from tessera.passes.autodiff import AutodiffPass
from tessera.runtime import graph_interpreter as gi
from tessera.runtime.graph_interpreter import run_function
from tests.autodiff.test_autodiff_rules import parse

LOSS = """
func.func @loss(%x: tensor<4x3xf64>, %W: tensor<3x2xf64>, %b: tensor<2xf64>, %y: tensor<4x2xf64>) -> tensor<f64> {
  %0 = tgraph.matmul %x, %W : (tensor<4x3xf64>, tensor<3x2xf64>) -> tensor<4x2xf64>
  %1 = tgraph.add %0, %b : (tensor<4x2xf64>, tensor<2xf64>) -> tensor<4x2xf64>
  %2 = tgraph.relu %1 : (tensor<4x2xf64>) -> tensor<4x2xf64>
  %3 = tgraph.mse %2, %y : (tensor<4x2xf64>, tensor<4x2xf64>) -> tensor<f64>
  func.return %3 : tensor<f64>
}
"""


def run_pass(text: str, **opts) -> object:
    m = parse(text)
    AutodiffPass(**opts).apply(Context(), m)
    m.verify()
    return m


def test_guide_loss_function_gradients_match_torch() -> None:
    m = run_pass(LOSS, wrt=(1, 2), return_value=True)
    rng = np.random.default_rng(0)
    x, W, b, y = (rng.standard_normal(s) for s in ((4, 3), (3, 2), (2,), (4, 2)))
    loss, gW, gb = run_function(m, "loss_grad", [x, W, b, y])
    tW, tb = torch.tensor(W, requires_grad=True), torch.tensor(b, requires_grad=True)
    tl = torch.nn.functional.mse_loss(torch.relu(torch.tensor(x) @ tW + tb), torch.tensor(y))
    tl.backward()
    np.testing.assert_allclose(loss, tl.item(), rtol=1e-12)
    np.testing.assert_allclose(gW, tW.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(gb, tb.grad.numpy(), rtol=1e-10)


def test_gradient_module_text_is_deterministic_and_runs_bitwise_identically() -> None:
    texts = [str(run_pass(LOSS)) for _ in range(2)]
    assert texts[0] == texts[1]
    m = run_pass(LOSS)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float64) for s in ((4, 3), (3, 2), (2,), (4, 2))]
    a = run_function(m, "loss_grad", args)
    b = run_function(m, "loss_grad", args)
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b))


@pytest.mark.parametrize(
    "opts, message",
    [
        ({"wrt": (7,)}, "argument index 7 out of range: @loss has 4 arguments"),
        ({"function": "nope"}, "no function @nope in the module (functions: loss)"),
        ({"mode": "sideways"}, "unknown mode 'sideways'"),
    ],
)
def test_bad_options_are_named(opts: dict, message: str) -> None:
    with pytest.raises(AutodiffError) as e:
        run_pass(LOSS, **opts)
    assert message in str(e.value)


def test_integer_argument_and_existing_name_are_rejected() -> None:
    text = """
    func.func @f(%a: tensor<4xf32>, %n: tensor<4xi32>) -> tensor<f32> {
      %1 = tgraph.sum %a axes = [] : (tensor<4xf32>) -> tensor<f32>
      func.return %1 : tensor<f32>
    }
    """
    with pytest.raises(AutodiffError, match=r"argument 1 of @f has type tensor<4xi32>"):
        run_pass(text, wrt=(1,))
    m = run_pass(text)  # default: float arguments only
    assert "func.func @f_grad(%a: tensor<4xf32>, %n: tensor<4xi32>) -> tensor<4xf32>" in str(m)
    with pytest.raises(AutodiffError, match=r"@f_grad already exists"):
        AutodiffPass(function="f").apply(Context(), m)


def test_non_differentiable_op_is_named_and_inactive_one_is_fine() -> None:
    text = """
    func.func @f(%a: tensor<4x4xf32>, %c: tensor<4x4xf32>) -> tensor<f32> {
      %s = tgraph.all_slice %c axis = "tp" dim = 0 : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %e = tgraph.exp %a : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %m = tgraph.mul %e, %s : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
      %l = tgraph.sum %m axes = [] : (tensor<4x4xf32>) -> tensor<f32>
      func.return %l : tensor<f32>
    }
    """
    run_pass(text, wrt=(0,))  # the all_slice does not depend on %a
    with pytest.raises(
        AutodiffError, match=r"tgraph.all_slice \(operation #0 of @f\) is not differentiable"
    ):
        run_pass(text, wrt=(1,))


def test_random_ops_replay_their_stream_and_poisson_rate_gets_zero() -> None:
    text = """
    func.func @f(%x: tensor<6xf64>, %lam: tensor<6xf64>) -> tensor<f64> {
      %n = tgraph.randn seed = 5 offset = 2 : tensor<6xf64>
      %k = tgraph.poisson %lam seed = 9 : (tensor<6xf64>) -> tensor<6xf64>
      %y = tgraph.mul %x, %n : (tensor<6xf64>, tensor<6xf64>) -> tensor<6xf64>
      %z = tgraph.mul %y, %k : (tensor<6xf64>, tensor<6xf64>) -> tensor<6xf64>
      %l = tgraph.sum %z axes = [] : (tensor<6xf64>) -> tensor<f64>
      func.return %l : tensor<f64>
    }
    func.func @samples(%lam: tensor<6xf64>) -> (tensor<6xf64>, tensor<6xf64>) {
      %n = tgraph.randn seed = 5 offset = 2 : tensor<6xf64>
      %k = tgraph.poisson %lam seed = 9 : (tensor<6xf64>) -> tensor<6xf64>
      func.return %n, %k : tensor<6xf64>, tensor<6xf64>
    }
    """
    m = run_pass(text, function="f")
    x = np.linspace(-1, 1, 6)
    lam = np.full(6, 3.0)
    gx, glam = run_function(m, "f_grad", [x, lam])
    n, k = run_function(m, "samples", [lam])
    np.testing.assert_array_equal(gx, n * k)  # d/dx sum(x n k) = n k, same samples
    np.testing.assert_array_equal(glam, np.zeros(6))


# --------------------------------------------------------------------------- collectives

RANKS = 2


class SimulatedGroup:
    """Runs collectives among RANKS threads, one per rank, in a fixed rank order."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(RANKS)
        self.slots: dict[int, list[np.ndarray]] = {}
        self.local = threading.local()

    def __call__(self, op: Operation, args: list[np.ndarray], group: int) -> np.ndarray:
        assert group == RANKS
        r, key = self.local.rank, self.local.count
        self.local.count += 1
        self.slots.setdefault(key, [np.empty(0)] * RANKS)[r] = args[0]
        self.barrier.wait()
        vals = self.slots[key]
        out = _collective(op, vals, r)
        self.barrier.wait()
        return out

    def run(self, module: object, name: str, per_rank: Sequence[list[np.ndarray]]) -> list:
        results: list = [None] * RANKS
        errors: list[BaseException] = []

        def worker(r: int) -> None:
            self.local.rank, self.local.count = r, 0
            try:
                results[r] = run_function(module, name, per_rank[r])
            except BaseException as e:  # re-raised in the main thread
                errors.append(e)
                self.barrier.abort()

        threads = [threading.Thread(target=worker, args=(r,)) for r in range(RANKS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results


def _collective(op: Operation, vals: list, r: int):
    lib = np if isinstance(vals[0], np.ndarray) else torch
    cat = np.concatenate if lib is np else torch.cat

    def split(x, n, d):
        size = x.shape[d] // n
        idx = [slice(None)] * x.ndim
        out = []
        for i in range(n):
            idx[d] = slice(i * size, (i + 1) * size)
            out.append(x[tuple(idx)])
        return out

    total = vals[0]
    for v in vals[1:]:
        total = total + v
    if isinstance(op, g.AllReduceOp):
        return total if op.op.data == "sum" else total / len(vals)
    if isinstance(op, g.AllGatherOp):
        return cat(vals, op.dim.value.data)
    if isinstance(op, g.ReduceScatterOp):
        return split(total, len(vals), op.dim.value.data)[r]
    if isinstance(op, g.AllToAllOp):
        sd, cd = op.split_dim.value.data, op.concat_dim.value.data
        return cat([split(v, len(vals), sd)[r] for v in vals], cd)
    raise AssertionError(op.name)


SPMD = """
func.func @f(%x: tensor<2x3xf64>, %W: tensor<3x4xf64>) -> tensor<f64> attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  %y = tgraph.matmul %x, %W : (tensor<2x3xf64>, tensor<3x4xf64>) -> tensor<2x4xf64>
  %g = tgraph.all_gather %y axis = "tp" dim = 0 : (tensor<2x4xf64>) -> tensor<4x4xf64>
  %a = tgraph.all_to_all %g axis = "tp" split_dim = 1 concat_dim = 0 : (tensor<4x4xf64>) -> tensor<8x2xf64>
  %s = tgraph.reduce_scatter %a op = "sum" axis = "tp" dim = 0 : (tensor<8x2xf64>) -> tensor<4x2xf64>
  %t = tgraph.all_reduce %s op = "mean" axis = "tp" : (tensor<4x2xf64>) -> tensor<4x2xf64>
  %h = tgraph.tanh %t : (tensor<4x2xf64>) -> tensor<4x2xf64>
  %q = tgraph.mul %h, %s : (tensor<4x2xf64>, tensor<4x2xf64>) -> tensor<4x2xf64>
  %l = tgraph.sum %q axes = [] : (tensor<4x2xf64>) -> tensor<f64>
  func.return %l : tensor<f64>
}
"""


def _torch_spmd_total(xs: list[torch.Tensor], Ws: list[torch.Tensor]) -> torch.Tensor:
    m = parse(SPMD)
    ops = {type(o): o for o in m.walk()}
    ys = [x @ W for x, W in zip(xs, Ws)]
    gs = [_collective(ops[g.AllGatherOp], ys, r) for r in range(RANKS)]
    a_s = [_collective(ops[g.AllToAllOp], gs, r) for r in range(RANKS)]
    ss = [_collective(ops[g.ReduceScatterOp], a_s, r) for r in range(RANKS)]
    ts_ = [_collective(ops[g.AllReduceOp], ss, r) for r in range(RANKS)]
    return sum((torch.tanh(t) * s).sum() for t, s in zip(ts_, ss))


def test_collective_adjoints_on_two_simulated_ranks_match_torch(monkeypatch) -> None:
    group = SimulatedGroup()
    monkeypatch.setattr(gi, "COLLECTIVE_BACKEND", group)
    m = run_pass(SPMD)
    text = str(m)
    assert 'tgraph.reduce_scatter %' in text.split("@f_grad")[1]
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((2, 3)) for _ in range(RANKS)]
    W = rng.standard_normal((3, 4))
    got = group.run(m, "f_grad", [[x, W] for x in xs])
    tx = [torch.tensor(x, requires_grad=True) for x in xs]
    tW = [torch.tensor(W, requires_grad=True) for _ in range(RANKS)]
    _torch_spmd_total(tx, tW).backward()
    for r in range(RANKS):
        np.testing.assert_allclose(got[r][0], tx[r].grad.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got[r][1], tW[r].grad.numpy(), rtol=1e-10, atol=1e-12)
