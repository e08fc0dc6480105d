"""From a compiled tile kernel to Target IR, PTX and a GPU launch.

The lowering goes through the compiler driver (:mod:`tessera.compiler`: the
``target`` and ``ptx`` stages, under the options of
:func:`tessera.compiler.resolve_options`); this module only connects a
:class:`~tessera.frontend.kernel.CompiledKernel` to it and to the CUDA runtime
(``tessera.runtime.cuda``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import ModuleOp

from tessera import compiler

if TYPE_CHECKING:
    from tessera.frontend.kernel import BoundCall, CompiledKernel


def lower_to_target(module: ModuleOp) -> ModuleOp:
    """A copy of ``module`` with its ``ttile.kernel`` lowered to ``ttarget.func``."""
    return compiler.lower(module, "target")


def lower_to_ptx(module: ModuleOp) -> str:
    """PTX text for the kernels of a Tile IR module."""
    return compiler.lower(lower_to_target(module), "ptx")


def launch_gpu(ck: CompiledKernel, call: BoundCall, grid: tuple[int, int, int]) -> Any:
    """Run a specialization on CUDA torch tensors (``tessera.runtime.cuda``).

    ``ck`` is shape-generic (symbolic dims are ``?`` memref dims whose sizes are
    ``index`` parameters), so its PTX is built and loaded once per device and
    serves every size. Tensors are updated in place (a non-contiguous or
    misaligned tensor runs on a copy that is copied back); the loaded module
    is kept on ``ck``.
    """
    import torch
    from xdsl.dialects.builtin import MemRefType

    from tessera.frontend.kernel import kernel_args
    from tessera.ir import target as tt
    from tessera.runtime import cuda

    device = next(v.device for v in call.values.values() if isinstance(v, torch.Tensor))
    loaded = getattr(ck, "_gpu", None)
    if loaded is None or loaded[0] != device.index:
        target = lower_to_target(ck.module)
        ptx = compiler.lower(target, "ptx")
        func = next(
            op for op in target.walk() if isinstance(op, tt.FuncOp) and op.sym_name.data == ck.name
        )
        with torch.cuda.device(device):
            module = cuda.load_module(ptx, device.index)
            loaded = (device.index, func, cuda.get_function(module, ck.name), module)
        ck._gpu = loaded  # type: ignore[attr-defined]
    _, func, function, _ = loaded

    def to_dev(name: str, v: Any) -> Any:
        return v

    args, ret = kernel_args(ck, call, grid, to_dev)
    out_ret = None
    if ret is not None:
        out_ret = torch.from_numpy(ret).to(device)
        args[-1] = out_ret  # the hidden return buffer is the last kernel argument
    values: list[Any] = []
    copies: list[tuple[Any, Any]] = []
    for k, (a, t) in enumerate(zip(args, ck.layout.types)):
        if isinstance(t, MemRefType):
            c = cuda.check_tensor(a, t, f"kernel '{ck.name}' argument {k}", device.index)
            if c is not a:
                copies.append((a, c))
            values.append(c)
        else:
            values.append(a.item() if hasattr(a, "item") else a)
    with torch.cuda.device(device):
        cuda.launch(function, func, grid, values)
    for orig, c in copies:
        orig.copy_(c)
    if out_ret is None:
        return None
    return out_ret[0] if out_ret.numel() == 1 else out_ret
