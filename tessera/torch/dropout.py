"""Dropout and Bernoulli masks as a random draw that reads no data, and elementwise ops.

``nn.Dropout`` in training reaches AOTAutograd as ``aten.native_dropout(x, p, train)``,
and ``nn.Dropout2d`` or a drop-path (timm's ``x.new_empty(shape).bernoulli_(keep)``) as
``aten.bernoulli.p``. Neither has a Tessera rule, and since each reads a value that a
partition computes, left to torch it would split the partitions around it. The
decompositions here (in :data:`tessera.torch.backend.DECOMPOSITIONS`) write each as

* ``aten.rand(sizes, dtype=float32)``: the uniform draw, by torch's generator (so
  ``torch.manual_seed`` reproduces it and every call draws anew). Its operands are
  sizes only (graph inputs when symbolic), never a tensor, so it depends on no
  partition and the partitioner merges the partitions around it;
* the keep mask ``rand < 1 - p`` (``rand < p`` for a Bernoulli draw) and the scaled
  product ``x * mask * (1 / (1 - p))``, which Tessera translates.

The backward of ``native_dropout`` is ``native_dropout_backward(grad, mask, scale)``:
``grad * mask * scale``, also translated. 16-bit tensors are scaled in f32 and rounded
once, as torch's kernels do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

RANDOM_DRAWS = frozenset({aten.rand.default, aten.rand.generator, aten.randn.default,
                          aten.randn.generator, aten.bernoulli.p, aten.bernoulli.Tensor,
                          aten.bernoulli.default, aten.native_dropout.default})
"""Random ops left to torch: Tessera has no random numbers of torch's generator."""


def _opmath(dt: torch.dtype) -> torch.dtype:
    """The dtype torch scales a tensor of ``dt`` in (f32 for 16-bit floats)."""
    return torch.float32 if dt in (torch.float16, torch.bfloat16) else dt


def _uniform(x: torch.Tensor) -> torch.Tensor:
    """A float32 uniform draw in ``[0, 1)`` of ``x``'s sizes on ``x``'s device: only the
    sizes are read (symbolic ones are graph inputs), never ``x``'s values."""
    return torch.rand(x.shape, dtype=torch.float32, device=x.device)


def native_dropout(x: torch.Tensor, p: float, train: bool | None) -> tuple[torch.Tensor,
                                                                            torch.Tensor]:
    """``aten.native_dropout``: ``(x * mask / (1 - p), mask)`` with ``mask`` true with
    probability ``1 - p`` (torch's ``bernoulli(1 - p)``). ``train`` None counts as true,
    as in torch's kernels; not training or ``p == 0``: ``x`` and an all-true mask;
    ``p == 1``: zeros and an all-false mask."""
    if (train is not None and not train) or p == 0:
        return x.clone(), torch.ones(x.shape, dtype=torch.bool, device=x.device)
    if p == 1:
        return (torch.zeros(x.shape, dtype=x.dtype, device=x.device),
                torch.zeros(x.shape, dtype=torch.bool, device=x.device))
    if not x.dtype.is_floating_point:
        raise RuntimeError("result type Float can't be cast to the desired output type "
                           f"{x.dtype}")
    mask = _uniform(x) < 1 - p
    out = x.to(_opmath(x.dtype)) * mask * (1.0 / (1.0 - p))
    return out.to(x.dtype), mask


def native_dropout_backward(grad: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """``aten.native_dropout_backward``: ``grad * mask * scale``, 16-bit in f32; in the
    dtype torch promotes ``grad`` and the float ``scale`` to (integer and bool ``grad``
    give the default float dtype)."""
    out = torch.result_type(grad, scale)
    return (grad.to(_opmath(out)) * mask * scale).to(out)


def bernoulli_p(x: torch.Tensor, p: Any = 0.5, *, generator: Any = None) -> Any:
    """``aten.bernoulli.p`` / ``aten.bernoulli.Tensor`` (``x.bernoulli_(p)`` after
    functionalization): ones with probability ``p``, in ``x``'s dtype and sizes; ``x``'s
    values are not read. A tensor ``p`` is broadcast to ``x``'s sizes. With a generator
    of its own: torch's op."""
    if generator is not None:
        return NotImplemented
    return (_uniform(x) < p).to(x.dtype)


DROPOUT_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    aten.native_dropout.default: native_dropout,
    aten.native_dropout_backward.default: native_dropout_backward,
    aten.bernoulli.p: bernoulli_p,
    aten.bernoulli.Tensor: bernoulli_p,
}
"""The decompositions of this module, for :data:`tessera.torch.backend.DECOMPOSITIONS`."""

__all__ = ["DROPOUT_DECOMPOSITIONS", "RANDOM_DRAWS", "native_dropout", "native_dropout_backward",
           "bernoulli_p"]
