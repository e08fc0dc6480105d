"""The ops and kernel launches of ResNet-50's training step through
``torch.compile(backend="tessera")``, counted on the CPU (no GPU needed).

    python bench/resnet_backward_ops.py [--hw 64] [--batch 2]

A ResNet-50 (torchvision's layout: bottlenecks of 3, 4, 6, 3 blocks, the stride on the
3x3 convolution, 1x1/2 shortcuts; random weights, bf16) runs one forward and backward
on the CPU reference with ``TESSERA_DUMP_DIR`` set. The backward graph's Graph IR (after
the graph pipeline) is counted by op, then lowered as on an H100
(``lower-graph-to-tile`` with the sm90 kernels and the implicit convolution) and its
host launches counted by kernel kind. The counts do not depend on the image size
beyond which kernels a shape takes; the GPU's step has the same ops at 224².
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class Bottleneck(nn.Module):
    def __init__(self, c: int, width: int, stride: int):
        super().__init__()
        o = width * 4
        self.conv1, self.bn1 = nn.Conv2d(c, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, o, 1, bias=False), nn.BatchNorm2d(o)
        self.down = None
        if stride != 1 or c != o:
            self.down = nn.Sequential(nn.Conv2d(c, o, 1, stride, bias=False), nn.BatchNorm2d(o))

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = torch.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return torch.relu(h + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, c = [], 64
        for width, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(n):
                blocks.append(Bottleneck(c, width, stride if i == 0 else 1))
                c = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


def count(batch: int, hw: int, show: tuple[str, ...] = ()
          ) -> tuple[collections.Counter, collections.Counter]:
    """(backward Graph IR ops by name, sm90 host launches by kernel kind); the lines of the
    ops named in ``show`` (``tgraph.concat`` ...) are printed."""
    from xdsl.parser import Parser

    import tessera.torch as tt
    from tessera.ir.context import default_context
    from tessera.passes.lower_graph_to_tile import LowerGraphToTile

    with tempfile.TemporaryDirectory() as d:
        os.environ["TESSERA_DUMP_DIR"] = d
        torch.manual_seed(0)
        model = ResNet50().to(torch.bfloat16)
        x = torch.randn(batch, 3, hw, hw, dtype=torch.bfloat16)
        tt.compile(model)(x).float().pow(2).sum().backward()
        del os.environ["TESSERA_DUMP_DIR"]
        graphs = sorted(Path(d).glob("*backward*/*-graph.mlir"))
        assert graphs, "no backward graph was dumped"
        text = "\n".join(p.read_text() for p in graphs)
    ops = collections.Counter(re.findall(r"= (tgraph\.\w+)", text))
    for line in text.splitlines():
        if any(f"= {name} " in line for name in show):
            print(line.strip())
    launches: collections.Counter = collections.Counter()
    for p_text in text.split("builtin.module")[1:]:
        ctx = default_context()
        module = Parser(ctx, "builtin.module" + p_text).parse_module()
        LowerGraphToTile(sm90=True, implicit_conv=True, split_k="auto").apply(ctx, module)
        for op in module.walk():
            if op.name in ("ttile.launch", "ttarget.launch", "ttarget.launch_ex"):
                callee = str(op.properties.get("callee", op.attributes.get("callee", "")))
                callee = callee.strip("@\"")
                kind = re.sub(r"_\d+$", "", re.sub(r"^.*?_p\d+_", "", callee))
                launches[kind] += 1
    return ops, launches


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--hw", type=int, default=64)
    ap.add_argument("--show", default="", help="ops whose lines to print: concat,slice")
    args = ap.parse_args()
    show = tuple(f"tgraph.{n}" for n in args.show.split(",") if n)
    ops, launches = count(args.batch, args.hw, show)
    print(f"ResNet-50 backward, batch {args.batch}, {args.hw}x{args.hw}, bf16")
    print("Graph IR ops:", ", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
    print(f"sm90 launches ({sum(launches.values())}):",
          ", ".join(f"{k} {v}" for k, v in sorted(launches.items(), key=lambda kv: -kv[1])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
