"""Kernels and memory traffic of batch norm in a training step, counted on the CPU.

    python bench/bn_kernels.py [--batch 128] [--dtype bf16] [--passes PASS,PASS...] [-v]

A ResNet-50 bottleneck (1x1 -> 3x3 -> 1x1 convolutions, each followed by
``BatchNorm2d``, relu, the identity shortcut; torchvision's layer-1 shapes:
256 channels, width 64, 56x56) and a stride-2 one with a downsampling shortcut
(layer 2's first block: 256 -> 512 channels, width 128, 56x56 -> 28x28) go through
``torch.compile(backend="tessera")``'s translation on the ``meta`` device: nothing is
computed, AOTAutograd's forward and backward graphs are only translated to Graph IR and
optimized by the graph pipeline. Each partition is then lowered as on an H100
(``lower-graph-to-tile`` with the sm90 kernels and the implicit convolution) and its host
launches are counted.

For each graph the table gives the launches that are not convolutions (batch norm's
statistics, normalization, activation and their backward, the residual add, the data
movement around the convolutions: the kernels this count is about), with the bytes of the buffers they read or write (each argument
buffer of a launch counted once at its full size: an upper bound of the traffic when a
kernel reads only part of a buffer, exact for these streaming kernels), and the same per
batch-norm layer. The sm90 convolution and GEMM launches (``ttarget.launch_ex``) are
counted apart.
These are counts of the CPU lowering, not GPU timings.

``--passes`` replaces the graph pipeline (``tessera.options.DEFAULT_GRAPH_PASSES``) to
compare pipelines, e.g. the one before batch norm's reductions were merged.
"""

from __future__ import annotations

import argparse
import copy
import functools
import sys
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


from bench.resnet_backward_ops import Bottleneck  # noqa: E402  torchvision's bottleneck

CASES = {
    "identity block (layer1: 256ch, width 64, 56x56)": (256, 64, 1, 56),
    "stride-2 block (layer2.0: 256->512ch, width 128, 56->28)": (256, 128, 2, 56),
}


def graph_modules(model: nn.Module, x: torch.Tensor, passes: tuple[str, ...] | None
                  ) -> dict[str, list[Any]]:
    """The optimized Graph IR modules of the Tessera partitions of ``model``'s forward and
    backward graphs (``{"forward": [...], "backward": [...]}``), traced on the meta device."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    from tessera.ir.dtypes import dtype_of
    from tessera.options import CompileOptions
    from tessera.passes.pipelines import lower
    from tessera.torch import report
    from tessera.torch.backend import DECOMPOSITIONS, partition_joint
    from tessera.torch.partition import TesseraPartition, partition

    options = CompileOptions() if passes is None else CompileOptions(graph_passes=passes)
    graphs: dict[str, list[Any]] = {}

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: Any, kind: str) -> Any:
        eager = copy.deepcopy(gm)  # runs the step on meta tensors
        fused = partition(gm, kind, report.GraphReport(name=kind, kind=kind))
        for n in fused.graph.nodes:
            sub = getattr(fused, n.target) if n.op == "call_module" else None
            if isinstance(sub, TesseraPartition):
                args = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in n.args]
                arrays = [
                    np.empty(tuple(a.shape), dtype_of(a.dtype).np_dtype)
                    if isinstance(a, torch.Tensor) else a for a in args
                ]
                traced = sub.compiled.specialize(*arrays).traced
                graphs.setdefault(kind, []).append(lower(traced, "graph", options))
        return make_boxed_func(eager.forward)

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return aot_autograd(
            fw_compiler=functools.partial(compile_graph, kind="forward"),
            bw_compiler=functools.partial(compile_graph, kind="backward"),
            decompositions=DECOMPOSITIONS, partition_fn=partition_joint,
        )(gm, example_inputs)

    torch._dynamo.reset()
    x = x.detach().requires_grad_(True) if x.is_floating_point() else x  # token ids: no grad
    out = torch.compile(model, backend=backend)(x)
    out = out.logits if hasattr(out, "logits") else out  # a transformers model's output
    out.float().sum().backward()
    return graphs


@dataclass
class Launches:
    """Host launches of one graph: non-convolution launches, their bytes, convolutions."""

    other: int = 0
    other_bytes: int = 0
    conv: int = 0
    names: tuple[str, ...] = ()


def _bytes(t: Any) -> int:
    from xdsl.dialects.builtin import MemRefType

    if not isinstance(t, MemRefType):
        return 0
    bits = getattr(t.element_type, "bitwidth", 32)
    return prod(t.get_shape()) * max(bits, 8) // 8


def count(modules: list[Any]) -> Launches:
    """Launches of the Graph IR ``modules`` lowered as on an H100."""
    from tessera.ir import tile as tt
    from tessera.options import CompileOptions
    from tessera.passes.pipelines import lower

    options = CompileOptions(sm90_kernels=True, implicit_conv=True)
    out = Launches()
    names = []
    for m in modules:
        tile = lower(m, "tile", options)
        for op in tile.walk():
            if op.name == "ttarget.launch_ex":  # the sm90 TMA + wgmma kernels
                names.append("sm90")
                out.conv += 1
            elif isinstance(op, tt.LaunchOp):
                name = op.callee.string_value()
                names.append(name)
                out.other += 1
                out.other_bytes += sum(_bytes(a.type) for a in op.args)
    out.names = tuple(names)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--passes", default=None,
                    help="comma-separated graph pipeline (default: the compiler's)")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every launch")
    args = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
    passes = tuple(args.passes.split(",")) if args.passes else None
    print(f"batch {args.batch}, {args.dtype}; launches and buffer bytes of the CPU lowering "
          "for an H100 (sm90 kernels, implicit convolution), not GPU timings")
    print(f"{'case':58s} {'graph':9s} {'BN':>3s} {'non-conv':>8s} {'MB':>8s} "
          f"{'per BN':>6s} {'MB/BN':>7s} {'conv':>5s}")
    for case, (c, width, stride, hw) in CASES.items():
        torch.manual_seed(0)
        model = Bottleneck(c, width, stride).to(dtype).to("meta").train()
        x = torch.empty(args.batch, c, hw, hw, dtype=dtype, device="meta")
        graphs = graph_modules(model, x, passes)
        bns = sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
        for kind in ("forward", "backward"):
            n = count(graphs.get(kind, []))
            mb = n.other_bytes / 2**20
            print(f"{case:58s} {kind:9s} {bns:3d} {n.other:8d} {mb:8.1f} "
                  f"{n.other / bns:6.2f} {mb / bns:7.1f} {n.conv:5d}")
            if args.verbose:
                print("   ", " ".join(n.names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
