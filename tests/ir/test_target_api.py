"""Target IR from Python: building kernels, PTX emission errors, immediates, the ptxas
helper, the cubin cache and kernel-parameter packing (all on CPU)."""

from __future__ import annotations

import ctypes

import pytest
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, ModuleOp, f32, f64, i32

from tessera.ir import target as tt
from tessera.passes.emit_ptx import PtxEmissionError, emit_ptx
from tessera.runtime import cache, ptxas


def _scale_kernel(name: str = "scale", target: str = "sm_90a") -> tt.FuncOp:
    f = tt.FuncOp(name, ["u64", "f32"], 64, target)
    b = f.block
    rd = tt.RegOp("b64")
    x = tt.RegOp("f32")
    s = tt.RegOp("f32")
    tid = tt.RegOp("b32")
    off = tt.RegOp("b64")
    four = tt.ImmOp(IntegerAttr(4, i32))
    for op in (rd, x, s, tid, off, four):
        b.add_op(op)
    b.add_op(tt.LdParamOp("u64", rd.result, b.args[0]))
    b.add_op(tt.LdParamOp("f32", s.result, b.args[1]))
    b.add_op(tt.CvtaOp("to.global.u64", rd.result, rd.result))
    b.add_op(tt.SregOp(tid.result, "tid.x"))
    b.add_op(tt.MulOp("wide.u32", off.result, tid.result, four.result))
    b.add_op(tt.AddOp("s64", rd.result, rd.result, off.result))
    b.add_op(tt.LdOp("global.f32", [x.result], rd.result))
    b.add_op(tt.MulOp("rn.f32", x.result, x.result, s.result))
    b.add_op(tt.StOp("global.f32", rd.result, [x.result]))
    b.add_op(tt.RetOp())
    return f


def test_built_kernel_prints_and_assembles() -> None:
    m = ModuleOp([_scale_kernel()])
    m.verify()
    ptx = emit_ptx(m)
    assert ".visible .entry scale(" in ptx
    assert "\tmul.wide.u32 %rd1, %r0, 4;" in ptx
    assert "\tld.global.f32 %f0, [%rd0];" in ptx
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found")
    ptxas.check(ptx)


def test_emit_errors_name_the_problem() -> None:
    with pytest.raises(PtxEmissionError, match="no ttarget.func kernel"):
        emit_ptx(ModuleOp([]))
    with pytest.raises(PtxEmissionError, match="different targets"):
        emit_ptx(ModuleOp([_scale_kernel("a"), _scale_kernel("b", "sm_80")]))
    bad = _scale_kernel()
    bad.block.last_op.detach()  # type: ignore[union-attr]
    with pytest.raises(PtxEmissionError, match="kernel @scale is invalid: .*must end with ttarget.ret"):
        emit_ptx(ModuleOp([bad]))


@pytest.mark.parametrize(
    "attr, text",
    [
        (FloatAttr(1.0, f32), "0f3F800000"),
        (FloatAttr(-2.5, f32), "0fC0200000"),
        (FloatAttr(1.0, f64), "0d3FF0000000000000"),
        (IntegerAttr(-1, i32), "-1"),
    ],
)
def test_immediates_print_exactly(attr: IntegerAttr | FloatAttr, text: str) -> None:
    assert tt.ImmOp(attr).literal() == text


def test_version_is_lowest_needed() -> None:
    assert _scale_kernel().required_ptx() == (8, 0)
    assert _scale_kernel(target="sm_80").required_ptx() == (7, 0)


def test_ptxas_error_carries_its_message() -> None:
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found")
    ptx = emit_ptx(ModuleOp([_scale_kernel()])).replace("mul.rn.f32", "mul.rq.f32")
    with pytest.raises(ptxas.PtxasError, match=r"kernel\.ptx, line \d+; error"):
        ptxas.check(ptx)
    with pytest.raises(ptxas.PtxasError, match=r"kernel\.ptx, line \d+; error"):
        ptxas.resources(ptx)  # the same assembler call, with -v


def test_cubin_cache_round_trip(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    k1 = cache.cache_key("ptx", "sm_90a", "ptxas 13.0", "13000")
    assert k1 != cache.cache_key("ptx", "sm_80", "ptxas 13.0", "13000")
    assert k1 != cache.cache_key("ptx", "sm_90a", "ptxas 13.0", "12080")
    assert k1 != cache.cache_key("ptx2", "sm_90a", "ptxas 13.0", "13000")
    built: list[int] = []

    def build() -> bytes:
        built.append(1)
        return b"CUBIN"

    assert cache.cubin_for("ptx", "sm_90a", "t", "d", build) == b"CUBIN"
    assert cache.cubin_for("ptx", "sm_90a", "t", "d", build) == b"CUBIN"
    assert len(built) == 1
    assert list(tmp_path.glob("*.cubin"))


def test_kernel_parameters_are_packed_by_value() -> None:
    from tessera.runtime.cuda import pack_params

    f = tt.FuncOp("k", ["u64", "f32", "s32"], 32)
    addr, keep = pack_params(f, [0x1234, 2.5, -3])
    slots = (ctypes.c_void_p * 3).from_address(addr)
    assert ctypes.c_uint64.from_address(slots[0]).value == 0x1234
    assert ctypes.c_float.from_address(slots[1]).value == 2.5
    assert ctypes.c_int32.from_address(slots[2]).value == -3
    assert len(keep) == 4


def test_branch_targets_follow_label_edits() -> None:
    """A branch's label check (labels remembered per kernel body) sees labels removed,
    renamed or added after an earlier verification."""
    from xdsl.utils.exceptions import VerifyException

    f = tt.FuncOp("branchy", [], 32)
    label = tt.LabelOp("L1")
    f.block.add_op(label)
    f.block.add_op(tt.BraOp("L1"))
    f.block.add_op(tt.RetOp())
    f.verify()
    label.detach()
    with pytest.raises(VerifyException, match='no ttarget.label "L1"'):
        f.verify()
    renamed = tt.LabelOp("L2")
    f.block.insert_op_before(renamed, f.block.first_op)
    with pytest.raises(VerifyException, match='no ttarget.label "L1"'):
        f.verify()
    f.block.insert_op_before(tt.LabelOp("L1"), f.block.first_op)
    f.verify()
