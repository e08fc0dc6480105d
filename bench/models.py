"""Real models through ``torch.compile``: Tessera's backend against Inductor and eager.

    python bench/models.py --out $OUT/models.json                   # all models (GPU)
    python bench/models.py --models gpt2 --modes infer,train --batch 8 --seq 1024

Models are built from their published configurations with random weights (nothing
is downloaded): GPT-2 124M (batch 8 x 1024 tokens), a LLaMA-style 1B (batch 4 x
2048), ResNet-50 and ViT-B/16 (batch 128, 224 x 224), all in bf16 on the GPU.
The language models use ``attn_implementation="sdpa"`` (what ``from_pretrained``
picks): attention is one ``scaled_dot_product_attention`` call in every run, which
Tessera's backend maps to ``tgraph.flash_attention``. ``infer`` times a forward under
``torch.no_grad``; ``train`` times forward, loss
and backward (the gradients of every parameter). For each (model, mode) row:

* eager, Inductor (``torch.compile``) and Tessera (``torch.compile(backend="tessera")``)
  times per step (CUDA events, median of ``--reps`` after warm-up);
* the first call's wall time of each compiled model (the compile time);
* Tessera's output (and, in ``train``, every gradient) against eager, as the largest
  difference relative to the largest eager magnitude; a row over tolerance is
  reported as wrong and its time is not used for a ratio;
* the backend's report: partitions, ATen ops left to torch, runtime fallbacks.

Every row runs under ``try`` with a per-row alarm (``--limit`` seconds): a failure
or a timeout becomes an error row with its message. The table is printed last.
"""

from __future__ import annotations

import argparse
import copy
import json
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOL = 5e-2
"""Largest difference, relative to the largest eager magnitude, of a bf16 model's
output or gradients (bf16 rounding of activations over many layers)."""


@dataclass
class Row:
    model: str
    mode: str
    eager_ms: float | None = None
    inductor_ms: float | None = None
    tessera_ms: float | None = None
    inductor_compile_s: float | None = None
    tessera_compile_s: float | None = None
    error: float | None = None
    report: str = ""
    notes: list[str] = field(default_factory=list)
    profile: list[str] = field(default_factory=list)
    host_profile: list[str] = field(default_factory=list)


def build(name: str, batch: int | None, seq: int | None,
          dropout: bool = False) -> tuple[Any, dict[str, Any]]:
    """``(model, inputs)`` of ``name`` at its benchmark size, random weights, on the CPU;
    GPT-2 with its configuration's dropouts (0.1) when ``dropout``, else none."""
    import torch

    if name in ("gpt2", "llama"):
        import transformers as T

        if name == "gpt2":
            cfg = T.GPT2Config(attn_implementation="sdpa")
            if not dropout:
                cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = 0.0
            model, (b, s) = T.GPT2LMHeadModel(cfg), (batch or 8, seq or 1024)
        else:
            cfg = T.LlamaConfig(
                num_hidden_layers=16, hidden_size=2048, intermediate_size=8192,
                num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                max_position_embeddings=4096, attn_implementation="sdpa",
            )
            model, (b, s) = T.LlamaForCausalLM(cfg), (batch or 4, seq or 2048)
        ids = torch.randint(0, cfg.vocab_size, (b, s))
        return model, {"input_ids": ids, "labels": ids}
    import timm

    arch = {"resnet50": "resnet50", "vit_b16": "vit_base_patch16_224"}[name]
    model = timm.create_model(arch, pretrained=False)
    return model, {"x": torch.randn(batch or 128, 3, 224, 224)}


def _loss(out: Any) -> Any:
    return out.loss if hasattr(out, "loss") and out.loss is not None else out.float().pow(2).mean()


def _output(out: Any) -> Any:
    return out.logits if hasattr(out, "logits") else out


def _rel(a: Any, b: Any) -> float:
    a, b = a.float(), b.float()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def _time_ms(fn: Callable[[], Any], reps: int) -> float:
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    traceback.print_stack(frame)  # where the time went
    raise _Timeout("row time limit reached")


def run_row(name: str, mode: str, args: argparse.Namespace) -> Row:
    import torch

    import tessera.torch as tt

    row = Row(name, mode)
    torch.manual_seed(0)
    base, cpu_inputs = build(name, args.batch, args.seq, args.dropout)
    base = base.to(device="cuda", dtype=torch.bfloat16)
    inputs = {
        k: (v.cuda().to(torch.bfloat16) if v.is_floating_point() else v.cuda())
        for k, v in cpu_inputs.items()
    }
    train = mode == "train"
    base.train(train)
    random_masks = train and args.dropout and name == "gpt2"

    def step_fn(model: Any) -> Callable[[], Any]:
        def step() -> Any:
            if train:
                for p in model.parameters():
                    p.grad = None
                out = model(**inputs)
                _loss(out).backward()
                return out
            with torch.no_grad():
                return model(**inputs)
        return step

    eager = step_fn(base)
    ref_out = _output(eager()).detach().clone()
    ref_grads = {n: p.grad.detach().clone() for n, p in base.named_parameters()
                 if train and p.grad is not None}
    row.eager_ms = _time_ms(eager, args.reps)

    for which in args.peers.split(","):
        torch._dynamo.reset()
        model = copy.deepcopy(base)
        kw = {"mode": args.compile_mode} if args.compile_mode else {}
        compiled = torch.compile(model, **kw) if which == "inductor" else tt.compile(model, **kw)
        step = step_fn(compiled)
        try:
            t0 = time.perf_counter()
            out = step()
            torch.cuda.synchronize()
            setattr(row, f"{which}_compile_s", time.perf_counter() - t0)
            if which == "tessera" and random_masks:
                row.notes.append("dropout on: not compared with eager (other masks)")
                row.report = str(tt.last_report())
            elif which == "tessera":
                err = _step_error(out, model, ref_out, ref_grads)
                row.error = err
                row.report = str(tt.last_report())
                if not err <= TOL:  # NaN too
                    row.notes.append(f"tessera differs from eager: {err:.3g} > {TOL}")
                    continue
            setattr(row, f"{which}_ms", _time_ms(step, args.reps))
            if which == "tessera" and not random_masks:
                # the timed steps replay recorded CUDA graphs: check the last one too
                err = _step_error(step(), model, ref_out, ref_grads)
                row.error = max(row.error, err)
                if not err <= TOL:
                    row.notes.append(f"tessera differs from eager after {args.reps} steps: "
                                     f"{err:.3g} > {TOL}")
                row.notes.append(_graph_stats())
            if which == "tessera" and args.profile:
                row.profile = _kernel_profile(step, args.profile)
            if which == "tessera" and args.host_profile:
                row.host_profile = _host_profile(step, args.host_profile)
                print("\n".join(row.host_profile), flush=True)
        except _Timeout:
            raise
        except Exception as e:  # a failing backend is a row note, not the end of the run
            row.notes.append(f"{which}: {type(e).__name__}: {str(e)[:400]}")
            traceback.print_exc()
        del compiled, model
        torch.cuda.empty_cache()
    return row


def _step_error(out: Any, model: Any, ref_out: Any, ref_grads: dict[str, Any]) -> float:
    """The larger of the output's and every gradient's error against eager's, each
    relative to the largest eager magnitude."""
    err = _rel(_output(out), ref_out)
    scale = max((g.float().abs().max().item() for g in ref_grads.values()), default=1.0)
    for n, p in model.named_parameters():
        if n in ref_grads:
            if p.grad is None:
                raise AssertionError(f"no gradient for {n}")
            err = max(err, (p.grad.float() - ref_grads[n].float()).abs().max().item() / scale)
    return err


def _graph_stats() -> str:
    """How many CUDA graphs the host plans recorded and replayed
    (:mod:`tessera.runtime.cuda_graphs`)."""
    from tessera.runtime import cuda

    caches = [p.graphs for plans in list(cuda._PLANS.values()) for p in plans.values()
              if p.graphs is not None]
    return (f"cuda graphs: {sum(g.captures for g in caches)} recorded, "
            f"{sum(g.replays for g in caches)} replays over {len(caches)} plans")


def _host_profile(step: Callable[[], Any], top: int) -> list[str]:
    """The ``top`` Python functions of three steps by own time (cProfile), with the
    steps' wall time: where the host spends a step when it, not the GPU, is the limit."""
    import cProfile
    import io
    import pstats

    import torch

    torch.cuda.synchronize()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(3):
        step()
    prof.disable()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / 3 * 1e3
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    return [f"host profile: {wall:.1f} ms per step (3 steps, under cProfile)", *lines[-top - 1:]]


def _kernel_profile(step: Callable[[], Any], top: int) -> list[str]:
    """The ``top`` kernels of one step by total GPU time (torch.profiler, CUPTI: kernels
    launched through the driver API are seen too), one line each."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()  # the host's time to issue a step: above the GPU's, the step waits on the host
    issue_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            t = totals.setdefault(ev.name, [0.0, 0])
            t[0] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            t[1] += 1
    all_us = sum(t[0] for t in totals.values())
    launches = sum(t[1] for t in totals.values())
    lines = [f"all kernels: {all_us / 1e3:.3f} ms, {launches} launches; host issues a step "
             f"in {issue_ms:.1f} ms"]
    # the host's waits on the device within a step: synchronizations and copies to it
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    waits: dict[str, list[float]] = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CPU and any(
            w in ev.name for w in ("Synchronize", "Memcpy", "_local_scalar_dense", "nonzero")
        ):
            t = waits.setdefault(ev.name, [0.0, 0])
            t[0] += ev.cpu_time_total
            t[1] += 1
    lines.append("host waits: " + (", ".join(
        f"{name} {us / 1e3:.2f} ms/{n}" for name, (us, n) in
        sorted(waits.items(), key=lambda kv: -kv[1][0])[:8]) or "none"))
    # by kind: a Tessera kernel's name ends in its kind and a number (graph0_forward_p0_conv_3)
    kinds: dict[str, list[float]] = {}
    for name, (us, n) in totals.items():
        parts = name.split("_p0_", 1)[-1].rsplit("_", 1)
        kind = parts[0] if len(parts) == 2 and parts[1].isdigit() else name[:24]
        k = kinds.setdefault(kind, [0.0, 0])
        k[0] += us
        k[1] += n
    lines.append("by kind: " + ", ".join(
        f"{kind} {us / 1e3:.2f} ms/{n}" for kind, (us, n) in
        sorted(kinds.items(), key=lambda kv: -kv[1][0])[:16]))
    for name, (us, n) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{us / 1e3:8.3f} ms {n:5d}x  {name[:100]}")
    print("\n".join(lines), flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", default="gpt2,llama,resnet50,vit_b16")
    ap.add_argument("--modes", default="infer,train")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--dropout", action="store_true",
                    help="GPT-2 with its configuration's dropouts (0.1); the training "
                    "step is then timed but not compared with eager")
    ap.add_argument("--limit", type=int, default=300, help="seconds per row")
    ap.add_argument("--compile-mode", default=None,
                    help="torch.compile's mode for both compiled runs (reduce-overhead: "
                         "CUDA graphs for Inductor and for Tessera)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--peers", default="inductor,tessera",
                    help="compiled runs beside eager: inductor and/or tessera")
    ap.add_argument("--host-profile", type=int, default=0,
                    help="print the top N Python functions of three Tessera steps (cProfile)")
    ap.add_argument("--profile", type=int, default=0,
                    help="print the N kernels of Tessera's step with the most GPU time")
    args = ap.parse_args()
    import torch

    rows: list[Row] = []
    signal.signal(signal.SIGALRM, _alarm)
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            print(f"== {name} {mode}", flush=True)
            signal.alarm(args.limit)
            try:
                row = run_row(name, mode, args)
            except Exception as e:
                traceback.print_exc()
                row = Row(name, mode, notes=[f"{type(e).__name__}: {str(e)[:400]}"])
            finally:
                signal.alarm(0)
            rows.append(row)
            print(json.dumps(asdict(row)), flush=True)
            torch._dynamo.reset()
            torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    print(f"\n{torch.cuda.get_device_name()}  ratio = peer time / Tessera time")
    print(f"{'model':10} {'mode':6} {'eager ms':>9} {'ind. ms':>9} {'tessera':>9} "
          f"{'vs eager':>8} {'vs ind.':>8} {'ind. s':>7} {'tes. s':>7} {'err':>8}  notes")
    for r in rows:
        def f(x: float | None, w: int = 9, p: int = 3) -> str:
            return f"{x:{w}.{p}f}" if x is not None else " " * (w - 1) + "-"
        ve = r.eager_ms / r.tessera_ms if r.eager_ms and r.tessera_ms else None
        vi = r.inductor_ms / r.tessera_ms if r.inductor_ms and r.tessera_ms else None
        print(f"{r.model:10} {r.mode:6} {f(r.eager_ms)} {f(r.inductor_ms)} {f(r.tessera_ms)} "
              f"{f(ve, 8, 2)} {f(vi, 8, 2)} {f(r.inductor_compile_s, 7, 1)} "
              f"{f(r.tessera_compile_s, 7, 1)} {f(r.error, 8, 4)}  {'; '.join(r.notes)[:200]}")


if __name__ == "__main__":
    main()
