"""PyTorch's own OpInfo samples through ``torch.compile(backend="tessera")`` against eager
torch on the CPU reference, one JSON line per sample.

    python scripts/opinfo_sweep.py [--samples 0:3] [--mode fwd|grad] [--shard 0/2]
                                   [--device cpu|cuda] [--inputs sample|reference]
                                   [--lowering graph|tile] [OP ...]

Each OpInfo of ``torch.testing._internal.common_methods_invocations.op_db`` (or only the
named ones) runs its sample inputs ``--samples`` (a slice of each dtype's samples) for
every dtype of ``--dtypes`` it supports. ``fwd`` compares the outputs; ``grad`` (float
dtypes of differentiable ops) also runs the backward of a random projection of the
outputs and compares every input's gradient. ``--device cuda`` draws the samples on the
GPU, so eager CUDA is the reference and Tessera runs its PTX kernels. The ``empty`` factories (uninitialized
memory) are left out, and a sample whose eager result differs between two eager runs
(random draws) is skipped.

``res`` is ``ok``, ``ok_f64`` (results differ from eager's beyond the tolerance, but
their mean error against eager float64 on the same inputs is no larger than eager's),
``WRONG`` (values, dtype or shape differ: ``err`` says how),
``crash`` (Tessera raised where eager did not), ``structure`` (a different number of
results) or ``timeout``; ``tessera_ops`` counts the aten ops Tessera ran (0: the sample
went to eager torch whole, as a graph break). Needs ``expecttest`` (torch's test
utilities import it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tessera.torch as tt  # noqa: E402

DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
    "float16": torch.float16, "int64": torch.int64, "int32": torch.int32, "bool": torch.bool,
}
TOLERANCES = {
    torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7),
    torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (1e-3, 1e-3),
}
"""(rtol, atol) of a forward result; gradients of float32 get (1e-4, 1e-4)."""


class _Timeout(Exception):
    pass


def _alarm(*_: Any) -> None:
    raise _Timeout()


def compare(a: Any, b: Any, grad: bool = False) -> Any:
    """True when Tessera's ``a`` matches eager's ``b``, else what differs."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return a == b or f"{a!r} vs {b!r}"
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
    rtol, atol = TOLERANCES.get(a.dtype, (0.0, 0.0))
    if grad and a.dtype == torch.float32:
        rtol, atol = 1e-4, 1e-4
    try:
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=True)
        return True
    except AssertionError as e:
        return " ".join(str(e).split())[:300]


def _same(a: Any, b: Any) -> bool:
    fa, fb = pytree.tree_flatten(a)[0], pytree.tree_flatten(b)[0]
    return len(fa) == len(fb) and all(
        (torch.equal(x, y) or (x.is_floating_point() and torch.allclose(x, y, equal_nan=True,
                                                                        rtol=0, atol=0)))
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else x == y
        for x, y in zip(fa, fb)
    )


def run_sample(op: Any, sample: Any, mode: str) -> dict[str, Any]:
    """One sample: eager twice (skipped when they differ), then Tessera."""
    flat, spec = pytree.tree_flatten((sample.input, *sample.args))
    where = [j for j, x in enumerate(flat) if isinstance(x, torch.Tensor)]
    kwargs = sample.kwargs

    def fn(*tensors: torch.Tensor) -> Any:
        vals = list(flat)
        for j, t in zip(where, tensors):
            vals[j] = t
        return op.op(*pytree.tree_unflatten(vals, spec), **kwargs)

    floats = [flat[j].dtype for j in where if flat[j].is_floating_point()]
    low = floats[0] if floats else torch.float32

    def leaves(wide: bool) -> list[torch.Tensor]:
        out = [flat[j].detach().clone() for j in where]
        if wide:  # the float64 reference: floating inputs widened exactly
            out = [t.double() if t.is_floating_point() else t for t in out]
        if mode == "grad":
            for t in out:
                if t.is_floating_point():
                    t.requires_grad_(True)
        return out

    def step(f: Callable[..., Any], wide: bool = False) -> Any:
        ins = leaves(wide)
        out = f(*ins)
        if mode != "grad":
            return out
        outs = [o for o in pytree.tree_flatten(out)[0]
                if isinstance(o, torch.Tensor) and o.requires_grad]
        if not outs:
            raise ValueError("no differentiable result")
        g = torch.Generator().manual_seed(1)
        # the same projection in every run: drawn in f32, rounded to the sample's dtype
        sum((o * torch.randn(o.shape, generator=g).to(low).to(o.dtype).to(o.device)).sum()
            for o in outs).backward()
        return [out, [t.grad for t in ins if t.requires_grad]]

    row: dict[str, Any] = {"shapes": [list(flat[j].shape) for j in where]}
    try:
        want = step(fn)
        if not _same(want, step(fn)):
            return {**row, "res": "skip", "err": "eager differs between two runs"}
    except Exception:  # noqa: BLE001 - a sample eager rejects is not a Tessera case
        return {**row, "res": "skip", "err": "eager raises"}
    torch._dynamo.reset()
    tt.reset()
    signal.alarm(60)
    try:
        got = step(torch.compile(fn, backend="tessera"))
        signal.alarm(0)
    except _Timeout:
        return {**row, "res": "timeout"}
    except Exception as e:  # noqa: BLE001 - reported
        signal.alarm(0)
        return {**row, "res": "crash", "err": f"{type(e).__name__}: {str(e)[:300]}"}
    rep = tt.last_report()
    row["tessera_ops"] = rep.tessera_ops if rep is not None else 0
    gf, wf = pytree.tree_flatten(got)[0], pytree.tree_flatten(want)[0]
    if len(gf) != len(wf):
        return {**row, "res": "structure"}
    bad = [c for c in (compare(a, b, mode == "grad") for a, b in zip(gf, wf)) if c is not True]
    if bad and low != torch.float64 and _closer_to_f64(lambda: step(fn, wide=True), gf, wf):
        return {**row, "res": "ok_f64", "err": bad[:1]}
    return {**row, "res": "WRONG" if bad else "ok", **({"err": bad[:2]} if bad else {})}


def _closer_to_f64(reference: Callable[[], Any], got: list[Any], want: list[Any]) -> bool:
    """Whether Tessera's results are on average at least as close as eager's to eager
    float64 on the same inputs (``reference``: 16-bit and f32 ops that eager rounds
    differently, a composite computed in f32 where eager rounds each step, or the other
    way round)."""
    try:
        ref = pytree.tree_flatten(reference())[0]
    except Exception:  # noqa: BLE001 - an op without float64 support
        return False
    if len(ref) != len(got):
        return False
    for a, b, r in zip(got, want, ref):
        if not isinstance(a, torch.Tensor) or not a.is_floating_point() or a.shape != r.shape:
            if not (isinstance(a, torch.Tensor) and torch.equal(a, b)):
                return False
            continue
        mine = (a.double() - r.double()).abs().nan_to_num(0.0)
        theirs = (b.double() - r.double()).abs().nan_to_num(0.0)
        if mine.numel() and mine.mean() > theirs.mean() * 1.0001:
            return False
    return True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ops", nargs="*", help="OpInfo names (default: all of op_db)")
    ap.add_argument("--samples", default="0:3", help="slice of each dtype's samples")
    ap.add_argument("--mode", choices=("fwd", "grad"), default="fwd")
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--shard", default="0/1", help="k/n: every n-th OpInfo from the k-th")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--lowering", choices=("graph", "tile"), default="graph",
                    help="CPU runs on the Graph IR interpreter, or (tile) the GPU "
                    "lowering's Tile IR on the Tile IR interpreter (TESSERA_INTERPRET_TILE)")
    ap.add_argument("--inputs", choices=("sample", "reference"), default="sample",
                    help="the OpInfo's sample inputs, or its reference inputs (larger, "
                    "broadcasting and non-contiguous cases as well)")
    args = ap.parse_args(argv)
    before = os.environ.get("TESSERA_INTERPRET_TILE")
    if args.lowering == "tile":
        os.environ["TESSERA_INTERPRET_TILE"] = "1"
    try:
        _sweep(args)
    finally:
        if before is None:
            os.environ.pop("TESSERA_INTERPRET_TILE", None)
        else:
            os.environ["TESSERA_INTERPRET_TILE"] = before


def _sweep(args: argparse.Namespace) -> None:
    from torch.testing._internal.common_methods_invocations import op_db

    warnings.filterwarnings("ignore")
    torch._dynamo.config.cache_size_limit = 64
    signal.signal(signal.SIGALRM, _alarm)
    lo, hi = (int(x) for x in args.samples.split(":"))
    shard, nshards = (int(x) for x in args.shard.split("/"))
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    if args.mode == "grad":
        dtypes = [d for d in dtypes if d.is_floating_point]
    for k, op in enumerate(op_db):
        if k % nshards != shard or (args.ops and op.name not in args.ops) or "empty" in op.name:
            continue
        if args.mode == "grad" and not op.supports_autograd:
            continue
        for dtype in dtypes:
            if dtype not in op.supported_dtypes(args.device):
                continue
            try:
                inputs = op.reference_inputs if args.inputs == "reference" else op.sample_inputs
                samples = list(inputs(args.device, dtype, requires_grad=False))[lo:hi]
            except Exception:  # noqa: BLE001, S112 - an OpInfo without CPU samples
                continue
            for i, sample in enumerate(samples, lo):
                row = {"op": op.name, "dtype": str(dtype).removeprefix("torch."), "i": i,
                       **run_sample(op, sample, args.mode)}
                print(json.dumps(row, default=str), flush=True)


if __name__ == "__main__":
    main()
