"""A test-environment shim for a missing dependency: ``import timm`` without torchvision.

timm imports ``torchvision`` at import time: ``FrozenBatchNorm2d`` from
``torchvision.ops.misc`` (in ``timm.layers`` and ``timm.utils``), and the transforms and
datasets of its data pipeline (``timm.data``, which ``timm.models`` imports for the
ImageNet mean and std constants). No torchvision wheel loads beside a CPU-only torch
here (the ones there are are CUDA builds whose ``_C.so`` needs ``libtorch_cuda``), so
without this shim every timm test would skip.

:func:`import_timm` imports the real torchvision when it loads. Otherwise it puts
stand-in ``torchvision`` modules in ``sys.modules`` for the time of ``import timm`` only,
and takes them out again, so no other code (``transformers``' availability checks, a
later ``import torchvision``) sees them. The stand-ins provide:

* ``torchvision.ops.misc.FrozenBatchNorm2d``: a real frozen batch norm, as torchvision
  defines it: fixed ``weight``, ``bias``, ``running_mean`` and ``running_var`` buffers
  and ``y = (x - running_mean) * rsqrt(running_var + eps) * weight + bias``;
* every other name timm reads from ``torchvision.transforms``,
  ``torchvision.transforms.functional`` and ``torchvision.datasets`` at import time
  (``ToTensor``, ``InterpolationMode.BILINEAR``, ``CIFAR10``, ...): a placeholder class
  that raises ``ImportError`` naming itself when anything instantiates or calls it. The
  model tests build models and never use timm's data pipeline, so nothing reaches one.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
from typing import Any

import torch

_MISSING = "torchvision is not installed: {} is a placeholder of tests/torch/torchvision_shim.py"


class FrozenBatchNorm2d(torch.nn.Module):
    """Batch norm over dim 1 of an NCHW tensor with fixed statistics and affine
    parameters (buffers, not parameters: nothing is trained), as in
    ``torchvision.ops.misc``."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        # a checkpoint of a trained BatchNorm2d also has num_batches_tracked
        state_dict.pop(prefix + "num_batches_tracked", None)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight.reshape(1, -1, 1, 1)
        b = self.bias.reshape(1, -1, 1, 1)
        rv = self.running_var.reshape(1, -1, 1, 1)
        rm = self.running_mean.reshape(1, -1, 1, 1)
        scale = w * (rv + self.eps).rsqrt()
        return x * scale + (b - rm * scale)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class _Placeholder(type):
    """The metaclass of placeholders: reading an attribute gives another placeholder
    (``InterpolationMode.BILINEAR``), calling one raises (so does instantiating a
    subclass, such as timm's ``MaybeToTensor(transforms.ToTensor)``)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise ImportError(_MISSING.format(cls.__qualname__))


_PLACEHOLDERS: dict[str, type] = {}


def _placeholder(qualname: str) -> type:
    if qualname not in _PLACEHOLDERS:
        _PLACEHOLDERS[qualname] = _Placeholder(qualname.rsplit(".", 1)[-1], (), {
            "__qualname__": qualname, "__module__": "torchvision"})
    return _PLACEHOLDERS[qualname]


def _module(name: str, placeholders: bool) -> types.ModuleType:
    mod = types.ModuleType(name, "test shim: " + __doc__.splitlines()[0])
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    mod.__path__ = []  # a package: its submodules come from sys.modules only
    if placeholders:
        def __getattr__(attr: str) -> Any:  # noqa: N807 - PEP 562 module attribute hook
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _placeholder(f"{name}.{attr}")

        mod.__getattr__ = __getattr__
    return mod


def _shim_modules() -> dict[str, types.ModuleType]:
    mods = {name: _module(name, placeholders)
            for name, placeholders in [
                ("torchvision", False), ("torchvision.ops", False),
                ("torchvision.ops.misc", False), ("torchvision.transforms", True),
                ("torchvision.transforms.functional", True), ("torchvision.datasets", True)]}
    mods["torchvision.ops.misc"].FrozenBatchNorm2d = FrozenBatchNorm2d
    for name, mod in mods.items():
        if "." in name:
            parent, child = name.rsplit(".", 1)
            setattr(mods[parent], child, mod)
    return mods


def _torchvision_loads() -> bool:
    try:
        importlib.import_module("torchvision.ops.misc")
        return True
    except Exception:  # noqa: BLE001 - a CUDA build raises OSError/RuntimeError, not ImportError
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]  # what a failed import left half-initialized
        return False


def import_timm() -> types.ModuleType:
    """``import timm``, with the stand-in torchvision modules while it imports when the
    real torchvision does not load. Raises ``ImportError`` when timm is not installed."""
    if "timm" in sys.modules or _torchvision_loads():
        return importlib.import_module("timm")
    mods = _shim_modules()
    sys.modules.update(mods)
    try:
        return importlib.import_module("timm")
    except BaseException:
        for name in [n for n in sys.modules if n == "timm" or n.startswith("timm.")]:
            del sys.modules[name]
        raise
    finally:
        for name in mods:
            sys.modules.pop(name, None)
