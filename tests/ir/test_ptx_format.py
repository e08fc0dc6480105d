"""The one PTX formatter of Target IR: every instruction is described by an opcode
template and operand templates (no per-op printers), the guard prefix and operand
names come from one place, and the cvt / fence requirements are tables."""

from __future__ import annotations

import re

import pytest
from xdsl.dialects.builtin import IntegerAttr, i32
from xdsl.ir import SSAValue

from tessera.ir import target as tt
from tessera.ir.target.base import PtxNames


def _instructions() -> list[type[tt.PtxOp]]:
    return [op for op in tt.Target.operations if issubclass(op, tt.PtxOp)]


def _fields(op: type[tt.PtxOp]) -> set[str]:
    d = op.get_irdl_definition()
    return {n for n, _ in d.operands} | set(d.properties)


@pytest.mark.parametrize("op", _instructions(), ids=lambda op: op.name)
def test_every_instruction_is_described(op: type[tt.PtxOp]) -> None:
    assert op.ptx is tt.PtxOp.ptx, f"{op.name} has its own printer"
    assert op.PTX_OPCODE or op.ptx_opcode is not tt.PtxOp.ptx_opcode, f"{op.name}: no opcode"
    fields = _fields(op)
    for template in op.PTX_ARGS:
        for name in re.findall(r"\$(\w+)", template):
            assert name in fields, f"{op.name}: argument '{template}' names no field '{name}'"
    extra = {"mnemonic", "shape", "multicast"}
    for name in re.findall(r"\{(\w+)\}", op.PTX_OPCODE):
        assert name in fields | extra, f"{op.name}: opcode names no field '{name}'"


class _Regs:
    """Registers of a scratch kernel, named like emit-ptx names them."""

    def __init__(self) -> None:
        self.func = tt.FuncOp("k", [], 32)
        self.names = PtxNames()

    def __call__(self, cls: str) -> SSAValue:
        op = tt.RegOp(cls)
        self.func.block.add_op(op)
        self.names.declare(op.result, cls)
        return op.result

    def imm(self, v: int) -> SSAValue:
        op = tt.ImmOp(IntegerAttr(v, i32))
        self.func.block.add_op(op)
        return op.result


def test_guard_vectors_and_addresses() -> None:
    r = _Regs()
    p, a, b, base = r("pred"), r("f32"), r("f32"), r("b64")
    ld = tt.LdOp("global.v2.f32", [a, b], base, offset=-8, guard=p, negate=True)
    assert ld.ptx(r.names) == "@!%p0 ld.global.v2.f32 {%f0, %f1}, [%rd0-8];"
    st = tt.StOp("global.f32", base, [a], offset=16, guard=p)
    assert st.ptx(r.names) == "@%p0 st.global.f32 [%rd0+16], %f0;"
    assert tt.LdOp("global.f32", [a], base).ptx(r.names) == "ld.global.f32 %f0, [%rd0];"


def test_optional_operands_and_unit_properties() -> None:
    r = _Regs()
    s, g, n = r("b32"), r("b64"), r("b32")
    assert (
        tt.CpAsyncOp("cg", s, g, 16).ptx(r.names)
        == "cp.async.cg.shared.global [%r0], [%rd0], 16;"
    )
    assert (
        tt.CpAsyncOp("cg", s, g, 16, n, dst_offset=32).ptx(r.names)
        == "cp.async.cg.shared.global [%r0+32], [%rd0], 16, %r1;"
    )
    assert tt.BarSyncOp(1, 128).ptx(r.names) == "bar.sync 1, 128;"
    assert tt.BarSyncOp().ptx(r.names) == "bar.sync 0;"
    assert tt.BarArriveOp(2, 256).ptx(r.names) == "bar.arrive 2, 256;"
    assert tt.BulkWaitOp(0, read=True).ptx(r.names) == "cp.async.bulk.wait_group.read 0;"
    assert tt.BulkWaitOp(2).ptx(r.names) == "cp.async.bulk.wait_group 2;"


def test_opcodes_chosen_by_operands() -> None:
    r = _Regs()
    p, bar, tx, dst, tmap, c0, c1, mask = (
        r("pred"), r("b32"), r("b32"), r("b32"), r("b64"), r("b32"), r("b32"), r("b16"),
    )
    assert tt.BraOp("L").ptx(r.names) == "bra.uni L;"
    assert tt.BraOp("L", p).ptx(r.names) == "@%p0 bra L;"
    assert tt.MbarrierArriveOp(bar).ptx(r.names) == "mbarrier.arrive.shared::cta.b64 _, [%r0];"
    assert (
        tt.MbarrierArriveOp(bar, tx).ptx(r.names)
        == "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r0], %r1;"
    )
    assert (
        tt.MbarrierArriveOp(bar, cluster=True).ptx(r.names)
        == "mbarrier.arrive.shared::cluster.b64 _, [%r0];"
    )
    load = tt.CpAsyncBulkTensorOp(dst, tmap, c0, c1, bar, mask=mask)
    assert load.ptx(r.names) == (
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%r2], [%rd0, {%r3, %r4}], [%r0], %rs0;"
    )
    assert tt.LabelOp("L").ptx(r.names) == "L:"
    assert tt.FenceOp("wgmma").ptx(r.names) == "wgmma.fence.sync.aligned;"


def test_cvt_forms_splat_their_sources() -> None:
    r = _Regs()
    d, hi, lo = r("b32"), r("f32"), r("f32")
    cvt = tt.CvtOp("rn.bf16x2.f32", d, [hi, lo])
    assert cvt.ptx(r.names) == "cvt.rn.bf16x2.f32 %r0, %f0, %f1;"


@pytest.mark.parametrize(
    "mods, ptx, sm",
    [
        ("rn.f32.s32", (6, 0), 30),
        ("rn.bf16.f32", (7, 0), 80),
        ("rn.bf16x2.f32", (7, 0), 80),
        ("f32.bf16", (7, 8), 90),
        ("rn.satfinite.e4m3x2.f32", (7, 8), 89),
        ("rn.f16x2.e5m2x2", (7, 8), 89),
    ],
)
def test_cvt_requirements_come_from_the_table(mods: str, ptx: tuple[int, int], sm: int) -> None:
    r = _Regs()
    op = tt.CvtOp(mods, r("b32"), [r("b32")])
    assert (op.required_ptx(), op.required_sm()) == (ptx, sm)


def test_fence_forms() -> None:
    for kind, form in tt.FENCES.items():
        op = tt.FenceOp(kind)
        assert op.ptx(PtxNames()) == form.text + ";"
        assert op.requirement() == form.needs
    with pytest.raises(Exception, match="unknown fence 'nope'"):
        tt.FenceOp("nope").verify()


def test_fp8_wgmma_prints_no_transpose_immediates() -> None:
    r = _Regs()
    d = [r("f32") for _ in range(4)]
    adesc, bdesc, p = r("b64"), r("b64"), r("pred")
    fp8 = tt.WgmmaOp("m64n8k32.f32.e4m3.e5m2", d, adesc, bdesc, p)
    assert fp8.ptx(r.names).endswith("%rd0, %rd1, %p0, 1, 1;")
    bf16 = tt.WgmmaOp("m64n8k16.f32.bf16.bf16", d, adesc, bdesc, p, trans_b=1)
    assert bf16.ptx(r.names).endswith("%rd0, %rd1, %p0, 1, 1, 0, 1;")
    a = [r("b32") for _ in range(4)]
    rs = tt.WgmmaRsOp("m64n8k32.f32.e4m3.e4m3", d, a, bdesc, p)
    assert rs.ptx(r.names) == (
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%f0, %f1, %f2, %f3}, "
        "{%r0, %r1, %r2, %r3}, %rd1, %p0, 1, 1;"
    )
