"""PyTorch in, through its own doors.

* ``torch.compile(model, backend="tessera")`` or ``tessera.torch.compile(model)``:
  dynamo + AOTAutograd graphs of core ATen ops, translated to Graph IR where
  Tessera has the operator and run by Tessera (GPU for CUDA tensors, the numpy
  reference interpreter for CPU tensors); the rest runs in eager torch and is
  counted in :func:`last_report`.
* A ``ts.jit`` function called with tensors that require grad is a
  ``torch.autograd.Function`` (:mod:`tessera.torch.autograd`) whose backward is
  the program ``ts.grad`` builds.

The package is ``tessera.torch``; inside it, ``import torch`` is PyTorch
(absolute imports).
"""

from __future__ import annotations

from tessera.torch.autograd import JitFunction, call_differentiable
from tessera.torch.backend import DECOMPOSITIONS, backend, compile
from tessera.torch.report import GraphReport, Report, last_report, reset

BACKEND_NAME = "tessera"


def _register() -> None:
    """Register the backend under ``"tessera"`` unless torch will load it from the
    ``torch_dynamo_backends`` entry point of the installed package."""
    from importlib.metadata import entry_points

    from torch._dynamo.backends import registry

    if BACKEND_NAME in registry._COMPILER_FNS:
        return
    if BACKEND_NAME in entry_points(group="torch_dynamo_backends").names:
        return
    registry.register_backend(backend, name=BACKEND_NAME)


_register()

__all__ = [
    "backend", "compile", "last_report", "reset", "Report", "GraphReport", "JitFunction",
    "call_differentiable", "DECOMPOSITIONS", "BACKEND_NAME",
]
