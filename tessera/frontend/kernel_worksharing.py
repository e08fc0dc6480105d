"""Work-sharing ``ts.tile.range`` loops and ``prefetch=`` pipelining in ``@ts.kernel``.

The programming-model guide's ``process_chunks`` reads::

    for chunk_start in ts.tile.range(0, N, CHUNK_SIZE):    # each tile group: a chunk
        chunk_end = min(chunk_start + CHUNK_SIZE, N)
        for i in ts.tile.range(chunk_start, chunk_end):    # cooperative, within the group
            output[i] = process(input[i])

so a ``ts.tile.range`` shares its iterations out instead of running all of them on
every lane. A loop is **shared** when its iterations are independent of each other
and of which lane runs them:

* it carries no values (nothing assigned in the body is used after an iteration),
  its bounds and step do not depend on the lane (``local_id``, ``linear_id``,
  ``lane_id``, ``warp_id``), it has no ``break``, no ``prefetch=``, and
* its body synchronizes nothing: no barrier, async copy (``cp_async``, groups), warp
  shuffle or reduction, shared allocation or ``mma`` (found in the built IR, so
  inlined helpers count too), and
* it is not inside an ``if`` / ``while`` / per-lane loop whose lanes may diverge.

Where it sits decides how: a shared loop at the top of the kernel whose body holds
another ``ts.tile.range`` is split across **tiles** (tile ``t`` of ``T`` runs
iterations ``t, t + T, ...``); a shared loop directly inside such a tile loop is split
across the **lanes** of the group (lane ``l`` of ``G``: ``l, l + G, ...``); a shared
loop at the top without a nested one is split across **all lanes of the grid**
(``linear_id``). The split rewrites the loop's lower bound to ``lo + k * step`` and
its step to ``step * count``. A kernel with a split loop gets the default grid of
``linear_id`` kernels (``ceil(D / group_size)`` tiles; docs/KERNELS.md). Loops that
are not shared run every iteration on every lane, as ``range`` does. As in OpenMP's
``for``, a body whose iterations depend on each other through memory (a running
prefix written and read back) must use ``range``, not ``ts.tile.range``.

``prefetch=n`` (``n >= 2``) pipelines the loop's async copies ``n`` deep: in a kernel
whose groups are implicit (no ``cp_commit_group``), a barrier in the body waits with
``cp.async.wait_group n-1`` instead of ``0``, so the copies issued in the latest
``n - 1`` iterations stay in flight while the body computes on buffers filled
earlier, and the loop is followed by a ``wait_group 0``. The body must only read
buffers copied ``n - 1`` or more iterations before (the guide's double buffer:
``prefetch=2``, copy into ``s1``, compute on ``s0``, swap). ``prefetch=0`` and ``1``
wait for every copy, as without ``prefetch``.
"""

from __future__ import annotations

import ast
from typing import Any

from xdsl.dialects import arith, scf
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

from tessera.ir import tile as ttile

LANE_DEPENDENT = (ttile.LocalIdOp, ttile.LinearIdOp, ttile.LaneIdOp, ttile.WarpIdOp)
"""Ops whose value differs between the lanes of a tile."""

SYNC_OPS = (
    ttile.BarrierOp, ttile.CopyAsyncOp, ttile.CommitGroupOp, ttile.WaitGroupOp,
    ttile.ShuffleXorOp, ttile.ReduceOp, ttile.AllocSharedOp, ttile.MmaOp,
)
"""Ops that make a loop body cooperative: such a loop is never shared."""


def lane_dependent(v: SSAValue, uniform: set[Any] = frozenset(),  # noqa: B006
                   seen: set[int] | None = None) -> bool:
    """Whether ``v`` may differ between the lanes of one tile; ``uniform`` holds loop
    induction variables known to be the same on every lane (their loop is being built,
    so its bounds cannot be looked up yet)."""
    seen = set() if seen is None else seen
    if id(v) in seen:
        return False
    seen.add(id(v))
    if v in uniform:
        return False
    if isinstance(v, BlockArgument):
        owner = v.block.parent_op()
        if isinstance(owner, scf.ForOp):
            if v.index != 0:
                return True  # a carried value
            return any(lane_dependent(o, uniform, seen) for o in (owner.lb, owner.step))
        return not isinstance(owner, ttile.KernelOp)  # kernel parameters are uniform
    op = v.owner
    if isinstance(op, LANE_DEPENDENT):
        return True
    if isinstance(op, ttile.LoadOp | ttile.LoadVectorOp):
        return True  # memory may hold anything
    return any(lane_dependent(o, uniform, seen) for o in op.operands)


def _is_tile_range(call: ast.expr) -> bool:
    if not isinstance(call, ast.Call):
        return False
    f = call.func
    return isinstance(f, ast.Attribute) and f.attr == "range" and (
        (isinstance(f.value, ast.Attribute) and f.value.attr == "tile")
        or (isinstance(f.value, ast.Name) and f.value.id == "tile")
    )


def has_nested_tile_range(stmts: list[ast.stmt]) -> bool:
    """Whether ``stmts`` hold a ``for ... in ts.tile.range(...)`` loop."""
    return any(
        isinstance(n, ast.For) and _is_tile_range(n.iter)
        for s in stmts for n in ast.walk(s)
    )


def has_break(stmts: list[ast.stmt]) -> bool:
    """A ``break`` of this loop (not of a nested one)."""
    todo: list[ast.AST] = list(stmts)
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Break):
            return True
        if isinstance(n, ast.For | ast.While | ast.FunctionDef):
            continue
        todo.extend(ast.iter_child_nodes(n))
    return False


def syncs(block: Block) -> bool:
    """Whether the IR of a loop body holds a cooperative op."""
    return any(isinstance(o, SYNC_OPS) for op in block.ops for o in op.walk())


class SplitLoop:
    """The split bounds of one shared loop: emitted before it, dropped if it is not."""

    def __init__(self, em: Any, lo: Any, st: Any, level: str):
        self.em = em
        self.level = level
        self.lo = em.index(lo)
        self.st = em.index(st)
        self.had_linear = "linear_id" in em.used_lane_ops
        idx, cnt = {
            "tile": ("tile_id", "num_tiles"), "lane": ("local_id", "group_size"),
            "grid": ("linear_id", None),
        }[level]
        k = em.lane(idx).ssa
        if cnt is None:
            n = arith.MuliOp(em.lane("group_size").ssa, em.lane("num_tiles").ssa)
            self.ops: list[Operation] = [n]
            count = n.result
        else:
            self.ops = []
            count = em.lane(cnt).ssa
        off = arith.MuliOp(k, self.st.ssa)
        lo2 = arith.AddiOp(self.lo.ssa, off.result)
        st2 = arith.MuliOp(self.st.ssa, count)
        self.ops += [off, lo2, st2]
        for o in self.ops:
            em.emit(o)
        self.new_lo, self.new_st = lo2.result, st2.result

    def keep_or_drop(self, loop: scf.ForOp) -> bool:
        """Keep the split if ``loop``'s body is not cooperative and carries nothing, else
        give it its own bounds back. Returns whether the loop is shared."""
        if not syncs(loop.body.block) and not loop.iter_args:
            self.em.used_lane_ops.add("work_shared")
            loop.attributes["tessera.shared_by"] = _level_attr(self.level)
            return True
        loop.operands = [self.lo.ssa, loop.ub, self.st.ssa, *loop.iter_args]
        for o in reversed(self.ops):
            o.detach()
            o.erase()
        if self.level == "grid" and not self.had_linear:
            self.em.used_lane_ops.discard("linear_id")
        return False


def _level_attr(level: str) -> Any:
    from xdsl.dialects.builtin import StringAttr

    return StringAttr({"tile": "tiles", "lane": "lanes", "grid": "grid"}[level])
