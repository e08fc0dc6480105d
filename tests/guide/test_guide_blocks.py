"""Every ```python block of the guide, executed as written.

The guide lives in ``<repo>/../shared/seeds/*.txt`` (where CI clones it), or in the
directory ``TESSERA_GUIDE_DIR`` names; without it these tests are skipped. Each block
runs from a file of its own text (so ``@ts.kernel`` can read its source), in a
namespace holding ``tessera``/``ts`` and the names the guide uses without defining
them (``x``, ``W``, ``model`` ...: the ``setup`` of its case; chapters that write
tessera's names bare, like ``gemm`` or ``Tensor``, get ``from tessera import *``).
Blocks that build on earlier ones of their chapter (``mesh`` then ``dist.tensor``)
run those first (``needs``). ``check`` then compares what the block computed with
numpy/torch in float64.

A block that cannot run as written is an expected failure with the reason; the
exception it raises today is pinned (``raises``), so it must fail for that reason
and becomes an error the day it runs (strict). ``pytest -rx tests/guide`` lists
them: that list is the roadmap.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch

import tessera
import tessera as ts
from tessera import dist
from tessera.frontend.annotations import TensorAnnotation
from tessera.frontend.errors import TraceError

REPO = Path(__file__).resolve().parents[2]
GUIDE = Path(os.environ.get("TESSERA_GUIDE_DIR", REPO.parent / "shared" / "seeds"))
KERNELS = REPO / "examples" / "kernels"

CHAPTERS = {
    "000_833ca748412d869c": "ch2-programming-model",
    "001_58f1091430d34b7a": "ch2-programming-model-nvl72",
    "002_6e9cfc06ea8da603": "ch1-introduction",
    "003_822c9274755d8aa9": "programming-model-guide",
    "004_d2d7198c8a78d071": "ch4-execution-model",
}


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of ``text``; one left open runs to the end of the file."""
    out = []
    for m in re.finditer(r"^```python[ \t]*$", text, re.M):
        start = m.end() + 1
        end = text.find("\n```", start)
        out.append(text[start:] if end < 0 else text[start:end + 1])
    return out


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _kernel_module(name: str) -> Any:
    if str(KERNELS) not in sys.path:
        sys.path.insert(0, str(KERNELS))
    return importlib.import_module(name)


@dataclass
class Case:
    first_line: str
    """The block's first non-blank line: a changed guide fails here instead of silently
    testing another block."""
    setup: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    check: Callable[[dict[str, Any]], None] | None = None
    needs: tuple[int, ...] = ()
    star: bool = False
    context: Callable[[], Any] | None = None
    cannot: str | None = None
    raises: type[BaseException] | tuple[type[BaseException], ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- checks per block


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _attention(ns: dict[str, Any]) -> None:
    Q, K, V = (rng(i).standard_normal((5, 8)) for i in range(3))
    np.testing.assert_allclose(ns["attention"](Q, K, V), _softmax(Q @ K.T) @ V, rtol=1e-12)
    assert "func.func @attention" in ns["attention"].inspect_ir("graph")


def _nvl72_w(ns: dict[str, Any]) -> None:
    W = ns["W"]
    assert ns["mesh"].shape == (4, 9, 2)
    assert W.local_shape == (8192, 911)  # 8192 columns over tp = 9: padded blocks


def _loss_fn(ns: dict[str, Any]) -> None:
    x, W, y = ns["x"], ns["W"], ns["y_true"]
    t = np.tanh(x @ W)
    want = x.T @ (2 * (t - y) * (1 - t**2) / y.size)
    np.testing.assert_allclose(ns["gW"], want, rtol=1e-10)


def _split_heads(qkv: np.ndarray, heads: int) -> list[np.ndarray]:
    *b, s, f = qkv.shape
    w = f // 3
    return [
        np.swapaxes(qkv[..., k * w:(k + 1) * w].reshape(*b, s, heads, w // heads), -3, -2)
        for k in range(3)
    ]


def _block(ns: dict[str, Any]) -> None:
    x = rng(1).standard_normal((2, 5, 12))
    Wqkv = rng(2).standard_normal((12, 96)) * 0.3
    Wo = rng(3).standard_normal((2, 7))
    got = ns["block"](x, Wqkv, Wo)
    q, k, v = _split_heads(x @ Wqkv, 16)
    p = _softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(2.0))
    np.testing.assert_allclose(got, (p @ v) @ Wo, rtol=1e-10)


def _kernel_is_block(ns: dict[str, Any]) -> dict[str, Any]:
    x = rng(1).standard_normal((2, 5, 12)).astype(np.float32)
    ns["block"](x, (rng(2).standard_normal((12, 96)) * 0.3).astype(np.float32),
                rng(3).standard_normal((2, 7)).astype(np.float32))  # its float32 signature
    return {"kernel": ns["block"]}


def _tile_example(ns: dict[str, Any]) -> None:
    d = rng(4).standard_normal(333).astype(np.float32)
    want = _kernel_module("tile_example").reference(d.copy())
    ns["tile_example"](d)
    np.testing.assert_array_equal(d, want)


def _process_chunks(ns: dict[str, Any]) -> None:
    m = _kernel_module("process_chunks")
    x = rng(5).standard_normal(300).astype(np.float32)
    out = np.zeros_like(x)
    ns["process_chunks"](x, out)
    np.testing.assert_allclose(out, m.reference(x), rtol=1e-6, atol=1e-6)


def _cooperative_reduction(ns: dict[str, Any]) -> None:
    d = rng(6).standard_normal(1000).astype(np.float32)
    got = ns["cooperative_reduction"](d)
    np.testing.assert_allclose(float(got), d.astype(np.float64).sum(), rtol=1e-5, atol=1e-4)


def _memory_hierarchy(ns: dict[str, Any]) -> None:
    A = rng(7).standard_normal((70, 67)).astype(np.float32)
    before = A.copy()
    assert ns["memory_hierarchy_example"](A) is None  # the guide's kernel has no output
    np.testing.assert_array_equal(A, before)
    tile = ns["memory_hierarchy_example"].inspect_ir("tile")
    assert "ttile.commit_group" in tile and "#tessera.smem" in tile


def _optimized_access(ns: dict[str, Any]) -> None:
    src = rng(8).standard_normal((133, 12)).astype(ml_dtypes.bfloat16)
    dst = np.ones((133, 12), ml_dtypes.bfloat16)
    ns["optimized_memory_access"](src, dst)
    # as written the kernel stages src in shared memory and never stores to dst
    np.testing.assert_array_equal(dst.view(np.uint16), np.ones_like(dst).view(np.uint16))


def _double_buffered(ns: dict[str, Any]) -> None:
    A = rng(9).standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    B = rng(10).standard_normal((64, 32)).astype(ml_dtypes.bfloat16)
    C = np.zeros((64, 32), np.float32)
    ns["double_buffered_gemm"](A, B, C, BM=64, BN=32, BK=16)
    # as written the loop multiplies the block loaded one step earlier, so the last
    # K block (48:64) is loaded but never multiplied
    a, b = A.astype(np.float64), B.astype(np.float64)
    np.testing.assert_allclose(C, a[:, :48] @ b[:48], rtol=1e-5, atol=1e-4)


def _mixed_precision(ns: dict[str, Any]) -> None:
    ann = ns["__annotations__"]
    assert all(isinstance(ann[k], TensorAnnotation) for k in ("x1", "x2", "x3"))
    assert ann["x3"].policy.loss_scale == 128.0 and ann["x2"].policy.rounding == "stochastic"
    A = rng(11).standard_normal((16, 32)).astype(ts.fp8_e4m3.np_dtype)
    B = rng(12).standard_normal((32, 8)).astype(ts.fp8_e4m3.np_dtype)
    got = ns["mixed_precision_gemm"](A, B)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, A.astype(np.float64) @ B.astype(np.float64), rtol=1e-5,
                               atol=1e-5)


def _stable_softmax(ns: dict[str, Any]) -> None:
    x = (rng(13).standard_normal((4, 33)) * 30).astype(ml_dtypes.bfloat16)
    got = ns["numerically_stable_softmax"](x)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(got.astype(np.float64), _softmax(x.astype(np.float64)),
                               rtol=2 ** -7, atol=1e-6)


def _quantized_policy(ns: dict[str, Any]) -> None:
    P = ns["QuantizedPolicy"]
    assert P.is_precision_policy and P.numeric_policy.storage == ts.int8
    assert ns["__annotations__"]["quantized_weight"] is not None


def _loss_data(ns: dict[str, Any]) -> dict[str, Any]:
    g = rng(14)
    return {"x": g.standard_normal((6, 3)), "W": g.standard_normal((3, 2)),
            "b": g.standard_normal(2), "y_true": g.standard_normal((6, 2))}


def _loss_function(ns: dict[str, Any]) -> None:
    t = [torch.tensor(ns[k], requires_grad=True) for k in ("x", "W", "b")]
    loss = torch.nn.functional.mse_loss(torch.relu(t[0] @ t[1] + t[2]),
                                        torch.tensor(ns["y_true"]))
    loss.backward()
    np.testing.assert_allclose(ns["grad_W"], t[1].grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(ns["grad_b"], t[2].grad.numpy(), rtol=1e-10)


def _custom_gelu(ns: dict[str, Any]) -> None:
    x = np.linspace(-3, 3, 13)
    f = ns["custom_gelu"]
    inner = np.tanh(0.79788456 * (x + 0.044715 * x**3))
    np.testing.assert_allclose(f(x), 0.5 * x * (1 + inner), rtol=1e-12)
    g = ts.grad(lambda x: ts.sum(f(x)))(x)
    pdf = np.exp(-0.5 * x**2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(g, 0.5 * (1 + inner) + x * pdf, rtol=1e-12)  # its bwd rule


def _one_rank_tp() -> Any:
    return dist.use_mesh({"tp": 1})


def _dist_data(ns: dict[str, Any]) -> dict[str, Any]:
    return {"x": rng(15).standard_normal((4, 3)), "W": rng(16).standard_normal((3, 5))}


def _distributed_loss(ns: dict[str, Any]) -> None:
    x, W = ns["x"], ns["W"]
    np.testing.assert_allclose(ns["grad_W"], 2 * x.T @ (x @ W), rtol=1e-12)


def _meshes(ns: dict[str, Any]) -> None:
    assert ns["dp_mesh"].shape == (4,) and ns["tp_mesh"].shape == (2,)
    assert ns["hybrid_mesh"].shape == (4, 2, 2) and ns["hybrid_mesh"].axes == ("dp", "tp", "pp")


def _eager(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> Callable[[dict], dict]:
    return lambda ns: {"A": rng(17).standard_normal(shape_a),
                       "B": rng(18).standard_normal(shape_b)}


def _eager_matmul(ns: dict[str, Any]) -> None:
    """``op.matmul(A, B)`` at the top level ran at once (``tessera.frontend.eager``)."""
    assert isinstance(ns["Y"], np.ndarray)
    np.testing.assert_allclose(ns["Y"], ns["A"] @ ns["B"], rtol=1e-12, atol=1e-12)


def _eager_fp6_gemm(ns: dict[str, Any]) -> None:
    """``gemm(x, w)`` of fp6 arrays at the top level: the product accumulated in f32 and
    rounded once to fp6 (arrays carry no ``@accum`` policy, so the result keeps fp6)."""
    x, w = (ns[k].astype(np.float64) for k in ("x", "w"))
    assert ns["y"].dtype == ts.fp6.np_dtype
    want = (x @ w).astype(ts.fp6.np_dtype).astype(np.float64)
    np.testing.assert_array_equal(ns["y"].astype(np.float64), want)


COLLECTIVE = ("a collective called on an array at the top level: the ranks it would combine "
              "exist only in a function compiled over a dist.Mesh, so it raises a located "
              "error (operators other than collectives run eagerly on arrays)")

CASES: dict[tuple[str, int], Case] = {
    ("000_833ca748412d869c", 0): Case("from tessera import op, graph", check=_attention),
    ("000_833ca748412d869c", 1): Case(
        "Y = op.matmul(A, B, tile_shape=(128, 128, 64))", setup=_eager((256, 256), (256, 256)),
        needs=(0,), check=_eager_matmul),
    ("000_833ca748412d869c", 2): Case(
        "from tessera import dist", check=lambda ns: _assert(ns["mesh"].shape == (72, 1, 1))),
    ("000_833ca748412d869c", 3): Case(
        "W = dist.tensor(", needs=(2,),
        check=lambda ns: _assert(ns["W"].local_shape == (13889, 1_000_000))),
    ("001_58f1091430d34b7a", 0): Case(
        "from tessera import dist", check=lambda ns: _assert(ns["mesh"].shape == (4, 9, 2))),
    ("001_58f1091430d34b7a", 1): Case("W = dist.tensor(", needs=(0,), check=_nvl72_w),
    ("001_58f1091430d34b7a", 2): Case(
        'x: Tensor["B","D", fp6 @accum(fp32)]', star=True,
        setup=lambda ns: {"x": rng(19).standard_normal((4, 8)).astype(ts.fp6.np_dtype),
                          "w": rng(20).standard_normal((8, 3)).astype(ts.fp6.np_dtype)},
        check=_eager_fp6_gemm),
    ("001_58f1091430d34b7a", 3): Case(
        "def loss_fn(W):", star=True,
        setup=lambda ns: {
            "model": lambda x, W: ts.tanh(ts.matmul(x, W)),
            "x": rng(21).standard_normal((6, 4)), "W": rng(22).standard_normal((4, 3)),
            "y_true": rng(23).standard_normal((6, 3)),
        },
        check=_loss_fn),
    ("001_58f1091430d34b7a", 4): Case(
        "y_local = x @ W_shard", star=True,
        setup=lambda ns: {"x": rng(24).standard_normal((4, 3)),
                          "W_shard": rng(25).standard_normal((3, 2))},
        cannot=COLLECTIVE + " (`all_gather(y_local, axis=\"tp\")`)", raises=TraceError),
    ("001_58f1091430d34b7a", 5): Case("@jit @autodiff", star=True, check=_block),
    ("001_58f1091430d34b7a", 6): Case(
        'print(kernel.inspect_ir("tile"))', star=True, needs=(5,), setup=_kernel_is_block,
        check=lambda ns: _assert("ttile.kernel" in ns["kernel"].inspect_ir("tile")
                                 and "ttarget." in ns["kernel"].inspect_ir("target"))),
    ("003_822c9274755d8aa9", 0): Case(
        "# Traditional CUDA thinking",
        cannot="CUDA pseudo-code for comparison: blockIdx/blockDim/threadIdx are not Python "
               "names", raises=NameError),
    ("003_822c9274755d8aa9", 1): Case("@ts.kernel", check=_tile_example),
    ("003_822c9274755d8aa9", 2): Case(
        "@ts.kernel", check=_process_chunks,
        setup=lambda ns: {"process": _kernel_module("process_chunks").process}),
    ("003_822c9274755d8aa9", 3): Case("@ts.kernel", check=_cooperative_reduction),
    ("003_822c9274755d8aa9", 4): Case(
        "@ts.kernel", check=_memory_hierarchy,
        setup=lambda ns: {"i": 3, "j": 5, "block_m": 8, "block_n": 16}),
    ("003_822c9274755d8aa9", 5): Case(
        "@ts.kernel", check=_optimized_access, setup=lambda ns: {"block_m": 3}),
    ("003_822c9274755d8aa9", 6): Case("@ts.kernel", check=_double_buffered),
    ("003_822c9274755d8aa9", 7): Case(
        "# Basic types with accumulation policies", check=_mixed_precision,
        setup=lambda ns: {"accum": ts.accum, "stochastic_round": ts.stochastic_round,
                          "loss_scale": ts.loss_scale}),
    ("003_822c9274755d8aa9", 8): Case("@ts.jit", check=_stable_softmax),
    ("003_822c9274755d8aa9", 9): Case("# Define custom precision policy", check=_quantized_policy),
    ("003_822c9274755d8aa9", 10): Case("@ts.jit", setup=_loss_data, check=_loss_function),
    ("003_822c9274755d8aa9", 11): Case("@ts.custom_vjp", check=_custom_gelu),
    ("003_822c9274755d8aa9", 12): Case(
        "@ts.jit", setup=_dist_data, context=_one_rank_tp, check=_distributed_loss),
    ("003_822c9274755d8aa9", 13): Case("# Create various mesh configurations", check=_meshes),
    ("003_822c9274755d8aa9", 14): Case(
        "# Different sharding strategies",
        cannot="the guide's text is cut off inside this block (`mesh_# Tessera Programming "
               "Guide`), so it is not Python", raises=SyntaxError),
    ("004_d2d7198c8a78d071", 0): Case(  # the chapter imports op only in its next block
        "Y = op.matmul(A, B, tile_shape=(128, 128, 64))",
        setup=lambda ns: {**_eager((256, 256), (256, 256))(ns), "op": tessera.op},
        check=_eager_matmul),
    ("004_d2d7198c8a78d071", 1): Case(
        "from tessera import dist, op",
        setup=lambda ns: {"local_grads": rng(26).standard_normal(10)},
        cannot=COLLECTIVE + " (`op.all_reduce(local_grads, ...)`)", raises=TraceError),
}


def _assert(ok: bool) -> None:
    assert ok


# ---------------------------------------------------------------- running blocks


def _chapters() -> dict[str, list[str]]:
    if not GUIDE.is_dir():
        return {}
    return {p.stem: python_blocks(p.read_text()) for p in sorted(GUIDE.glob("*.txt"))}


def _namespace(stem: str, case: Case) -> dict[str, Any]:
    ns: dict[str, Any] = {"tessera": tessera, "ts": ts, "__name__": f"guide_{stem}"}
    if case.star:
        ns.update({k: getattr(tessera, k) for k in tessera.__all__})
    return ns


def _run(text: str, path: Path, ns: dict[str, Any]) -> None:
    path.write_text(text)
    code = compile(text, str(path), "exec", dont_inherit=True)  # not this file's __future__
    exec(code, ns)  # noqa: S102 - the guide's own code


@contextlib.contextmanager
def _context(case: Case) -> Iterator[None]:
    if case.context is None:
        yield
    else:
        with case.context():
            yield


def _params() -> list[Any]:
    out = []
    for stem, blocks in _chapters().items():
        for i in range(len(blocks)):
            case = CASES.get((stem, i))
            marks = []
            if case is not None and case.cannot:
                marks.append(pytest.mark.xfail(strict=True, raises=case.raises,
                                               reason=case.cannot))
            out.append(pytest.param(stem, i, id=f"{CHAPTERS.get(stem, stem)}-block{i}",
                                    marks=marks))
    return out


@pytest.mark.skipif(not GUIDE.is_dir(), reason=f"the guide is not at {GUIDE}")
@pytest.mark.parametrize(("stem", "index"), _params())
def test_guide_block(stem: str, index: int, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    blocks = _chapters()[stem]
    case = CASES.get((stem, index))
    assert case is not None, (
        f"no expectation for block {index} of {stem}; add a Case to CASES:\n{blocks[index]}"
    )
    first = next(line for line in blocks[index].splitlines() if line.strip())
    assert first.strip().startswith(case.first_line), f"the guide's block changed: {first!r}"
    ns = _namespace(stem, case)
    for k in case.needs:
        _run(blocks[k], tmp_path / f"block{k}.py", ns)
    if case.setup is not None:
        ns.update(case.setup(ns))
    with _context(case):
        _run(blocks[index], tmp_path / f"block{index}.py", ns)
        if case.check is not None:
            case.check(ns)


def test_every_block_has_a_case() -> None:
    chapters = _chapters()
    if not chapters:
        pytest.skip(f"the guide is not at {GUIDE}")
    known = {(s, i) for s, b in chapters.items() for i in range(len(b))}
    assert known == set(CASES), sorted(known ^ set(CASES))
