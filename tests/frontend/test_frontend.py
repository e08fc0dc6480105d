"""Tracing Python functions to Graph IR: the public API, annotations, caching,
errors in the guide's style, inspect_ir and the round trip through tessera-opt."""

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch

import tessera as ts
from tessera import dist, graph, op
from tessera.frontend import ops
from tessera.ir import graph as g

RNG = np.random.default_rng(7)
BF16_BS = ts.Tensor["B", "S", ts.bf16]
FP8_ACC = ts.fp8_e4m3 @ ts.accum(ts.f32)
A_MK = ts.Tensor["M", "K", FP8_ACC]
B_KN = ts.Tensor["K", "N", FP8_ACC]
F32_MK = ts.Tensor["M", "K", ts.f32]
F32_KN = ts.Tensor["K", "N", ts.f32]
F32_4x3 = ts.Tensor[4, 3, ts.f32]
F32_MN = ts.Tensor["M", "N", ts.f32]
BF16_MN = ts.Tensor["M", "N", ts.bf16]


def rnd(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def test_public_api_both_spellings():
    for name in ("matmul", "gemm", "softmax", "relu", "mse", "cast", "max", "sum", "exp",
                 "tanh", "sqrt", "gelu", "layernorm", "rmsnorm", "rmsnorm_safe",
                 "layernorm_safe", "flash_attention", "split_qkv", "transpose", "reshape",
                 "concat", "where", "all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert callable(getattr(ts, name)) and callable(getattr(op, name)), name
    assert ts.pi == pytest.approx(np.pi)
    assert callable(ts.jit) and callable(graph.module) and dist is not None
    assert ts.f32 is ts.fp32 and isinstance(ts.Tensor["M", ts.bf16], ts.TensorAnnotation)
    assert isinstance(ts.f32[8], ts.TensorAnnotation)
    assert issubclass(ts.ShapeError, ts.TesseraError) and issubclass(ts.ShapeError, ValueError)
    assert issubclass(ts.TesseraTypeError, TypeError)


def test_op_namespace_has_every_operator_function():
    """``op.<name>`` is the operator function for every name of OP_FUNCTIONS (so that
    ``from tessera.op import *`` works)."""
    missing = [n for n in ops.OP_FUNCTIONS if getattr(op, n, None) is not getattr(ops, n)]
    assert missing == []


def test_every_graph_op_has_a_function():
    """Each tgraph op (except fusion products made by passes) is reachable from Python."""
    traced = set()

    def everything(x, m, lam, ip, ix):
        ops_ = [
            x + x, x - x, x * x, x / x, x**x, ts.maximum(x, x), ts.minimum(x, x),
            x < x, x <= x, x > x, x >= x, x == x, x != x, ts.where(x > x, x, x),
            -x, ts.abs(x), ts.exp(x), ts.log(x), ts.sqrt(x), ts.rsqrt(x), ts.tanh(x),
            ts.relu(x), ts.gelu(x), ts.silu(x), ts.sigmoid(x), ts.erf(x), ts.sin(x), ts.cos(x),
            ts.cast(x, ts.bf16),
            ts.sum(x), ts.max(x), ts.min(x), ts.mean(x), ts.logsumexp(x, 1), ts.softmax(x),
            ts.layernorm(x),
            ts.rmsnorm(x), x @ x, ts.flash_attention(x, x, x),
            ts.conv2d(ts.reshape(x, (1, 1, 4, 4)), ts.reshape(x, (1, 1, 4, 4))),
            ts.mse(x, x), x.T, ts.reshape(x, (16,)), ts.broadcast_to(x, (2, 4, 4)),
            x[1:3], ts.flip(x, (0,)), ts.concat([x, x]), ts.take_along_axis(x, ts.cast(x > x, ts.i64), 1), ts.fft(x), ts.fft2d(x), ts.cholesky(m), *ts.svd(x),
            ts.spmm(ip, ix, ts.reshape(x, (16,))[0:3], x, sparse_shape=(2, 4)),
            ts.randn((2, 2)), ts.poisson(lam), ts.all_reduce(x, op="sum", axis="dp"),
            ts.all_gather(x, axis="tp"), ts.reduce_scatter(x, axis="tp"),
            ts.all_to_all(x, axis="tp"), ts.all_slice(x, axis="tp"), x + 1.0,
            *ts.adamw_update([x], [x], [x], [x], ts.reshape(x, (16,))[0:3])[0],
            *ts.sgd_update([x], [x], [], ts.reshape(x, (16,))[0:3])[0],
        ]
        ts.send(x, axis="pp", peer=1)
        ops_.append(ts.recv((4, 4), ts.f32, axis="pp", peer=-1))
        return tuple(ops_)

    f = ts.jit(everything, mesh={"dp": 1, "tp": 1, "pp": 2})
    module = f.trace(rnd(4, 4), rnd(3, 3), rnd(5), np.array([0, 1, 3], np.int32),
                     np.array([0, 1, 2], np.int32))
    traced = {o.name for o in module.walk()}
    fusion_only = {g.FusedOp.name, g.FusedReductionsOp.name, g.YieldOp.name,
                   g.MatmulEpilogueOp.name}
    missing = {o.name for o in g.GRAPH_OPS} - traced - fusion_only
    assert not missing, missing


def test_python_operators_build_the_same_ir_as_functions():
    a, b = rnd(3, 4), rnd(4, 5)
    f1 = ts.jit(lambda x, y: (x @ y) * 2.0 - 1.0)
    f2 = ts.jit(lambda x, y: ts.sub(ts.mul(ts.matmul(x, y), 2.0), 1.0))
    text1 = f1.inspect_ir("traced") if f1.trace(a, b) else ""
    text2 = f2.inspect_ir("traced") if f2.trace(a, b) else ""
    assert text1.replace("<lambda>", "f") == text2.replace("<lambda>", "f")
    assert "tgraph.constant dense<2.000000e+00> : tensor<f32> -> tensor<f32>" in text1


def test_scalar_constants_take_the_operand_dtype_and_policy():
    pol = ts.bf16 @ ts.stochastic_round
    f = ts.jit(lambda x: x * 0.5)
    f.trace(rnd(2, 3).astype(ml_dtypes.bfloat16))
    assert "-> tensor<bf16>" in f.inspect_ir("traced")
    ann = ts.Tensor[2, 3, pol]

    def h(x: ann):
        return 3.0 + x

    text = ts.jit(h).inspect_ir("traced")
    assert "tensor<bf16, #tessera.policy<bf16, rounding = stochastic>>" in text


def test_compiled_once_per_signature():
    calls = []

    @ts.jit
    def f(x, scale=2.0):
        calls.append(1)
        return x * scale

    f(rnd(2, 3))
    f(rnd(2, 3))
    assert len(calls) == 1
    f(rnd(3, 3))
    f(rnd(2, 3).astype(np.float64))
    f(rnd(2, 3), scale=3.0)
    assert len(calls) == 4
    np.testing.assert_allclose(f(np.ones((2, 2), np.float32), scale=3.0), np.full((2, 2), 3.0))


def test_static_arguments_that_compare_equal_get_their_own_signature():
    """``==`` is no signature test: ``0.0`` and ``-0.0`` add differently (a cached
    specialization of one returned the other's signs of zero), ``1`` and ``1.0``
    promote differently; a NaN argument finds its specialization again."""
    calls = []

    @ts.jit
    def f(x, c):
        calls.append(1)
        return x + c

    zeros = np.array([-0.0, 0.0], np.float32)
    assert np.signbit(f(zeros, -0.0)).tolist() == [True, False]
    assert np.signbit(f(zeros, 0.0)).tolist() == [False, False]
    assert np.signbit(f(zeros, (-0.0))).tolist() == [True, False] and len(calls) == 2
    ints = np.arange(3, dtype=np.int32)
    assert f(ints, 1).dtype == np.int32 and f(ints, 1.0).dtype == np.float32
    f(zeros, float("nan"))
    f(zeros, float("nan"))
    assert len(calls) == 5


def test_annotations_give_types_and_check_symbolic_dims():
    @ts.jit
    def mm(a: F32_MK, b: F32_KN):
        return a @ b

    text = mm.inspect_ir("graph", M=3, K=5, N=2)
    assert "tensor<3x5xf32>" in text and "tensor<5x2xf32>" in text
    with pytest.raises(ts.ShapeError, match="symbolic dim 'K' bound to two sizes: 5 by "
                                            "argument 'a' and 4 by argument 'b'"):
        mm(rnd(3, 5), rnd(4, 2))
    with pytest.raises(ts.TesseraTypeError, match="argument 'a' has dtype ts.fp64"):
        mm(rnd(3, 5, dtype=np.float64), rnd(5, 2))
    with pytest.raises(ts.ShapeError, match="rank 1"):
        mm(rnd(3), rnd(5, 2))
    with pytest.raises(ts.TesseraError, match="symbolic dims M, K with no size"):
        ts.jit(lambda a: a).__class__  # noqa: B018 - keep the import used
        mm2 = ts.jit(mm.fn)
        mm2.inspect_ir("graph")


def test_fixed_dims_and_policies_from_annotations():
    @ts.jit
    def f(x: F32_4x3):
        return ts.relu(x)

    assert "tensor<4x3xf32>" in f.inspect_ir("graph")
    with pytest.raises(ts.ShapeError, match="dim 0 has size 5"):
        f(rnd(5, 3))

    @ts.jit
    def mp(A: A_MK, B: B_KN):
        return ts.gemm(A, B)

    text = mp.inspect_ir("graph", M=4, K=8, N=2)
    assert "#tessera.policy<f8E4M3FN, accum = f32>" in text
    assert "-> tensor<4x2xf32>" in text


def test_matmul_result_dtype_rule():
    p8 = ts.fp8_e4m3 @ ts.accum(ts.f32)
    assert ops.matmul_result_policy(p8, p8).storage == ts.f32
    bf = ts.NumericPolicy(ts.bf16)
    assert ops.matmul_result_policy(bf, bf) == bf
    assert ops.matmul_result_policy(bf, bf, ts.f32).storage == ts.f32
    f = ts.jit(lambda a, b: ts.matmul(a, b, out_dtype=ts.f32))
    a = rnd(2, 3).astype(ml_dtypes.bfloat16)
    assert f(a, a.T.copy()).dtype == np.float32


def test_shape_error_names_op_dims_and_user_line():
    @ts.jit
    def model(x, w):
        return ts.matmul(x, w)  # the line the error must name

    line = model.fn.__code__.co_firstlineno + 2
    with pytest.raises(ts.ShapeError) as e:
        model(rnd(4, 128), rnd(256, 8))
    assert str(e.value) == (
        f"matmul inner dimensions differ: left K=128, right K=256 (test_frontend.py:{line})"
    )


def test_verifier_errors_are_located():
    f = ts.jit(lambda x: ts.softmax(x, axis=3))
    with pytest.raises(ts.ShapeError, match=r"softmax: axis 3 out of range for rank 2 \(test_"):
        f(rnd(2, 3))
    h = ts.jit(lambda x: ts.reshape(x, (4, 4)))
    with pytest.raises(ts.ShapeError, match=r"reshape cannot reshape \[2, 3\] \(6 elements\)"):
        h(rnd(2, 3))
    k = ts.jit(lambda x, y: x + y)
    with pytest.raises(ts.ShapeError, match=r"add shapes \[2, 3\] and \[4\] do not broadcast"):
        k(rnd(2, 3), rnd(4))
    with pytest.raises(ts.TesseraTypeError, match="add: element types differ: f32, f64"):
        k(rnd(2, 3), rnd(2, 3, dtype=np.float64))


def test_unsupported_values_and_control_flow():
    with pytest.raises(ts.TesseraTypeError, match="unsupported type list"):
        ts.jit(lambda x: x)([1.0, 2.0])
    with pytest.raises(ts.TesseraTypeError, match="must return tensors"):
        ts.jit(lambda x: 1.0)(rnd(2))
    with pytest.raises(ts.TraceError, match="no Python truth value"):
        ts.jit(lambda x: x if x > 0.0 else -x)(rnd(2))
    with pytest.raises(ts.TesseraTypeError, match="unsupported operand dict"):
        ts.jit(lambda x: x + {})(rnd(2))
    with pytest.raises(TypeError, match="unknown dtype 'bf17'"):
        ts.jit(lambda x: ts.cast(x, "bf17"))(rnd(2))
    with pytest.raises(ts.TesseraTypeError, match="unsupported dtype uint16"):
        ts.jit(lambda x: x)(np.zeros(3, np.uint16))
    with pytest.raises(ts.TraceError, match="outside a traced function"):
        ts.softmax(ts.constant(1.0))


def test_inspect_ir_levels():
    @ts.jit
    def f(x: F32_4x3):
        y = x * 2.0
        _unused = ts.exp(x)
        return y + y

    traced, graph_ir = f.inspect_ir("traced"), f.inspect_ir("graph")
    assert "tgraph.exp" in traced and "tgraph.exp" not in graph_ir
    with pytest.raises(ValueError, match="valid levels: traced, graph, tile, target, ptx"):
        f.inspect_ir("llvm")
    assert "ttile.kernel" in f.inspect_ir("tile") and ".entry" in f.inspect_ir("ptx")
    with pytest.raises(ts.TesseraError, match="no ts.Tensor annotation"):
        ts.jit(lambda x: x).inspect_ir("graph")


def test_inspect_ir_graph_round_trips_through_tessera_opt():
    @graph.module("attention")
    def attention(Q, K, V):
        return op.matmul(op.softmax(op.matmul(Q, K.T)), V)

    attention(rnd(5, 3), rnd(7, 3), rnd(7, 2))
    bf = ts.jit(lambda x: ts.cast(x, ts.fp8_e4m3 @ ts.accum(ts.f32)) if True else x)
    bf(rnd(3, 3))
    coll = ts.jit(lambda x: ts.all_gather(ts.all_reduce(x, op="sum", axis="dp"), axis="tp"),
                  mesh={"dp": 2, "tp": 2})
    coll.trace(rnd(2, 3))
    texts = [fn.inspect_ir("graph") for fn in (attention, bf, coll)]
    r = subprocess.run(
        [sys.executable, "-m", "tessera.tools.opt", "--split-input-file"],
        input="\n// -----\n".join(texts), capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    back = [t.strip() for t in r.stdout.split("// -----")]
    assert back == [t.strip() for t in texts]
    assert "tessera.mesh = #tessera.mesh<dp = 2, tp = 2>" in coll.inspect_ir("graph")


def test_collectives_without_mesh_are_a_located_error():
    f = ts.jit(lambda x: ts.all_gather(x, axis="tp"))
    x = rnd(3, 4)
    with pytest.raises(ts.ShapeError, match=r"all_gather: mesh axis 'tp' has no mesh.*"
                       r"\(test_frontend.py:\d+\)"):
        f(x)
    with ts.dist.use_mesh({"tp": 1}):  # a one-rank axis, said explicitly
        np.testing.assert_array_equal(f(x), x)
        assert "#tessera.mesh<tp = 1>" in f.inspect_ir("graph")
    with pytest.raises(ts.ShapeError, match="has no mesh"):
        f(x)  # the mesh of the context is part of the specialization
    with pytest.raises(ts.ShapeError, match="mesh has no axis 'pp'"):
        ts.jit(lambda x: ts.all_reduce(x, axis="pp"), mesh={"dp": 2})(x)


def test_jit_stacks_with_another_decorator():
    def double_output(fn):
        def wrapped(*args):
            return fn(*args) * 2.0
        return wrapped

    stacked = ts.jit @ double_output
    f = stacked(lambda x: x + 1.0)
    np.testing.assert_allclose(f(np.ones(3, np.float32)), np.full(3, 4.0))

    @ts.jit
    @double_output
    def g_(x):
        return x - 1.0

    np.testing.assert_allclose(g_(np.ones(3, np.float32)), np.zeros(3))


def test_tuple_results_and_torch_io():
    f = ts.jit(lambda x: (ts.relu(x), ts.sum(x, axis=0)))
    x = torch.randn(3, 4)
    r, s = f(x)
    assert isinstance(r, torch.Tensor) and torch.allclose(r, torch.relu(x))
    assert torch.allclose(s, x.sum(0), atol=1e-6)


def test_getitem_and_methods():
    f = ts.jit(lambda x: (x[-1], x[:, 1:4:2], x.sum(axis=1), x.mean(), x.astype(ts.f64)))
    x = rnd(3, 5)
    a, b, c, d, e = f(x)
    np.testing.assert_array_equal(a, x[-1])
    np.testing.assert_array_equal(b, x[:, 1:4:2])
    np.testing.assert_allclose(c, x.sum(axis=1), rtol=1e-6)
    np.testing.assert_allclose(d, x.mean(), rtol=1e-6)
    assert e.dtype == np.float64


def test_return_annotation_is_checked():
    @ts.jit
    def good(x: F32_MK, y: F32_KN) -> F32_MN:
        return x @ y

    assert good(rnd(2, 3), rnd(3, 4)).shape == (2, 4)

    @ts.jit
    def wrong_dtype(x: F32_MK, y: F32_KN) -> BF16_MN:
        return x @ y

    with pytest.raises(ts.TesseraTypeError, match="return annotation says ts.bf16"):
        wrong_dtype(rnd(2, 3), rnd(3, 4))

    @ts.jit
    def wrong_dims(x: F32_MK, y: F32_KN) -> F32_MN:
        return (x @ y).T

    with pytest.raises(ts.ShapeError, match="symbolic dim 'M' bound to two sizes"):
        wrong_dims(rnd(2, 3), rnd(3, 4))


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_grouped_query_heads(causal):
    """Fewer key/value heads than query heads: torch's ``enable_gqa`` meaning (query head h
    reads head h // group), forward and all three gradients, against torch float64."""
    rng = np.random.default_rng(3)
    q, do = rng.standard_normal((2, 6, 5, 8)), rng.standard_normal((2, 6, 5, 8))
    k, v = rng.standard_normal((2, 2, 7, 8)), rng.standard_normal((2, 2, 7, 8))
    out = ts.jit(lambda q, k, v: ts.flash_attention(q, k, v, causal=causal))(q, k, v)
    tq, tk, tv = (torch.tensor(t, requires_grad=True) for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal,
                                                           enable_gqa=True)
    np.testing.assert_allclose(np.asarray(out), ref.detach().numpy(), atol=1e-12)
    (ref * torch.tensor(do)).sum().backward()
    grads = ts.grad(lambda q, k, v, do: ts.sum(ts.flash_attention(q, k, v, causal=causal) * do),
                    argnums=(0, 1, 2))(q, k, v, do)
    for got, want in zip(grads, (tq.grad, tk.grad, tv.grad)):
        np.testing.assert_allclose(np.asarray(got), want.numpy(), atol=1e-12)


def test_flash_attention_heads_not_a_multiple():
    """Key/value heads that do not divide the query heads are a located shape error."""
    x, kv = np.ones((1, 3, 4, 8)), np.ones((1, 2, 4, 8))
    with pytest.raises(ts.TesseraError, match="flash_attention"):
        ts.jit(lambda q, k, v: ts.flash_attention(q, k, v))(x, kv, kv)
