"""The text tables of a profile (``prof.table()``)."""

from __future__ import annotations

from typing import Any

from tessera.profiler.session import Row


def _num(x: float | None, fmt: str) -> str:
    if x is None:
        return "-"
    return "0" if x == 0 else format(x, fmt)


def _grid(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    """Columns padded to their widest cell; the first ``left`` columns left-aligned."""
    widths = [max(len(c) for c in col) for col in zip(header, *rows)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def _work_table(rows: list[Row], what: str) -> str:
    total = sum(r.total_us for r in rows) or 1.0
    body = []
    for r in rows:
        body.append([
            r.label, r.function, str(r.calls), f"{r.total_us / 1e3:.3f}", f"{r.mean_us:.1f}",
            f"{100 * r.total_us / total:.1f}",
            _num(r.flops / 1e6 if r.flops is not None else None, ".3f"),
            _num(r.bytes / 1e3 if r.bytes is not None else None, ".1f"),
            _num(r.gflops_per_s, ".3f"), _num(r.gbytes_per_s, ".3f"),
        ])
    flops = [r.flops for r in rows]
    nbytes = [r.bytes for r in rows]
    body.append([
        "total", "", str(sum(r.calls for r in rows)), f"{total / 1e3:.3f}", "", "100.0",
        _num(sum(flops) / 1e6 if None not in flops else None, ".3f"),
        _num(sum(nbytes) / 1e3 if None not in nbytes else None, ".1f"), "", "",
    ])
    header = [what, "function", "calls", "total ms", "mean us", "%", "MFLOP", "KB",
              "GFLOP/s", "GB/s"]
    return _grid(header, body, left=2)


def format_table(prof: Any) -> str:
    """All sections of the profile that have events."""
    parts: list[str] = []
    started = prof.started.strftime("%Y-%m-%d %H:%M:%S UTC") if prof.started else "-"
    parts.append(f"Tessera profile (session started {started})")
    kernels = prof.rows("kernel")
    if kernels:
        device = sorted({e.device for e in prof.events if e.category == "kernel"})
        parts.append(f"\nGPU kernels ({', '.join(device)}; CUDA event times; FLOPs/bytes "
                     "from the IR)")
        parts.append(_work_table(kernels, "kernel"))
    ops = prof.rows("op")
    if ops:
        parts.append("\nCPU reference ops (numpy interpreter, wall time; FLOPs/bytes from the IR)")
        parts.append(_work_table(ops, "op"))
    coll = prof.rows("collective")
    if coll:
        parts.append("\nCollectives (latency; payload bytes per rank)")
        parts.append(_grid(["collective", "device", "calls", "total ms", "mean us", "KB",
                            "GB/s"], [
            [r.name, next(e.device for e in prof.events if e.category == "collective"
                          and e.name == r.name), str(r.calls), f"{r.total_us / 1e3:.3f}",
             f"{r.mean_us:.1f}", _num(r.bytes / 1e3 / r.calls if r.bytes else None, ".1f"),
             _num(r.gbytes_per_s, ".3f")]
            for r in coll
        ]))
    passes = prof.rows("pass")
    stages = prof.rows("compile")
    if passes or stages:
        parts.append("\nCompile (wall time per pass and per stage)")
        body = [[f"pass {r.name}", r.function, str(r.calls), f"{r.total_us / 1e3:.3f}"]
                for r in passes]
        body += [[f"stage {r.name}", r.function, str(r.calls), f"{r.total_us / 1e3:.3f}"]
                 for r in stages]
        parts.append(_grid(["step", "function", "count", "total ms"], body, left=2))
    if len(parts) == 1:
        parts.append("(no events recorded)")
    return "\n".join(parts)
