"""What each kernel of a model's training step computes and how many bytes it moves,
counted on the CPU.

    python bench/kernel_bytes.py [--model vit_b16|gpt2|llama|resnet50] [--batch N] [--seq N]
                                 [--top 40] [--kind fused]

The model (the benchmark's configuration of ``bench/models.py``, random weights) goes
through ``torch.compile(backend="tessera")``'s translation on the ``meta`` device (nothing
is computed; see ``bench/bn_kernels.graph_modules``); each partition is lowered as on an
H100 (the sm90 kernels, the implicit convolution). For every host launch that is not a
TMA + wgmma kernel the table gives the kernel's name (as in ``bench/models.py
--profile``'s list, without the ``graphN_`` prefix), how many launches share it, the
bytes of the buffers it reads or writes (each argument buffer counted once at its full
size: an upper bound of the traffic when a kernel reads only part of a buffer, exact for
streaming kernels) and the Graph IR op it lowers (a fused op lists the ops of its body).
Divide a kernel's bytes by its measured time for its bandwidth.
These are counts of the CPU lowering, not GPU timings.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bn_kernels import _bytes, graph_modules  # noqa: E402


@dataclass
class Kernel:
    """One kernel name of a lowered graph: its launches, bytes per launch, what it lowers."""

    name: str
    what: str
    launches: int = 0
    bytes_each: int = 0
    shapes: list[str] = field(default_factory=list)


def _shape(t: Any) -> str:
    shape = getattr(t, "get_shape", lambda: None)()
    el = getattr(t, "element_type", None)
    return f"{'x'.join(map(str, shape))}x{el}" if shape is not None else str(t)


def describe(op: Any) -> str:
    """``op``'s name; for ``tgraph.fused`` the ops of its body, counted."""
    from tessera.ir import graph as g

    if isinstance(op, g.FusedOp):
        names = Counter(o.name.removeprefix("tgraph.") for o in op.body.walk()
                        if o.name not in ("tgraph.yield", "tgraph.fused"))
        body = ",".join(f"{n}{'*' + str(c) if c > 1 else ''}" for n, c in names.items())
        return f"fused[{body}]"
    return op.name.removeprefix("tgraph.")


def kernels(modules: list[Any]) -> list[Kernel]:
    """The non-wgmma kernels of the Graph IR ``modules`` lowered as on an H100."""
    from tessera.ir import tile as tt
    from tessera.options import CompileOptions
    from tessera.passes import lower_graph_to_tile as lgt
    from tessera.passes.pipelines import lower

    options = CompileOptions(sm90_kernels=True, implicit_conv=True)
    current: list[Any] = [None]
    made: dict[str, str] = {}
    op_key, named_kernel = lgt._op_key, lgt._FunctionLowering.named_kernel

    def spy_key(op: Any) -> Any:
        current[0] = op
        return op_key(op)

    def spy_named(self: Any, tag: str, make: Any, key: Any = ()) -> str:
        name = named_kernel(self, tag, make, key)
        if current[0] is not None:
            made.setdefault(name, describe(current[0]))
        return name

    lgt._op_key, lgt._FunctionLowering.named_kernel = spy_key, spy_named
    out: dict[str, Kernel] = {}
    try:
        for i, m in enumerate(modules):
            made.clear()
            tile = lower(m, "tile", options)
            for op in tile.walk():
                if isinstance(op, tt.LaunchOp):
                    callee = op.callee.string_value()
                    k = out.setdefault(f"p{i}_{callee}", Kernel(f"p{i}_{callee}",
                                                                made.get(callee, "?")))
                    k.launches += 1
                    k.bytes_each = sum(_bytes(a.type) for a in op.args)
                    k.shapes = [_shape(a.type) for a in op.args]
    finally:
        lgt._op_key, lgt._FunctionLowering.named_kernel = op_key, named_kernel
    return list(out.values())


def build_meta(name: str, batch: int | None, seq: int | None) -> tuple[Any, torch.Tensor]:
    """The model of ``bench/models.py`` on the meta device in bf16, and its input."""
    from bench.models import build

    if name in ("vit_b16", "resnet50"):
        from tests.torch.torchvision_shim import import_timm

        import_timm()  # timm without torchvision (its import needs torchvision's ops)
    with torch.device("meta"):
        model, inputs = build(name, batch, seq)
    model = model.to(dtype=torch.bfloat16).train()
    if hasattr(model, "config"):  # transformers: no key/value cache in a training step
        model.config.use_cache = False
    (x,) = [v for k, v in inputs.items() if k != "labels"]
    x = x.to("meta") if x.is_floating_point() else torch.empty(x.shape, dtype=x.dtype,
                                                               device="meta")
    if x.is_floating_point():
        x = x.to(torch.bfloat16)
    return model, x


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="vit_b16")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--top", type=int, default=40, help="kernels listed per graph, by bytes")
    ap.add_argument("--kind", default=None, help="only kernels whose name contains this")
    args = ap.parse_args()
    model, x = build_meta(args.model, args.batch, args.seq)
    graphs = graph_modules(model, x, None)
    print(f"{args.model}: non-wgmma kernels of the CPU lowering for an H100, by total bytes "
          "(buffers counted once per launch at full size); not GPU timings")
    for kind in ("forward", "backward"):
        ks = [k for k in kernels(graphs.get(kind, []))
              if args.kind is None or args.kind in k.name]
        total = sum(k.launches * k.bytes_each for k in ks)
        print(f"\n== {kind}: {sum(k.launches for k in ks)} launches, {total / 1e9:.2f} GB")
        print(f"{'kernel':28s} {'n':>4s} {'MB each':>9s} {'MB all':>9s}  what / buffers")
        for k in sorted(ks, key=lambda k: -k.launches * k.bytes_each)[: args.top]:
            print(f"{k.name:28s} {k.launches:4d} {k.bytes_each / 1e6:9.1f} "
                  f"{k.launches * k.bytes_each / 1e6:9.1f}  {k.what}  {' '.join(k.shapes)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
