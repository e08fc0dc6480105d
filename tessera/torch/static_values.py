"""Values a trace already determines: a traced tensor computed from constants alone.

A model's attention mask is often built inside the graph from ``arange`` and
comparisons (``transformers`` does so under ``torch.compile``); its values are then
known when the partition is traced. :func:`static_value` evaluates such a tensor with
the reference interpreter (numpy semantics of record), and :func:`mask_kind` says
whether an attention mask is no mask at all or exactly the causal one, so that the
attention rules can use the fused kernels instead of materializing the scores.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.ir import Operation, SSAValue

from tessera.frontend.tracing import TracedTensor
from tessera.passes.algebra_utils import reference_interpreter

MAX_OPS = 64
"""Most ops :func:`static_value` evaluates (masks take about a dozen)."""

MAX_ELEMENTS = 1 << 26
"""Largest intermediate :func:`static_value` computes."""


def static_value(x: TracedTensor) -> np.ndarray | None:
    """``x``'s value if every op it depends on is pure, region-free and fed only by
    constants (no argument of the traced function), else None."""
    interp = reference_interpreter()
    memo: dict[SSAValue, np.ndarray] = {}

    def ev(v: SSAValue) -> np.ndarray | None:
        if v in memo:
            return memo[v]
        op = v.owner
        if not isinstance(op, Operation) or op.regions or len(memo) >= MAX_OPS:
            return None
        args = []
        for o in op.operands:
            a = ev(o)
            if a is None:
                return None
            args.append(a)
        try:
            outs = interp.run_op(op, tuple(args))
        except Exception:  # an op the interpreter cannot evaluate on its own
            return None
        for r, out in zip(op.results, outs):
            arr = np.asarray(out)
            if arr.size > MAX_ELEMENTS:
                return None
            memo[r] = arr
        return memo[v]

    return ev(x.value)


MASKED = -65504.0
"""An additive mask value at or below this (float16's lowest; ``transformers`` writes the
dtype's ``finfo.min``, ``-inf`` is the other common choice) removes its score: ``exp`` of
any score of magnitude below ~65000 plus it is exactly 0 in f32, as a fused kernel's
skipped key is. (Only a row with every key masked would differ, and a causal mask has
none.)"""


def mask_kind(mask: Any, sq: int, sk: int) -> str | None:
    """``"none"`` when attention mask ``mask`` (bool: keep where True; float: added to
    the scores, 0 or at most :data:`MASKED`) keeps every score unchanged, ``"causal"`` when it is exactly the causal
    mask (key ``j <= i`` for query ``i``, top-left aligned) for every batch and head,
    None when it is anything else or not known at trace time."""
    if not isinstance(mask, TracedTensor):
        return None
    arr = static_value(mask)
    return None if arr is None else classify_mask(arr, sq, sk)


def classify_mask(arr: np.ndarray, sq: int, sk: int) -> str | None:
    """:func:`mask_kind` of a mask's values."""
    if arr.ndim < 2:
        return None
    if arr.dtype == np.bool_:
        keep = arr
    else:
        a = arr.astype(np.float64)
        masked = a <= MASKED
        if not np.all((a == 0) | masked):
            return None
        keep = ~masked
    try:
        keep = np.broadcast_to(keep, (*keep.shape[:-2], sq, sk))
    except ValueError:
        return None
    if keep.all():
        return "none"
    tril = np.arange(sq)[:, None] >= np.arange(sk)[None, :]
    if (keep == tril).all():
        return "causal"
    return None


__all__ = ["static_value", "mask_kind", "classify_mask", "MASKED", "MAX_OPS", "MAX_ELEMENTS"]
