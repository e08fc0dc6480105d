"""Graph IR ops built from Python, their verifiers, the shared attributes and tessera-opt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, TensorType, bf16, f32
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.test_value import create_ssa_value

import tessera as ts
from tessera.ir import dtypes
from tessera.ir.attrs import (
    MeshAttr,
    NumericPolicyAttr,
    ShardSpecAttr,
    Tessera,
    policy_of,
    tensor_type,
)
from tessera.ir.diagnostics import LocatedError, parse_module
from tessera.ir.graph import (
    AddOp,
    Graph,
    MatmulOp,
    ReductionOp,
    SoftmaxOp,
    SumOp,
    TransposeOp,
    broadcast_shapes,
)

ROOT = Path(__file__).resolve().parents[2]


def val(shape, t=f32):
    return create_ssa_value(TensorType(t, list(shape)))


def ctx() -> Context:
    c = Context()
    for d in (Builtin, Func, Graph, Tessera):
        c.load_dialect(d)
    return c


def test_matmul_builds_and_verifies():
    op = MatmulOp(val([4, 8]), val([8, 16]), TensorType(f32, [4, 16]), tile_shape=[128, 128, 64])
    op.verify()
    assert list(op.tile_shape.get_values()) == [128, 128, 64]
    assert "tile_shape = [128, 128, 64]" in str(op)


def test_matmul_reports_inner_dims():
    op = MatmulOp(val([4, 128]), val([256, 16]), TensorType(f32, [4, 16]))
    with pytest.raises(VerifyException, match="left K=128, right K=256"):
        op.verify()


def test_matmul_batch_broadcast_and_transpose_flags():
    assert MatmulOp.infer_shape((2, 1, 4, 8), (3, 8, 5)) == (2, 3, 4, 5)
    assert MatmulOp.infer_shape((8, 4), (5, 8), True, True) == (4, 5)
    assert "do not broadcast" in MatmulOp.infer_shape((2, 4, 8), (3, 8, 5))


def test_broadcast_rule_matches_numpy():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = tuple(int(x) for x in rng.choice([1, 2, 3], size=rng.integers(0, 4)))
        b = tuple(int(x) for x in rng.choice([1, 2, 3], size=rng.integers(0, 4)))
        try:
            want = np.broadcast_shapes(a, b)
        except ValueError:
            want = None
        assert broadcast_shapes(a, b) == want


def test_elementwise_verifier_names_shapes():
    op = AddOp(val([4, 8]), val([3]), TensorType(f32, [4, 8]))
    with pytest.raises(VerifyException, match=r"shapes \[4, 8\] and \[3\] do not broadcast"):
        op.verify()


def test_elementwise_rejects_mixed_dtypes():
    op = AddOp(val([4]), val([4], bf16), TensorType(f32, [4]))
    with pytest.raises(VerifyException, match="element types differ"):
        op.verify()


@pytest.mark.parametrize(
    ("axes", "keepdims", "want"),
    [([1], True, [4, 1]), ([-1], False, [4]), ([], False, []), ([0, 1], True, [1, 1])],
)
def test_reduction_shapes(axes, keepdims, want):
    SumOp(val([4, 8]), axes, keepdims, TensorType(f32, want)).verify()
    bad = SumOp(val([4, 8]), axes, keepdims, TensorType(f32, [*want, 2]))
    with pytest.raises(VerifyException, match="result has shape"):
        bad.verify()
    assert issubclass(SumOp, ReductionOp)


def test_softmax_and_transpose():
    SoftmaxOp(val([3, 5]), -1).verify()
    with pytest.raises(VerifyException, match="axis 2 out of range"):
        SoftmaxOp(val([3, 5]), 2).verify()
    TransposeOp(val([3, 5]), [1, 0], TensorType(f32, [5, 3])).verify()
    with pytest.raises(VerifyException, match="not a permutation"):
        TransposeOp(val([3, 5]), [1, 1], TensorType(f32, [5, 3])).verify()


def test_dtypes_map_to_ir_numpy_and_torch():
    import torch

    assert ts.bf16.ir_type == bf16 and str(ts.fp8_e4m3.ir_type) == "f8E4M3FN"
    for d in dtypes.ALL_DTYPES:
        assert dtypes.from_ir_type(d.ir_type) is d
        assert dtypes.dtype_of(d.np_dtype) == d
    assert ts.bf16.torch_dtype is torch.bfloat16
    assert dtypes.dtype_of("bf16") is ts.bf16 and dtypes.dtype_of(torch.float16) is ts.f16
    assert ts.fp6 is ts.fp6_e2m3 and ts.fp4 is ts.fp4_e2m1
    with pytest.raises(TypeError, match="unknown dtype 'bf17'"):
        dtypes.dtype_of("bf17")


def test_policy_expressions_round_trip_through_ir():
    p = ts.fp8_e4m3 @ ts.accum(ts.f32) @ ts.stochastic_round @ ts.loss_scale(128.0)
    assert p.storage is ts.fp8_e4m3 and p.accum is ts.f32 and p.rounding == "stochastic"
    assert p.loss_scale == 128.0
    t = tensor_type([2, 3], p)
    assert isinstance(t.encoding, NumericPolicyAttr)
    assert policy_of(t) == p
    assert policy_of(tensor_type([2], ts.bf16)) == ts.NumericPolicy(ts.bf16)
    with pytest.raises(ValueError, match="loss_scale must be positive"):
        ts.f32 @ ts.loss_scale(-1.0)
    with pytest.raises(TypeError, match="cannot apply"):
        ts.NumericPolicy(ts.f32) @ 3


def test_mesh_and_shard_attributes():
    m = MeshAttr.get({"dp": 2, "tp": 4})
    assert str(m) == "#tessera.mesh<dp = 2, tp = 4>" and m.as_dict() == {"dp": 2, "tp": 4}
    s = ShardSpecAttr.get([["tp"], []], partial=["dp"])
    assert str(s) == "#tessera.shard<[[tp], []], partial = sum over [dp]>"
    parsed = Parser(ctx(), str(s)).parse_attribute()
    assert parsed == s
    with pytest.raises(VerifyException, match="shards two tensor dimensions"):
        ShardSpecAttr.get([["tp"], ["tp"]])
    with pytest.raises(VerifyException, match="has size 0"):
        MeshAttr.get({"dp": 0})


def test_parse_module_locates_verifier_errors():
    text = (
        "func.func @f(%a: tensor<4x8xf32>, %b: tensor<9x16xf32>) {\n"
        "  %c = tgraph.matmul %a, %b : (tensor<4x8xf32>, tensor<9x16xf32>) -> tensor<4x16xf32>\n"
        "  func.return\n}\n"
    )
    with pytest.raises(LocatedError) as e:
        parse_module(ctx(), text, "model.mlir")
    assert (e.value.file, e.value.line, e.value.col) == ("model.mlir", 2, 3)
    assert "left K=8, right K=9" in e.value.msg


def _opt(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tessera.tools.opt", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_opt_help_lists_tessera_passes():
    from tessera.passes import ALL_PASSES

    r = _opt("--help")
    assert r.returncode == 0
    assert "Tessera passes" in r.stdout
    for name in ALL_PASSES:
        assert name in r.stdout


def test_opt_malformed_input_is_one_located_line():
    r = _opt(stdin="func.func @f( {\n")
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert r.stderr.startswith("<stdin>:1:15: error:") or ":1:15: error:" in r.stderr
    assert "Traceback" not in r.stderr


def test_opt_invalid_op_is_one_located_line(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text(
        "func.func @f(%a: tensor<4x8xf32>) {\n"
        "  %c = tgraph.sum %a axes = [3] : (tensor<4x8xf32>) -> tensor<4xf32>\n"
        "  func.return\n}\n"
    )
    r = _opt(str(bad))
    assert r.returncode == 1
    assert r.stderr.strip() == f"{bad}:2:3: error: tgraph.sum: axis 3 out of range for rank 2"


def test_opt_canonicalize_cse_dce_run_on_graph_ir():
    text = (
        "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %x = tgraph.exp %a : (tensor<4xf32>) -> tensor<4xf32>\n"
        "  %y = tgraph.exp %a : (tensor<4xf32>) -> tensor<4xf32>\n"
        "  %dead = tgraph.neg %a : (tensor<4xf32>) -> tensor<4xf32>\n"
        "  %z = tgraph.add %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
        "  func.return %z : tensor<4xf32>\n}\n"
    )
    r = _opt("-p", "canonicalize,cse,dce", stdin=text)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("tgraph.exp") == 1
    assert "tgraph.neg" not in r.stdout


def test_stock_xdsl_opt_parses_tessera_ops():
    text = (
        "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %x = tgraph.relu %a : (tensor<4xf32>) -> tensor<4xf32>\n"
        "  func.return %x : tensor<4xf32>\n}\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", "from xdsl.tools.xdsl_opt import main; main()"],
        input=text, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "tgraph.relu %a" in r.stdout
