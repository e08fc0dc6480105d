"""``lower-tile-to-target`` reuses the lowering of a kernel equal up to its name that it
lowered before (in another module): the result prints exactly as a fresh lowering."""

from __future__ import annotations

from xdsl.parser import Parser

from tessera.ir import tile as ti
from tessera.ir.context import default_context
from tessera.passes import lower_tile_to_target as ltt
from tessera.passes.lower_graph_to_tile import LowerGraphToTile


def _tile_module(name: str, op: str = "tanh"):
    t = "tensor<8x16xf32>"
    text = (
        f"func.func @{name}(%a: {t}, %b: {t}) -> {t} {{\n"
        f"  %s = tgraph.{op} %a : ({t}) -> {t}\n"
        f"  %c = tgraph.add %s, %b : ({t}, {t}) -> {t}\n"
        f"  func.return %c : {t}\n}}"
    )
    ctx = default_context()
    m = Parser(ctx, text).parse_module()
    LowerGraphToTile().apply(ctx, m)
    return [k for k in m.walk() if isinstance(k, ti.KernelOp)]


def test_a_renamed_kernel_reuses_the_earlier_lowering_and_prints_like_a_fresh_one() -> None:
    ltt._MEMO.clear()
    first = _tile_module("alpha")
    second = _tile_module("beta")
    assert [k.sym_name.data for k in first] != [k.sym_name.data for k in second]
    for k in first:
        ltt.lower_kernel_memo(k)
    hits = len(ltt._MEMO)
    for k in second:
        got = ltt.lower_kernel_memo(k)
        assert got.sym_name.data == k.sym_name.data
        assert str(got) == str(ltt.lower_kernel(k))  # bit-for-bit the fresh lowering
    assert len(ltt._MEMO) == hits  # every kernel of the second module was a hit


def test_different_kernels_do_not_share_a_lowering() -> None:
    ltt._MEMO.clear()
    (tanh, _add) = _tile_module("alpha", "tanh")
    (exp, _add2) = _tile_module("beta", "exp")
    a, b = ltt.lower_kernel_memo(tanh), ltt.lower_kernel_memo(exp)
    assert str(a).replace(tanh.sym_name.data, "K") != str(b).replace(exp.sym_name.data, "K")
    assert len(ltt._MEMO) == 2
