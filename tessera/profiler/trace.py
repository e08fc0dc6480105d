"""Chrome trace / Perfetto JSON for a profile.

The file is the Trace Event Format's JSON object form: ``{"traceEvents": [...],
"displayTimeUnit": "ms", "otherData": {...}}``. Each recorded event is a
complete event (``"ph": "X"``) with ``ts`` and ``dur`` in microseconds from the
start of the session, the process id as ``pid`` and one ``tid`` per track
(compile passes, CPU reference ops, GPU kernels, collectives), named with
``thread_name`` metadata events. ``args`` carry the function, the FLOPs and
bytes from the IR, and the achieved rates.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TRACKS: dict[str, tuple[int, str]] = {
    "compile": (1, "compile (stages)"),
    "pass": (2, "compile (passes)"),
    "op": (4, "CPU reference: ops"),
    "kernel": (5, "GPU kernels"),
    "collective": (6, "collectives"),
}
"""Event category -> (tid, track name)."""


def trace_events(events: Iterable[Any], pid: int | None = None) -> list[dict[str, Any]]:
    """Trace events (metadata first) for session events (:class:`tessera.profiler.session.Event`)."""
    pid = os.getpid() if pid is None else pid
    out: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "tessera"}}
    ]
    for tid, label in TRACKS.values():
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"name": label}})
    for e in events:
        tid = TRACKS.get(e.category, (9, e.category))[0]
        args: dict[str, Any] = {"function": e.function, "device": e.device}
        if e.flops is not None:
            args["flops"] = e.flops
        if e.bytes is not None:
            args["bytes"] = e.bytes
        if e.dur_us > 0 and e.flops:
            args["gflops_per_s"] = e.flops / e.dur_us / 1e3
        if e.dur_us > 0 and e.bytes:
            args["gbytes_per_s"] = e.bytes / e.dur_us / 1e3
        args.update(e.args)
        out.append({
            "name": e.name, "cat": e.category, "ph": "X", "ts": e.start_us, "dur": e.dur_us,
            "pid": pid, "tid": tid, "args": args,
        })
    return out


def write_chrome_trace(path: str | os.PathLike[str], events: Iterable[Any],
                       meta: dict[str, Any] | None = None) -> Path:
    """Write the trace JSON to ``path``; return the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    doc = {"traceEvents": trace_events(events), "displayTimeUnit": "ms",
           "otherData": dict(meta or {})}
    p.write_text(json.dumps(doc, indent=1))
    return p
