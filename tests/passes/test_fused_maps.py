"""Fused kernels whose bodies hold index maps (``tessera.passes.tile_fused_maps``):
transposes keeping the last dim, slices, concats and unit reshapes fused with the
elementwise ops around them.

Each program is fused by ``fuse-elementwise`` (it must become one ``tgraph.fused`` op),
lowered, run by the Tile IR interpreter and compared with numpy float64 on random
non-zero inputs; every kernel also goes through ptxas.
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.fuse_elementwise import FuseElementwisePass
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_fused import Case, _parse, assembled_ptx, check_numerics, ty
from tests.passes.test_lower_graph_to_tile import context, f64, rand


def _rope(name: str, b: int, s: int, h: int, d: int, elem: str) -> Case:
    """A rotary embedding of a projection viewed ``[B, S, H, D]`` and transposed to
    ``[B, H, S, D]``: ``t * cos + cat(-t[..., d/2:], t[..., :d/2]) * sin``."""
    x = ty((b, s, h, d), elem)
    t = ty((b, h, s, d), elem)
    half = ty((b, h, s, d // 2), elem)
    cs = ty((s, d), elem)
    body = (
        f"  %t = tgraph.transpose %a0 permutation = [0, 2, 1, 3] : ({x}) -> {t}\n"
        f"  %0 = tgraph.mul %t, %a1 : ({t}, {cs}) -> {t}\n"
        f"  %1 = tgraph.slice %t start = [0, 0, 0, {d // 2}] limit = [{b}, {h}, {s}, {d}] "
        f"stride = [1, 1, 1, 1] : ({t}) -> {half}\n"
        f"  %2 = tgraph.slice %t start = [0, 0, 0, 0] limit = [{b}, {h}, {s}, {d // 2}] "
        f"stride = [1, 1, 1, 1] : ({t}) -> {half}\n"
        f"  %3 = tgraph.neg %1 : ({half}) -> {half}\n"
        f"  %4 = tgraph.concat %3, %2 axis = 3 : ({half}, {half}) -> {t}\n"
        f"  %5 = tgraph.mul %4, %a2 : ({t}, {cs}) -> {t}\n"
        f"  %r = tgraph.add %0, %5 : ({t}, {t}) -> {t}"
    )

    def ref(xx, cos, sin):
        tt_ = xx.transpose(0, 2, 1, 3)
        rot = np.concatenate([-tt_[..., d // 2:], tt_[..., : d // 2]], axis=-1)
        return tt_ * cos + rot * sin

    return Case(name, [((b, s, h, d), elem), ((s, d), elem), ((s, d), elem)],
                ((b, h, s, d), elem), body, ref, vector=True)


def _rope_grad(name: str, b: int, s: int, h: int, d: int, elem: str) -> Case:
    """The rotary embedding's input gradient as the torch backend writes it (the slices'
    gradients are concats with zeros), transposed back to ``[B, S, H, D]``."""
    t = ty((b, h, s, d), elem)
    half = ty((b, h, s, d // 2), elem)
    cs = ty((s, d), elem)
    out = ty((b, s, h, d), elem)
    body = (
        f"  %z = tgraph.constant dense<0.0> : tensor<{elem}> -> {half}\n"
        f"  %0 = tgraph.mul %a0, %a1 : ({t}, {cs}) -> {t}\n"
        f"  %1 = tgraph.mul %a0, %a2 : ({t}, {cs}) -> {t}\n"
        f"  %2 = tgraph.slice %1 start = [0, 0, 0, 0] limit = [{b}, {h}, {s}, {d // 2}] "
        f"stride = [1, 1, 1, 1] : ({t}) -> {half}\n"
        f"  %3 = tgraph.slice %1 start = [0, 0, 0, {d // 2}] limit = [{b}, {h}, {s}, {d}] "
        f"stride = [1, 1, 1, 1] : ({t}) -> {half}\n"
        f"  %4 = tgraph.neg %2 : ({half}) -> {half}\n"
        f"  %5 = tgraph.concat %z, %4 axis = 3 : ({half}, {half}) -> {t}\n"
        f"  %6 = tgraph.concat %3, %z axis = 3 : ({half}, {half}) -> {t}\n"
        f"  %7 = tgraph.add %0, %5 : ({t}, {t}) -> {t}\n"
        f"  %8 = tgraph.add %7, %6 : ({t}, {t}) -> {t}\n"
        f"  %r = tgraph.transpose %8 permutation = [0, 2, 1, 3] : ({t}) -> {out}"
    )

    def ref(dy, cos, sin):
        g1 = dy * sin
        z = np.zeros_like(g1[..., : d // 2])
        y = dy * cos + np.concatenate([z, -g1[..., : d // 2]], -1) + np.concatenate(
            [g1[..., d // 2:], z], -1)
        return y.transpose(0, 2, 1, 3)

    return Case(name, [((b, h, s, d), elem), ((s, d), elem), ((s, d), elem)],
                ((b, s, h, d), elem), body, ref, vector=True)


def _qkv_grads(name: str, b: int, h: int, s: int, d: int, elem: str) -> Case:
    """An attention's dq, dk, dv ``[B, H, S, D]`` stacked and transposed back into the
    fused projection's ``[B, S, 3, H, D]`` layout: data movement only."""
    one = ty((b, h, s, d), elem)
    st = ty((1, b, h, s, d), elem)
    cat = ty((3, b, h, s, d), elem)
    out = ty((b, s, 3, h, d), elem)
    body = (
        f"  %0 = tgraph.reshape %a0 : ({one}) -> {st}\n"
        f"  %1 = tgraph.reshape %a1 : ({one}) -> {st}\n"
        f"  %2 = tgraph.reshape %a2 : ({one}) -> {st}\n"
        f"  %3 = tgraph.concat %0, %1, %2 axis = 0 : ({st}, {st}, {st}) -> {cat}\n"
        f"  %r = tgraph.transpose %3 permutation = [1, 3, 0, 2, 4] : ({cat}) -> {out}"
    )
    return Case(name, [((b, h, s, d), elem)] * 3, ((b, s, 3, h, d), elem), body,
                lambda q, k, v: np.stack([q, k, v]).transpose(1, 3, 0, 2, 4), vector=True)


def _qkv_split(name: str, b: int, s: int, h: int, d: int, elem: str) -> Case:
    """The k of a fused projection ``[B, S, 3, H, D]``: permuted to ``[3, B, H, S, D]``,
    sliced and squeezed, then scaled."""
    x = ty((b, s, 3, h, d), elem)
    p = ty((3, b, h, s, d), elem)
    one = ty((1, b, h, s, d), elem)
    k = ty((b, h, s, d), elem)
    body = (
        f"  %c = tgraph.constant dense<0.5> : tensor<{elem}> -> {k}\n"
        f"  %0 = tgraph.transpose %a0 permutation = [2, 0, 3, 1, 4] : ({x}) -> {p}\n"
        f"  %1 = tgraph.slice %0 start = [1, 0, 0, 0, 0] limit = [2, {b}, {h}, {s}, {d}] "
        f"stride = [1, 1, 1, 1, 1] : ({p}) -> {one}\n"
        f"  %2 = tgraph.reshape %1 : ({one}) -> {k}\n"
        f"  %r = tgraph.mul %2, %c : ({k}, {k}) -> {k}"
    )
    return Case(name, [((b, s, 3, h, d), elem)], ((b, h, s, d), elem), body,
                lambda xx: xx.transpose(2, 0, 3, 1, 4)[1] * 0.5, vector=True)


def _stacked_by_concat(name: str, b: int, h: int, s: int, d: int, elem: str) -> Case:
    """The same stack as torch's backward of ``unbind`` writes it: a concat along dim 0
    and a reshape splitting it (``StackConcat`` turns it into the form above)."""
    one = ty((b, h, s, d), elem)
    cat = ty((3 * b, h, s, d), elem)
    st = ty((3, b, h, s, d), elem)
    out = ty((b, s, 3, h, d), elem)
    body = (
        f"  %0 = tgraph.concat %a0, %a1, %a2 axis = 0 : ({one}, {one}, {one}) -> {cat}\n"
        f"  %1 = tgraph.reshape %0 : ({cat}) -> {st}\n"
        f"  %r = tgraph.transpose %1 permutation = [1, 3, 0, 2, 4] : ({st}) -> {out}"
    )
    return Case(name, [((b, h, s, d), elem)] * 3, ((b, s, 3, h, d), elem), body,
                lambda q, k, v: np.stack([q, k, v]).transpose(1, 3, 0, 2, 4), vector=True)


CASES: list[Case] = [
    _rope("rope_bf16", 2, 6, 3, 16, "bf16"),
    _rope("rope_f32", 1, 5, 2, 8, "f32"),
    _rope("rope_odd_half", 2, 3, 2, 6, "f32"),  # halves of 3: conditions per element
    _rope_grad("rope_grad_bf16", 2, 3, 6, 16, "bf16"),
    _qkv_grads("qkv_grads_bf16", 2, 3, 5, 8, "bf16"),
    _stacked_by_concat("stacked_by_concat_f32", 2, 3, 5, 4, "f32"),
    _qkv_split("qkv_split_f16", 2, 5, 3, 8, "f16"),
    Case(  # a fused projection cut into heads (SliceBeforeSplit), then transposed
        "heads_of_projection",
        [((2, 5, 48), "bf16")], ((2, 2, 5, 8), "bf16"),
        "  %0 = tgraph.slice %a0 start = [0, 0, 16] limit = [2, 5, 32] stride = [1, 1, 1] : "
        "({t0}) -> tensor<2x5x16xbf16>\n"
        "  %1 = tgraph.reshape %0 : (tensor<2x5x16xbf16>) -> tensor<2x5x2x8xbf16>\n"
        "  %r = tgraph.transpose %1 permutation = [0, 2, 1, 3] : (tensor<2x5x2x8xbf16>) -> {res}",
        lambda x: x[:, :, 16:32].reshape(2, 5, 2, 8).transpose(0, 2, 1, 3), vector=True,
    ),
    Case(  # heads merged back and concatenated (ConcatBeforeMerge)
        "merged_heads_concat",
        [((2, 2, 5, 8), "f32"), ((2, 2, 5, 8), "f32")], ((2, 5, 32), "f32"),
        "  %0 = tgraph.transpose %a0 permutation = [0, 2, 1, 3] : ({t0}) -> tensor<2x5x2x8xf32>\n"
        "  %1 = tgraph.reshape %0 : (tensor<2x5x2x8xf32>) -> tensor<2x5x16xf32>\n"
        "  %2 = tgraph.transpose %a1 permutation = [0, 2, 1, 3] : ({t1}) -> tensor<2x5x2x8xf32>\n"
        "  %3 = tgraph.reshape %2 : (tensor<2x5x2x8xf32>) -> tensor<2x5x16xf32>\n"
        "  %r = tgraph.concat %1, %3 axis = 2 : (tensor<2x5x16xf32>, tensor<2x5x16xf32>) -> {res}",
        lambda q, k: np.concatenate([q.transpose(0, 2, 1, 3).reshape(2, 5, 16),
                                     k.transpose(0, 2, 1, 3).reshape(2, 5, 16)], 2),
        vector=True,
    ),
    Case(  # a strided slice on the last dim: read an element at a time, stored as vectors
        "strided_slice_add",
        [((4, 12), "f32"), ((4, 6), "f32")], ((4, 6), "f32"),
        "  %0 = tgraph.slice %a0 start = [0, 1] limit = [4, 12] stride = [1, 2] : "
        "({t0}) -> {res}\n"
        "  %r = tgraph.add %0, %a1 : ({res}, {t1}) -> {res}",
        lambda x, y: x[:, 1::2] + y, vector=True,
    ),
    Case(  # an unaligned concat boundary (3 of 9) with an elementwise consumer
        "concat_unaligned_exp",
        [((5, 3), "f32"), ((5, 6), "f32")], ((5, 9), "f32"),
        "  %0 = tgraph.concat %a0, %a1 axis = 1 : ({t0}, {t1}) -> {res}\n"
        "  %r = tgraph.exp %0 : ({res}) -> {res}",
        lambda x, y: np.exp(np.concatenate([x, y], 1)),
    ),
    Case(  # a slice inside one concat operand: the other is never read
        "slice_of_concat",
        [((4, 8), "f32"), ((4, 8), "f32")], ((4, 4), "f32"),
        "  %0 = tgraph.concat %a0, %a1 axis = 1 : ({t0}, {t1}) -> tensor<4x16xf32>\n"
        "  %1 = tgraph.slice %0 start = [0, 10] limit = [4, 14] stride = [1, 1] : "
        "(tensor<4x16xf32>) -> {res}\n"
        "  %r = tgraph.sqrt %1 : ({res}) -> {res}",
        lambda x, y: np.sqrt(y[:, 2:6]), positive=True, vector=True,
    ),
    Case(  # integers and a concat along a leading dim
        "int_concat_rows",
        [((3, 8), "i32"), ((2, 8), "i32")], ((5, 8), "i32"),
        "  %0 = tgraph.concat %a0, %a1 axis = 0 : ({t0}, {t1}) -> {res}\n"
        "  %r = tgraph.mul %0, %0 : ({res}, {res}) -> {res}",
        lambda x, y: np.concatenate([x, y]) ** 2, vector=True,
    ),
    Case(  # a reduction over a transposed, sliced operand
        "sum_of_transposed",
        [((3, 5, 8), "f32"), ((5, 3, 4), "f32")], ((5, 3), "f32"),
        "  %0 = tgraph.transpose %a0 permutation = [1, 0, 2] : ({t0}) -> tensor<5x3x8xf32>\n"
        "  %1 = tgraph.slice %0 start = [0, 0, 2] limit = [5, 3, 6] stride = [1, 1, 1] : "
        "(tensor<5x3x8xf32>) -> {t1}\n"
        "  %2 = tgraph.mul %1, %a1 : ({t1}, {t1}) -> {t1}\n"
        "  %r = tgraph.sum %2 axes = [2] : ({t1}) -> {res}",
        lambda x, y: (x.transpose(1, 0, 2)[:, :, 2:6] * y).sum(-1),
    ),
]


def lower(case: Case) -> ModuleOp:
    """The fused, Tile-level module of ``case``: one fused op (beside views of arguments)."""
    m = _parse(case)
    ops = [type(op) for op in m.walk() if op.dialect_name() == "tgraph"
           and not isinstance(op.parent_op(), g.FusedOp) and not isinstance(op, g.ReshapeOp)]
    assert ops == [g.FusedOp], f"{case.name}: not fused into one op"
    LowerGraphToTile().apply(context(), m)
    m.verify()
    return m


@pytest.fixture(scope="module")
def lowered() -> dict[str, ModuleOp]:
    return {c.name: lower(c) for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_numerics(case: Case, lowered: dict[str, ModuleOp]) -> None:
    check_numerics(case, lowered[case.name])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_one_kernel(case: Case, lowered: dict[str, ModuleOp]) -> None:
    ks = [op for op in lowered[case.name].walk() if isinstance(op, tt.KernelOp)]
    assert len(ks) == 1
    names = {op.name for op in ks[0].walk()}
    assert ("ttile.store_vector" in names) == case.vector


def test_strided_slice_reads_elements(lowered: dict[str, ModuleOp]) -> None:
    """The strided operand is read an element at a time, the other as vectors."""
    (k,) = [op for op in lowered["strided_slice_add"].walk() if isinstance(op, tt.KernelOp)]
    vec = {op.operands[0] for op in k.walk() if isinstance(op, tt.LoadVectorOp)}
    scalar = {op.operands[0] for op in k.walk() if isinstance(op, tt.LoadOp)}
    assert len(vec) == 1 and len(scalar) == 1 and vec != scalar


def test_dead_concat_operand_is_not_read(lowered: dict[str, ModuleOp]) -> None:
    """The slice reaches only the second concat operand: the kernel loads one array."""
    (k,) = [op for op in lowered["slice_of_concat"].walk() if isinstance(op, tt.KernelOp)]
    loads = [op for op in k.walk() if isinstance(op, tt.LoadVectorOp | tt.LoadOp)]
    assert len({op.operands[0] for op in loads}) == 1


def test_transpose_of_last_dim_is_not_fused() -> None:
    """A transpose moving the last dim keeps its own (tiled) kernel."""
    case = Case(
        "last_dim_transpose",
        [((4, 8), "f32")], ((8, 4), "f32"),
        "  %0 = tgraph.transpose %a0 permutation = [1, 0] : ({t0}) -> {res}\n"
        "  %r = tgraph.exp %0 : ({res}) -> {res}",
        lambda x: np.exp(x.T),
    )
    m = _parse(case)
    top = [type(op) for op in m.walk() if op.dialect_name() == "tgraph"
           and not isinstance(op.parent_op(), g.FusedOp)]
    assert top == [g.TransposeOp, g.ExpOp]


def test_all_kernels_pass_ptxas(lowered: dict[str, ModuleOp]) -> None:
    text = assembled_ptx(list(lowered.values()))
    assert text.count(".visible .entry") == len(CASES)
    assert "ld.global.v4.b32" in text or "ld.global.v4.f32" in text


def _random_program(seed: int) -> tuple[str, list[np.ndarray], np.ndarray]:
    """A random chain of index maps and elementwise ops on odd shapes (transposes keeping
    the last dim, strided slices, concats along any dim, size-1 reshapes, negations and
    broadcast products), its float32 inputs and its float64 value."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(2, 5))
    shape = [int(d) for d in rng.integers(1, 7, size=rank - 1)] + [int(rng.integers(1, 14))]
    args: list[np.ndarray] = [rand(rng, tuple(shape))]
    params = [f"%a0: {ty(tuple(shape), 'f32')}"]
    cur, val, lines, k = "%a0", f64(args[0]), [], 0

    def new_arg(s: tuple[int, ...]) -> tuple[str, np.ndarray]:
        x = rand(rng, s)
        args.append(x)
        params.append(f"%a{len(args) - 1}: {ty(s, 'f32')}")
        return f"%a{len(args) - 1}", f64(x)

    for _ in range(int(rng.integers(3, 7))):
        s = tuple(val.shape)
        kind = rng.choice(["transpose", "slice", "concat", "neg", "mul", "unsqueeze"])
        name = f"%v{k}"
        k += 1
        if kind == "transpose" and len(s) > 2:
            perm = [*(int(p) for p in rng.permutation(len(s) - 1)), len(s) - 1]
            val = val.transpose(perm)
            lines.append(f"  {name} = tgraph.transpose {cur} permutation = {perm} : "
                         f"({ty(s, 'f32')}) -> {ty(val.shape, 'f32')}")
        elif kind == "slice":
            st = [int(rng.integers(0, d)) for d in s]
            li = [int(rng.integers(a + 1, d + 1)) for a, d in zip(st, s)]
            sr = [int(rng.integers(1, 3)) for _ in s]
            val = val[tuple(slice(a, b, c) for a, b, c in zip(st, li, sr))]
            lines.append(f"  {name} = tgraph.slice {cur} start = {st} limit = {li} stride = {sr} : "
                         f"({ty(s, 'f32')}) -> {ty(val.shape, 'f32')}")
        elif kind == "concat":
            ax = int(rng.integers(0, len(s)))
            other_s = tuple(int(rng.integers(1, 6)) if i == ax else d for i, d in enumerate(s))
            other, ov = new_arg(other_s)
            first = bool(rng.integers(0, 2))
            a, b = (cur, other) if first else (other, cur)
            va, vb = (val, ov) if first else (ov, val)
            val = np.concatenate([va, vb], ax)
            ta, tb = (s, other_s) if first else (other_s, s)
            lines.append(f"  {name} = tgraph.concat {a}, {b} axis = {ax} : ({ty(ta, 'f32')}, "
                         f"{ty(tb, 'f32')}) -> {ty(val.shape, 'f32')}")
        elif kind == "unsqueeze":
            at = int(rng.integers(0, len(s)))  # not after the last dim: it stays last
            val = val.reshape(s[:at] + (1,) + s[at:])
            lines.append(f"  {name} = tgraph.reshape {cur} : ({ty(s, 'f32')}) -> "
                         f"{ty(val.shape, 'f32')}")
        elif kind == "mul":
            bs = tuple(d if rng.integers(0, 2) else 1 for d in s)
            other, ov = new_arg(bs)
            val = val * ov
            lines.append(f"  {name} = tgraph.mul {cur}, {other} : ({ty(s, 'f32')}, "
                         f"{ty(bs, 'f32')}) -> {ty(s, 'f32')}")
        else:
            val = -val
            lines.append(f"  {name} = tgraph.neg {cur} : ({ty(s, 'f32')}) -> {ty(s, 'f32')}")
        cur = name
    rt = ty(val.shape, "f32")
    lines.append(f"  %r = tgraph.exp {cur} : ({rt}) -> {rt}")
    text = (f"func.func @fuzz({', '.join(params)}) -> {rt} {{\n" + "\n".join(lines)
            + f"\n  func.return %r : {rt}\n}}\n")
    return text, args, np.exp(val)


@pytest.mark.parametrize("seed", range(24))
def test_random_chains(seed: int) -> None:
    """Random chains of index maps and elementwise ops on odd shapes, fused and lowered,
    against numpy on the Tile IR interpreter, and through ptxas (282 of 300 seeds fuse
    index maps into a kernel)."""
    text, args, want = _random_program(seed)
    ctx = context()
    m = Parser(ctx, text).parse_module()
    m.verify()
    FuseElementwisePass().apply(ctx, m)
    m.verify()
    LowerGraphToTile().apply(ctx, m)
    m.verify()
    (got,) = run_host(m, "fuzz", args)
    assert got.shape == want.shape
    np.testing.assert_allclose(f64(got), want, rtol=1e-5, atol=1e-6, err_msg=text)
    assembled_ptx([m])
