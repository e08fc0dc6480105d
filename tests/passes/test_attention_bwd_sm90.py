"""The sm90 attention backward on CPU (tessera/passes/sm90/attention_bwd_sm90.py): which
ops it takes, its shared-memory layout, PTX of both kernels that assembles for sm_90a
without spills, and its selection by ``lower-graph-to-tile`` and the compile options.
(Numerics: tests/gpu/test_attention_bwd_gpu.py.)"""

from __future__ import annotations

import re

import pytest
from xdsl.dialects.builtin import ModuleOp

from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.ir import tile as tl
from tessera.ir.target.facts import MAX_SHARED_BYTES
from tessera.options import CompileOptions
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.passes.pipelines import default_context
from tessera.passes.sm90.attention_bwd_sm90 import (
    BLOCK_R,
    Sm90AttentionBwd,
    build_kernel,
    eligible,
    lse_pad,
)
from tessera.runtime import ptxas
from tests.passes.test_attention_bwd import grad_text, parse

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")
SMEM_LIMIT = MAX_SHARED_BYTES


def _bwd_op(m: ModuleOp) -> g.FlashAttentionBwdOp:
    return next(o for o in m.walk() if isinstance(o, g.FlashAttentionBwdOp))


@pytest.mark.parametrize(
    ("qs", "ks", "elem", "why"),
    [
        ((1, 2, 100, 128), (1, 2, 90, 128), "bf16", None),
        ((2, 100, 64), (2, 300, 64), "f16", None),
        ((1, 2, 64, 128), (1, 2, 64, 128), "f32", "not bf16 or f16"),
        ((1, 2, 64, 32), (1, 2, 64, 32), "bf16", "head size 32"),
    ],
)
def test_eligible(qs, ks, elem, why) -> None:
    got = eligible(_bwd_op(parse(grad_text(qs, ks, elem, True))))
    assert got is None if why is None else why in (got or "")


@pytest.mark.parametrize("kind", ["dkdv", "dq"])
@pytest.mark.parametrize("d", [64, 128])
def test_shared_memory_layout(kind: str, d: int) -> None:
    s = Sm90AttentionBwd(kind, 8, 4096, 4096, d, "bf16", 0.1, True)
    assert s.smem_bytes <= SMEM_LIMIT
    # TMA destinations and wgmma tiles start on 1024-byte (128-byte swizzle atom) bounds
    offsets = [s.res_offset(1), *(s.str_offset(i, st) for i in (0, 1) for st in (0, 1))]
    assert all(o % 1024 == 0 for o in offsets) and s.bars_offset % 8 == 0
    assert len(s.boxes()) == 2 * (s.outputs + 6)
    assert lse_pad(4097) == 4096 + BLOCK_R and lse_pad(4096) == 4096


@needs_ptxas
@pytest.mark.parametrize(
    ("kind", "sq", "sk", "d", "et", "causal", "variant"),
    [
        ("dkdv", 4096, 4096, 128, "bf16", True, {}),
        ("dq", 4096, 4096, 128, "bf16", True, {}),
        ("dkdv", 1000, 257, 64, "f16", False, {"stages": 3, "overlap": False, "keep_p": False}),
        ("dq", 257, 1000, 64, "f16", True, {"overlap": False}),
        ("dkdv", 4096, 4096, 128, "bf16", True, {"overlap": False, "keep_p": False}),
        ("dq", 4096, 4096, 128, "bf16", True, {"overlap": True, "block_s": 128}),
    ],
)
def test_kernel_assembles_without_spills(kind, sq, sk, d, et, causal, variant) -> None:
    """Each kind and variant (stages, overlap, block_s, keep_p) assembles, with no spills."""
    spec = Sm90AttentionBwd(kind, 6, sq, sk, d, et, 0.125, causal, **variant)
    assert spec.smem_bytes <= SMEM_LIMIT
    func = build_kernel("bwd", spec)
    func.verify()
    ptx = emit_ptx(ModuleOp([func]))
    n = spec.block_s
    assert f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{et}.{et}" in ptx  # X and Y
    rs = re.findall(rf"wgmma.mma_async.sync.aligned.m64n{d}k16.f32.{et}.{et} {{[^}}]*}}, {{", ptx)
    assert len(rs) == (2 if kind == "dkdv" else 1) * n // 16  # dV and dK, or dQ
    assert "atom." not in ptx and "red." not in ptx  # deterministic: no atomics
    (rep,) = ptxas.resources(ptx).values()
    assert rep.spill_bytes == 0 and rep.stack_bytes == 0, rep
    assert not any(loss.startswith("C7508") for loss in rep.losses), rep  # setmaxnreg kept


def _lowered(sm90: bool, attention_bwd: bool, elem: str = "bf16") -> ModuleOp:
    qs = (1, 2, 200, 64)
    m = parse(grad_text(qs, (1, 2, 130, 64), elem, True))
    LowerGraphToTile(sm90=sm90, sm90_attention_bwd=attention_bwd).apply(default_context(), m)
    m.verify()
    return m


def test_grid_is_persistent() -> None:
    """At most one CTA per SM; causal work units pair the resident tiles of a head."""
    spec = Sm90AttentionBwd("dkdv", 96, 197, 197, 64, "bf16", 0.125, False, sms=132)
    assert spec.units == 192 and spec.grid() == (132, 1, 1)
    causal = Sm90AttentionBwd("dq", 40, 600, 600, 64, "bf16", 0.125, True, sms=132)
    assert causal.res_tiles == 5 and causal.units == 120 and causal.grid() == (120, 1, 1)


def test_lowering_choice() -> None:
    """sm90: the dot prologue (Tile IR) and the two wgmma kernels, launched in that order;
    ``sm90_attention_bwd=False`` or no sm90: the three mma.sync Tile IR kernels."""
    m = _lowered(True, True)
    launches = [op for op in m.walk() if isinstance(op, tt.LaunchExOp | tl.LaunchOp)]
    names = [op.callee.root_reference.data for op in launches]
    assert [n for n in names if "attention_bwd" in n] == [
        "f_attention_bwd_dot_0", "f_attention_bwd_dkdv_sm90_0", "f_attention_bwd_dq_sm90_0"]
    dkdv = next(op for op in launches if "dkdv_sm90" in op.callee.root_reference.data)
    assert isinstance(dkdv, tt.LaunchExOp)
    # persistent: causal, the ceil(130 / 128) = 2 key tiles of a head are one work unit
    assert dkdv.grid_value() == (2, 1, 1)
    assert list(dkdv.boxes.get_values()) == [0, 0, 0, 0, 64, 128, 64, 128, 64, 64, 64, 64,
                                             0, 0, 0, 0]
    for sm90, bwd in ((True, False), (False, True)):
        ops = list(_lowered(sm90, bwd).walk())
        names = {op.sym_name.data for op in ops if isinstance(op, tl.KernelOp)}
        assert {"f_attention_bwd_dkdv_0", "f_attention_bwd_dq_0"} <= names
        assert not any(isinstance(op, tt.FuncOp) and "attention_bwd" in op.sym_name.data
                       for op in ops)


def test_options_select_the_kernels() -> None:
    assert CompileOptions().sm90_attention_bwd
    off = CompileOptions.from_env({"TESSERA_SM90_ATTENTION_BWD": "0"}, device=None)
    assert not off.sm90_attention_bwd and off.key() != CompileOptions().key()
    assert CompileOptions.from_env({}, device=None).sm90_attention_bwd


def test_dot_prologue_in_float64() -> None:
    """``attention_bwd_dot`` over padded rows (Tile IR interpreter): ``Di = rowsum(do ∘ o)``
    and ``-lse log2e`` per head, zeros in the rows past ``Sq``; against numpy in float64."""
    import ml_dtypes
    import numpy as np
    from xdsl.dialects import func
    from xdsl.dialects.builtin import FunctionType, TensorType, f32

    from tessera.passes import tile_attention_bwd
    from tessera.passes.lower_graph_to_tile import _FunctionLowering
    from tessera.passes.sm90.attention_bwd_sm90 import LOG2E
    from tessera.runtime.tile_interpreter import run_host

    b, h, sq, d = 2, 3, 70, 64
    pad = lse_pad(sq)
    t, tl = f"tensor<{b}x{h}x{sq}x{d}xbf16>", f"tensor<{b}x{h}x{sq}xf32>"
    m = parse(f"""func.func @f(%q: {t}, %o: {t}, %do: {t}, %lse: {tl}) -> ({t}, {t}, {t}) {{
      %dq, %dk, %dv = tgraph.flash_attention_bwd %q, %q, %q, %o, %do, %lse causal : ({t}, {t}, {t}, {t}, {t}, {tl}) -> ({t}, {t}, {t})
      func.return %dq, %dk, %dv : {t}, {t}, {t} }}""")
    (fn,) = m.body.block.ops
    bufs = []

    def dot_only(lw, op) -> bool:
        buf = TensorType(f32, [b * h, pad])
        bufs.extend([lw.alloc(buf), lw.alloc(buf)])
        tile_attention_bwd.lower_dot_padded(lw, op, bufs[0], bufs[1], pad)
        for r in op.results:
            lw.env[r] = lw.alloc(r.type)
        return True

    lw = _FunctionLowering(m, fn, {g.FlashAttentionBwdOp: (dot_only,)})
    lw.run()
    ret = lw.host.body.block.last_op
    assert isinstance(ret, func.ReturnOp)
    ret.detach()
    ret.erase()
    lw.host.body.block.add_op(func.ReturnOp(*bufs))
    lw.host.function_type = FunctionType.from_lists(
        lw.host.function_type.inputs.data, [v.type for v in bufs])
    rng = np.random.default_rng(5)
    q, o, do = (rng.standard_normal((b, h, sq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    lse = rng.standard_normal((b, h, sq)).astype(np.float32)
    di, nlse = run_host(m, "f", [q, o, do, lse])
    want_di = (o.astype(np.float64) * do.astype(np.float64)).sum(-1).reshape(b * h, sq)
    assert np.abs(di[:, :sq] - want_di).max() < 1e-4 * np.abs(want_di).max()
    assert np.allclose(nlse[:, :sq], -lse.astype(np.float64).reshape(b * h, sq) * LOG2E,
                       rtol=1e-6, atol=0)
    assert not di[:, sq:].any() and not nlse[:, sq:].any()


def test_grad_selects_the_sm90_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ts.grad`` of attention compiled for sm90 lowers to the wgmma backward;
    ``TESSERA_SM90_ATTENTION_BWD=0`` keeps the mma.sync kernels."""
    import ml_dtypes
    import numpy as np

    import tessera as ts

    rng = np.random.default_rng(3)
    q, k, v, do = (rng.standard_normal((1, 2, 130, 64)).astype(ml_dtypes.bfloat16)
                   for _ in range(4))
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    for flag, sm90 in (("1", True), ("0", False)):
        monkeypatch.setenv("TESSERA_SM90_ATTENTION_BWD", flag)
        step = ts.grad(lambda q, k, v, do: ts.sum(ts.flash_attention(q, k, v, causal=True) * do),
                       argnums=(0, 1, 2))
        tile = step.specialize(q, k, v, do).ir("tile")
        names = {op.sym_name.data for op in tile.walk() if isinstance(op, tt.FuncOp | tl.KernelOp)}
        assert ("lambda__grad_attention_bwd_dkdv_sm90_0" in names) == sm90, names
        assert ("lambda__grad_attention_bwd_dkdv_0" in names) == (not sm90), names
