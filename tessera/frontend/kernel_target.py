"""From a compiled tile kernel to Target IR, PTX and a GPU launch.

The lowering itself belongs to ``tessera.passes.lower_tile_to_target`` and
``tessera.passes.emit_ptx``; this module only connects a
:class:`~tessera.frontend.kernel.CompiledKernel` to them and to the CUDA
runtime (``tessera.runtime.cuda``), raising a clear ``NotImplementedError``
when a piece is not available.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

if TYPE_CHECKING:
    from tessera.frontend.kernel import BoundCall, CompiledKernel


def _optional(module: str, what: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise NotImplementedError(f"{what} is not available ({module}: {e})") from None


def lower_to_target(module: ModuleOp) -> ModuleOp:
    """A copy of ``module`` with its ``ttile.kernel`` lowered to ``ttarget.func``."""
    lowering = _optional("tessera.passes.lower_tile_to_target", "the Tile IR -> PTX lowering")
    out = module.clone()
    lowering.LowerTileToTargetPass().apply(Context(allow_unregistered=True), out)
    return out


def lower_to_ptx(module: ModuleOp) -> str:
    """PTX text for the kernels of a Tile IR module."""
    emit = _optional("tessera.passes.emit_ptx", "PTX emission")
    return emit.emit_ptx(lower_to_target(module))


def launch_gpu(ck: CompiledKernel, call: BoundCall, grid: tuple[int, int, int]) -> Any:
    """Run a specialization on CUDA torch tensors through ``tessera.runtime.cuda``."""
    cuda = _optional("tessera.runtime.cuda", "the CUDA runtime")
    launch = getattr(cuda, "launch_tile_kernel", None)
    if launch is None:
        raise NotImplementedError(
            "tessera.runtime.cuda has no launch_tile_kernel(ptx, name, args, grid, group_size)"
        )
    import torch

    from tessera.frontend.kernel import kernel_args

    ptx = lower_to_ptx(ck.module)
    ret_holder: dict[str, Any] = {}

    def to_dev(name: str, v: Any) -> Any:
        return v

    args, ret = kernel_args(ck, call, grid, to_dev)
    if ret is not None:
        dev = next(v.device for v in call.values.values() if hasattr(v, "device"))
        t = torch.from_numpy(ret).to(dev)
        args[-1] = t  # the hidden return buffer is the last kernel argument
        ret_holder["t"] = t
    launch(ptx, ck.name, args, grid, ck.group_size)
    if "t" not in ret_holder:
        return None
    out = ret_holder["t"]
    return out[0] if out.numel() == 1 else out
