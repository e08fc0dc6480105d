"""``ts.profiler``: per-op and per-kernel times, achieved bandwidth and FLOP/s,
collective latency, compile time per pass, Chrome traces and roofline plots.

::

    with ts.profiler.session() as prof:
        y = fn(x)
    prof.table()
    prof.export_chrome_trace("trace.json")
    prof.roofline("roofline.png")

See docs/PROFILING.md.
"""

from tessera.profiler.costs import Cost, op_cost
from tessera.profiler.roofline import Ceilings, measure_cpu, measure_gpu
from tessera.profiler.session import Event, Row, Session, active, session

__all__ = [
    "Ceilings", "Cost", "Event", "Row", "Session", "active", "measure_cpu", "measure_gpu",
    "op_cost", "session",
]
