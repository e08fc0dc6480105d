"""Moving tensors between torch and numpy on the CPU reference path.

Formats numpy lacks (bf16, fp8) travel as ``ml_dtypes`` arrays; they are
reinterpreted bit for bit to and from torch's ``bfloat16`` / ``float8_*``.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from tessera.errors import TesseraTypeError

# numpy (ml_dtypes) dtype name -> (torch dtype name, same-width integer view)
_BIT_VIEWS: dict[str, tuple[str, Any, str]] = {
    "bfloat16": ("bfloat16", np.int16, "int16"),
    "float8_e4m3fn": ("float8_e4m3fn", np.uint8, "uint8"),
    "float8_e5m2": ("float8_e5m2", np.uint8, "uint8"),
}


def is_torch_tensor(x: Any) -> bool:
    """True for a ``torch.Tensor`` (without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def is_cuda_tensor(x: Any) -> bool:
    return is_torch_tensor(x) and getattr(x.device, "type", "cpu") != "cpu"


def to_numpy(x: Any, where: str = "argument") -> np.ndarray:
    """A numpy view/copy of a numpy array or CPU torch tensor (bf16/fp8 via ml_dtypes)."""
    if isinstance(x, np.ndarray):
        return x
    if is_torch_tensor(x):
        import torch

        if is_cuda_tensor(x):
            raise NotImplementedError(f"{where}: a {x.device} tensor needs the GPU path")
        t = x.detach().contiguous()
        name = str(t.dtype).removeprefix("torch.")
        for np_name, (torch_name, _, int_name) in _BIT_VIEWS.items():
            if name == torch_name:
                return t.view(getattr(torch, int_name)).numpy().view(getattr(ml_dtypes, np_name))
        return t.numpy()
    if isinstance(x, np.generic):
        return np.asarray(x)
    raise TesseraTypeError(
        f"{where}: expected a numpy array or a torch tensor, got {type(x).__name__}"
    )


def to_torch(a: np.ndarray) -> Any:
    """A CPU torch tensor with the same values (bf16/fp8 bit for bit)."""
    import torch

    a = np.ascontiguousarray(a)
    name = a.dtype.name
    if name in _BIT_VIEWS:
        torch_name, int_np, int_name = _BIT_VIEWS[name]
        t = torch.from_numpy(a.view(int_np).copy())
        return t.view(getattr(torch, torch_name))
    if a.dtype.kind in "biufc" and a.dtype.itemsize <= 16 and a.dtype.type.__module__ == "numpy":
        return torch.from_numpy(a.copy())
    raise TesseraTypeError(
        f"torch has no dtype for {a.dtype}; call the function with numpy arrays to get "
        "this result as an ml_dtypes array"
    )
