"""A convolution layer's training pass (forward, input and weight gradients) through
``torch.compile(backend="tessera")`` against eager (cuDNN), ResNet-50 layer shapes, bf16;
then each of ResNet-50's distinct convolutions' input gradient alone
(``torch.nn.grad.conv2d_input``: one ``aten.convolution_backward`` through the backend,
against cuDNN's), the strided 3x3/2 and 1x1/2 ones included.

    python bench/conv_backward.py [--batch N] [--reps R] [--layers a,b] [--no-train]
        [--no-input-grad]
    python bench/conv_backward.py --plan [--batch N] [--layers a,b]   (no GPU)

For each layer: the output and both gradients are checked against float64 first (fresh
random inputs, the largest difference relative to the largest reference magnitude),
then forward + backward is timed (CUDA events, median of ``--reps``) for eager and
Tessera, with Tessera's kernels of one step (torch.profiler) listed, and eager on
channels-last tensors (``eager NHWC``, the layout Inductor picks for such networks);
``--eager-kernels`` lists eager's kernels too. The table is
printed last; ratio = eager time / Tessera time. The stem's input needs no gradient (an
image), as in a model.

``--plan`` needs no GPU: each input gradient is lowered on the CPU with the Hopper
kernels (``TESSERA_SM90_MATMUL=1 TESSERA_IMPLICIT_CONV=1``) and its kernels are listed
with the bytes of their buffers (arguments read or written, each counted once per launch)
against the ideal (``dY`` and ``W`` read once, ``dX`` written once).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

import torch

import tessera.torch as tt

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.models import _time_ms  # noqa: E402  (CUDA events, median)

F = torch.nn.functional
LAYERS = [
    # name, C, H (= W), O, kernel, stride, padding, input gradient
    ("stem 7x7 s2", 3, 224, 64, 7, 2, 3, False),
    ("l1 3x3", 64, 56, 64, 3, 1, 1, True),
    ("l1 1x1 64->256", 64, 56, 256, 1, 1, 0, True),
    ("l2 3x3 s2", 128, 56, 128, 3, 2, 1, True),
    ("l2 3x3", 128, 28, 128, 3, 1, 1, True),
    ("l3 3x3", 256, 14, 256, 3, 1, 1, True),
    ("l4 3x3", 512, 7, 512, 3, 1, 1, True),
    ("l4 1x1 s2 1024->2048", 1024, 14, 2048, 1, 2, 0, True),
]


INPUT_GRAD_LAYERS = [
    # name, C, H (= W), O, kernel, stride, padding: every distinct convolution of
    # ResNet-50 (torchvision's layout, the stride on the 3x3) that needs an input gradient
    ("l1 1x1 64->64", 64, 56, 64, 1, 1, 0),
    ("l1 3x3", 64, 56, 64, 3, 1, 1),
    ("l1 1x1 64->256", 64, 56, 256, 1, 1, 0),
    ("l1 1x1 256->64", 256, 56, 64, 1, 1, 0),
    ("l2 1x1 256->128", 256, 56, 128, 1, 1, 0),
    ("l2 3x3 s2", 128, 56, 128, 3, 2, 1),
    ("l2 1x1 s2 256->512", 256, 56, 512, 1, 2, 0),
    ("l2 3x3", 128, 28, 128, 3, 1, 1),
    ("l3 3x3 s2", 256, 28, 256, 3, 2, 1),
    ("l3 1x1 s2 512->1024", 512, 28, 1024, 1, 2, 0),
    ("l3 3x3", 256, 14, 256, 3, 1, 1),
    ("l4 3x3 s2", 512, 14, 512, 3, 2, 1),
    ("l4 1x1 s2 1024->2048", 1024, 14, 2048, 1, 2, 0),
    ("l4 3x3", 512, 7, 512, 3, 1, 1),
]


def input_grad(name, c, hw, o, k, st, pd, batch, reps) -> dict:
    """The input gradient alone: Tessera's (through the backend) against cuDNN's, checked
    against float64 first."""
    dt = torch.bfloat16
    xs = (batch, c, hw, hw)
    w = torch.randn(o, c, k, k, device="cuda", dtype=dt) / (c * k * k) ** 0.5
    ho = (hw + 2 * pd - k) // st + 1
    dy = torch.randn(batch, o, ho, ho, device="cuda", dtype=dt)

    def f(dy, w):
        return torch.nn.grad.conv2d_input(xs, w, dy, stride=st, padding=pd)

    ref = f(dy.double(), w.double())
    comp = tt.compile(f)
    got = comp(dy, w)
    err = float((got.double() - ref).abs().max() / ref.abs().max())
    row = {"layer": name, "err": err, "eager_ms": _time_ms(lambda: f(dy, w), reps)}
    row["tessera_ms"] = _time_ms(lambda: comp(dy, w), reps) if err < 5e-2 else float("nan")
    row["kernels"] = kernels(lambda: comp(dy, w))
    print(row, flush=True)
    return row


def _buffer_bytes(t) -> int:
    shape = t.get_shape()
    width = getattr(t.element_type, "bitwidth", None) or getattr(t.element_type, "width", 32)
    n = 1
    for d in shape:
        n *= d
    return n * width // 8


def plan(name, c, hw, o, k, st, pd, batch) -> dict:
    """The kernels of one input gradient lowered on the CPU (``--plan``): each launch's
    name and the bytes of its buffers, against the ideal."""
    from tessera.frontend.jit import CompiledFunction
    from tessera.ir import target as tgt

    xs = (batch, c, hw, hw)
    ho = (hw + 2 * pd - k) // st + 1
    w = torch.zeros(o, c, k, k, dtype=torch.bfloat16)
    dy = torch.zeros(batch, o, ho, ho, dtype=torch.bfloat16)
    specs = []

    class Lowered(Exception):
        pass

    def record(self, *args, **kw):  # the partition's specialization, not run
        specs.append(self.specialize(*args, **kw))
        raise Lowered

    torch._dynamo.reset()
    call = CompiledFunction.__call__
    CompiledFunction.__call__ = record
    try:
        tt.compile(lambda dy, w: torch.nn.grad.conv2d_input(xs, w, dy, stride=st,
                                                            padding=pd))(dy, w)
    except Lowered:
        pass
    finally:
        CompiledFunction.__call__ = call
    (spec,) = specs
    launches = []
    for op in spec.ir("target").walk():
        if isinstance(op, tgt.LaunchOp | tgt.LaunchExOp):
            launches.append((op.callee.string_value().split("_p0_")[-1],
                             sum(_buffer_bytes(a.type) for a in op.args)))
    ideal = 2 * (batch * o * ho * ho + o * c * k * k + batch * c * hw * hw)
    return {"layer": name, "launches": launches, "ideal": ideal}


def print_plans(plans) -> None:
    print("\ninput gradient kernels on the CPU lowering (sm90, implicit conv); MB of the "
          "buffers each launch reads or writes")
    print(f"{'layer':24s} {'kernels':>7s} {'MB':>8s} {'ideal MB':>8s} {'x ideal':>7s}  kernels")
    for p in plans:
        tot = sum(b for _, b in p["launches"])
        names = ", ".join(f"{n} {b / 1e6:.1f}" for n, b in p["launches"])
        print(f"{p['layer']:24s} {len(p['launches']):7d} {tot / 1e6:8.1f} "
              f"{p['ideal'] / 1e6:8.1f} {tot / p['ideal']:7.2f}  {names}")


def kernels(fn, top: int = 6) -> str:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = sorted(((getattr(e, "self_device_time_total", 0) / 1e3, e.key) for e in
                   prof.key_averages()), reverse=True)[:top]
    return ", ".join(f"{k[:32]} {t:.3f}" for t, k in rows if t > 0)


def layer(name, c, hw, o, k, st, pd, needs_x, batch, reps, eager_kernels=False) -> dict:
    dt = torch.bfloat16
    x = torch.randn(batch, c, hw, hw, device="cuda", dtype=dt).requires_grad_(needs_x)
    w = (torch.randn(o, c, k, k, device="cuda", dtype=dt) / (c * k * k) ** 0.5).requires_grad_()
    ho = (hw + 2 * pd - k) // st + 1
    dy = torch.randn(batch, o, ho, ho, device="cuda", dtype=dt)

    def f(x, w):
        return F.conv2d(x, w, stride=st, padding=pd)

    x64, w64 = x.detach().double().requires_grad_(needs_x), w.detach().double().requires_grad_()
    y64 = f(x64, w64)
    y64.backward(dy.double())
    comp = tt.compile(f)
    y = comp(x, w)
    y.backward(dy)
    err = 0.0
    for got, ref in ((y, y64), (w.grad, w64.grad)) + (((x.grad, x64.grad),) if needs_x else ()):
        err = max(err, float((got.double() - ref).abs().max() / ref.abs().max()))

    def run(fn):
        def go():
            x.grad = w.grad = None
            fn(x, w).backward(dy)
        return go

    row = {"layer": name, "err": err, "eager_ms": _time_ms(run(f), reps)}
    row["tessera_ms"] = _time_ms(run(comp), reps) if err < 5e-2 else float("nan")
    row["kernels"] = kernels(run(comp))
    # eager on channels-last tensors (the layout Inductor gives a convolutional network)
    xcl = x.detach().to(memory_format=torch.channels_last).requires_grad_(needs_x)
    wcl = w.detach().to(memory_format=torch.channels_last).requires_grad_()
    dycl = dy.to(memory_format=torch.channels_last)

    def cl():
        xcl.grad = wcl.grad = None
        f(xcl, wcl).backward(dycl)

    row["eager_cl_ms"] = _time_ms(cl, reps)
    if eager_kernels:
        row["eager_kernels"] = kernels(run(f), 8)
        row["eager_cl_kernels"] = kernels(cl, 8)
    print(row, flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--layers", default="")
    ap.add_argument("--eager-kernels", action="store_true",
                    help="also list eager's kernels (NCHW and channels-last) per layer")
    ap.add_argument("--no-train", action="store_true", help="skip the training-pass table")
    ap.add_argument("--no-input-grad", action="store_true",
                    help="skip the input-gradient table")
    ap.add_argument("--plan", action="store_true",
                    help="no GPU: list each input gradient's kernels and bytes (CPU lowering)")
    args = ap.parse_args()
    if args.plan:
        import os

        os.environ["TESSERA_SM90_MATMUL"] = os.environ["TESSERA_IMPLICIT_CONV"] = "1"
        print_plans([plan(*spec, args.batch) for spec in INPUT_GRAD_LAYERS
                     if not args.layers or spec[0] in args.layers.split(",")])
        return 0
    torch.manual_seed(0)
    grads = []
    for spec in [] if args.no_input_grad else INPUT_GRAD_LAYERS:
        if args.layers and spec[0] not in args.layers.split(","):
            continue
        try:
            grads.append(input_grad(*spec, args.batch, args.reps))
        except Exception as exc:  # noqa: BLE001 - one layer's failure is a table row
            traceback.print_exc()
            grads.append({"layer": spec[0], "err": float("nan"), "eager_ms": float("nan"),
                          "tessera_ms": float("nan"), "kernels": f"error: {exc}"[:80]})
    rows = []
    for spec in [] if args.no_train else LAYERS:
        if args.layers and spec[0] not in args.layers.split(","):
            continue
        try:
            rows.append(layer(*spec, args.batch, args.reps, args.eager_kernels))
        except Exception as exc:  # noqa: BLE001 - one layer's failure is a table row
            traceback.print_exc()
            rows.append({"layer": spec[0], "err": float("nan"), "eager_ms": float("nan"),
                         "tessera_ms": float("nan"), "eager_cl_ms": float("nan"),
                         "kernels": f"error: {exc}"[:80]})
    if grads:
        print(f"\n{torch.cuda.get_device_name()}  batch {args.batch}, bf16, input gradient "
              "alone (conv2d_input); ratio = cuDNN / Tessera")
        print(f"{'layer':24s} {'cuDNN ms':>9s} {'tessera ms':>10s} {'ratio':>6s} {'err':>8s}")
        for r in grads:
            print(f"{r['layer']:24s} {r['eager_ms']:9.3f} {r['tessera_ms']:10.3f} "
                  f"{r['eager_ms'] / r['tessera_ms']:6.2f} {r['err']:8.4f}")
    if not rows:
        return 0
    print(f"\n{torch.cuda.get_device_name()}  batch {args.batch}, bf16, forward + backward; "
          "ratio = eager / Tessera")
    print(f"{'layer':24s} {'eager ms':>9s} {'eager NHWC':>10s} {'tessera ms':>10s} "
          f"{'ratio':>6s} {'vs NHWC':>7s} {'err':>8s}")
    for r in rows:
        print(f"{r['layer']:24s} {r['eager_ms']:9.3f} {r['eager_cl_ms']:10.3f} "
              f"{r['tessera_ms']:10.3f} {r['eager_ms'] / r['tessera_ms']:6.2f} "
              f"{r['eager_cl_ms'] / r['tessera_ms']:7.2f} {r['err']:8.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
