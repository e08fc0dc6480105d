"""Every Graph IR op with a lowering goes Graph IR -> Tile IR -> Target IR -> PTX, and
ptxas accepts the PTX (one ptxas run over all kernels; a failure shows ptxas's message).

``CASES`` is shared with tests/gpu/test_runtime_ops.py, which runs the same
programs on a GPU and compares them with torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tessera.passes.emit_ptx import emit_ptx, kernels
from tessera.passes.pipelines import default_context, ptx_pipeline
from tessera.runtime import ptxas


@dataclass
class Case:
    """One Graph IR function: ``args`` are (shape, element type) pairs."""

    name: str
    args: list[tuple[tuple[int, ...], str]]
    result: tuple[tuple[int, ...], str]
    op: str
    ref: Any
    tags: set[str] = field(default_factory=set)

    def mlir(self) -> str:
        def tt(shape: tuple[int, ...], e: str) -> str:
            return "tensor<" + "".join(f"{d}x" for d in shape) + e + ">"

        params = ", ".join(f"%a{i}: {tt(s, e)}" for i, (s, e) in enumerate(self.args))
        arg_types = ", ".join(tt(s, e) for s, e in self.args)
        res = tt(*self.result)
        body = self.op.format(
            *[f"%a{i}" for i in range(len(self.args))], args=arg_types, res=res,
            **{f"t{i}": tt(s, e) for i, (s, e) in enumerate(self.args)},
        )
        return (
            f"func.func @{self.name}({params}) -> {res} {{\n"
            f"  %r = {body}\n"
            f"  func.return %r : {res}\n}}\n"
        )


def _bin(name: str, op: str, ref: Any, e: str = "f32", shape=(37, 45), rshape=(45,), res=None) -> Case:
    return Case(
        name, [(shape, e), (rshape, e)], (shape, res or e),
        f"tgraph.{op} {{0}}, {{1}} : ({{args}}) -> {{res}}", ref,
    )


def _un(name: str, op: str, ref: Any, e: str = "f32", shape=(37, 45), tags: set[str] | None = None) -> Case:
    return Case(name, [(shape, e)], (shape, e), f"tgraph.{op} {{0}} : ({{args}}) -> {{res}}", ref, tags or set())


def _cases() -> list[Case]:
    import torch

    F = torch.nn.functional
    cs = [
        _bin("add", "add", torch.add),
        _bin("sub", "sub", torch.sub),
        _bin("mul", "mul", torch.mul),
        _bin("div", "div", torch.div),
        _bin("maximum", "maximum", torch.maximum),
        _bin("minimum", "minimum", torch.minimum),
        _bin("pow", "pow", torch.pow),
        _bin("lt", "lt", torch.lt, res="i1"),
        _bin("le", "le", torch.le, res="i1"),
        _bin("gt", "gt", torch.gt, res="i1"),
        _bin("ge", "ge", torch.ge, res="i1"),
        _bin("eq", "eq", torch.eq, res="i1"),
        _bin("ne", "ne", torch.ne, res="i1"),
        _bin("add_bf16", "add", torch.add, e="bf16"),
        _bin("mul_f64", "mul", torch.mul, e="f64"),
        Case(
            "select", [((37, 45), "i1"), ((37, 45), "f32"), ((45,), "f32")], ((37, 45), "f32"),
            "tgraph.select {0}, {1}, {2} : ({args}) -> {res}", torch.where,
        ),
        _un("neg", "neg", torch.neg),
        _un("abs", "abs", torch.abs),
        _un("exp", "exp", torch.exp),
        _un("log", "log", torch.log, tags={"positive"}),
        _un("sqrt", "sqrt", torch.sqrt, tags={"positive"}),
        _un("rsqrt", "rsqrt", torch.rsqrt, tags={"positive"}),
        _un("tanh", "tanh", torch.tanh),
        _un("relu", "relu", torch.relu),
        _un("gelu", "gelu", lambda x: F.gelu(x, approximate="tanh")),
        _un("silu", "silu", F.silu),
        _un("sigmoid", "sigmoid", torch.sigmoid),
        _un("exp_bf16", "exp", torch.exp, e="bf16"),
        Case("cast_bf16", [((37, 45), "f32")], ((37, 45), "bf16"),
             "tgraph.cast {0} : ({args}) -> {res}", lambda x: x.to(torch.bfloat16)),
        Case("cast_f32", [((37, 45), "bf16")], ((37, 45), "f32"),
             "tgraph.cast {0} : ({args}) -> {res}", lambda x: x.to(torch.float32)),
        Case("sum_rows", [((13, 77), "f32")], ((13,), "f32"),
             "tgraph.sum {0} axes = [1] : ({args}) -> {res}", lambda x: x.sum(1)),
        Case("sum_small", [((7, 20), "f32")], ((7, 1), "f32"),
             "tgraph.sum {0} axes = [1] keepdims : ({args}) -> {res}", lambda x: x.sum(1, keepdim=True)),
        Case("max_cols", [((13, 77), "f32")], ((77,), "f32"),
             "tgraph.max {0} axes = [0] : ({args}) -> {res}", lambda x: x.amax(0)),
        Case("min_all", [((13, 77), "f32")], ((), "f32"),
             "tgraph.min {0} axes = [] : ({args}) -> {res}", lambda x: x.amin()),
        Case("mean_rows", [((13, 77), "f32")], ((13,), "f32"),
             "tgraph.mean {0} axes = [-1] : ({args}) -> {res}", lambda x: x.mean(-1)),
        Case("softmax", [((13, 77), "f32")], ((13, 77), "f32"),
             "tgraph.softmax {0} axis = -1 : ({args}) -> {res}", lambda x: torch.softmax(x, -1)),
        Case("softmax_axis0", [((13, 29), "f32")], ((13, 29), "f32"),
             "tgraph.softmax {0} axis = 0 : ({args}) -> {res}", lambda x: torch.softmax(x, 0)),
        Case("softmax_bf16", [((9, 70), "bf16")], ((9, 70), "bf16"),
             "tgraph.softmax {0} axis = -1 : ({args}) -> {res}", lambda x: torch.softmax(x, -1)),
        Case("rmsnorm", [((13, 77), "f32")], ((13, 77), "f32"),
             "tgraph.rmsnorm {0} eps = 1.000000e-06 : {t0} -> {res}",
             lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)),
        Case("layernorm", [((13, 77), "f32"), ((77,), "f32"), ((77,), "f32")], ((13, 77), "f32"),
             "tgraph.layernorm {0} weight {1} : {t1} bias {2} : {t2} eps = 1.000000e-05 : {t0} -> {res}",
             lambda x, w, b: F.layer_norm(x, (77,), w, b, 1e-5)),
        Case("mse", [((13, 77), "f32"), ((13, 77), "f32")], ((), "f32"),
             "tgraph.mse {0}, {1} : ({args}) -> {res}", F.mse_loss),
        Case("transpose", [((13, 29), "f32")], ((29, 13), "f32"),
             "tgraph.transpose {0} permutation = [1, 0] : ({args}) -> {res}", lambda x: x.t()),
        Case("reshape", [((13, 6), "f32")], ((3, 26), "f32"),
             "tgraph.reshape {0} : ({args}) -> {res}", lambda x: x.reshape(3, 26)),
        Case("broadcast", [((29,), "f32")], ((5, 29), "f32"),
             "tgraph.broadcast {0} : ({args}) -> {res}", lambda x: x.expand(5, 29)),
        Case("slice", [((13, 29), "f32")], ((13, 9), "f32"),
             "tgraph.slice {0} start = [0, 2] limit = [13, 29] stride = [1, 3] : ({args}) -> {res}",
             lambda x: x[:, 2:29:3]),
        Case("concat", [((13, 29), "f32"), ((5, 29), "f32")], ((18, 29), "f32"),
             "tgraph.concat {0}, {1} axis = 0 : ({args}) -> {res}", lambda a, b: torch.cat([a, b], 0)),
        Case("matmul_bf16", [((33, 40), "bf16"), ((40, 24), "bf16")], ((33, 24), "f32"),
             "tgraph.matmul {0}, {1} : ({args}) -> {res}",
             lambda a, b: a.float() @ b.float(), {"mma"}),
        Case("matmul_bf16_oddk", [((19, 37), "bf16"), ((37, 21), "bf16")], ((19, 21), "f32"),
             "tgraph.matmul {0}, {1} : ({args}) -> {res}",
             lambda a, b: a.float() @ b.float(), {"mma"}),
        Case("matmul_bf16_batched", [((2, 70, 48), "bf16"), ((48, 40), "bf16")], ((2, 70, 40), "bf16"),
             "tgraph.matmul {0}, {1} : ({args}) -> {res}",
             lambda a, b: (a.float() @ b.float()).to(torch.bfloat16), {"mma"}),
        Case("matmul_f32", [((30, 17), "f32"), ((17, 29), "f32")], ((30, 29), "f32"),
             "tgraph.matmul {0}, {1} : ({args}) -> {res}", torch.matmul),
        Case("flash_attention", [((1, 2, 40, 16), "f32")] * 3, ((1, 2, 40, 16), "f32"),
             "tgraph.flash_attention {0}, {1}, {2} scale = 2.500000e-01 causal : ({args}) -> {res}",
             lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.25)),
    ]
    return cs


CASES = _cases()


def lower_case(case: Case) -> ModuleOp:
    """The Target-level module of one case."""
    ctx = default_context()
    module = Parser(ctx, case.mlir()).parse_module()
    for p in ptx_pipeline():
        p.apply(ctx, module)
    module.verify()
    return module


@pytest.fixture(scope="module")
def lowered() -> dict[str, ModuleOp]:
    return {c.name: lower_case(c) for c in CASES}


def test_every_case_lowers_to_target(lowered: dict[str, ModuleOp]) -> None:
    for name, m in lowered.items():
        assert kernels(m), f"{name}: no ttarget.func after the pipeline"


def test_all_kernels_pass_ptxas(lowered: dict[str, ModuleOp]) -> None:
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    combined = ModuleOp([])
    for m in lowered.values():
        for k in kernels(m):
            combined.body.block.add_op(k.clone())
    text = emit_ptx(combined)
    assert text.count(".visible .entry") == sum(len(kernels(m)) for m in lowered.values())
    ptxas.check(text)


@pytest.mark.parametrize("name", [c.name for c in CASES if "mma" in c.tags])
def test_bf16_matmul_uses_mma_sync(lowered: dict[str, ModuleOp], name: str) -> None:
    ptx = emit_ptx(lowered[name])
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert re.search(r"cp\.async\.(cg|ca)\.shared\.global|ld\.global", ptx)


def test_ptx_header_and_version(lowered: dict[str, ModuleOp]) -> None:
    ptx = emit_ptx(lowered["add"])
    assert ptx.splitlines()[4:7] == [".version 8.0", ".target sm_90a", ".address_size 64"]
