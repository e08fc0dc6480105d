"""Run a sharded Graph IR program: one process per rank, the numpy interpreter per rank.

``run_spmd(module, name, args, mesh)`` is called by every rank of a process group
with the *global* arguments (numpy arrays or :class:`DistTensor`). It partitions
the function (``spmd-partition``) if it is not per-rank yet, creates the mesh's
process groups (all ranks together, before any collective), gives the rank the
block of each argument that its ``tessera.shard`` layout names, runs the per-rank
program with the reference interpreter and collectives over torch.distributed,
and returns this rank's results (replicated results are the global values; a
result of a pipeline stage this rank does not run is ``None``).

``run_local`` runs an already per-rank program on per-rank arguments.
``run_compiled`` runs the per-rank program as compiled segments between its
collectives (numpy interpreter per segment on CPU, PTX on CUDA). ``run_lowered``
lowers the whole per-rank program, collectives included, to one Tile IR host
function and runs it (Tile IR interpreter on CPU, PTX on CUDA).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp

from tessera.dist.mesh import Mesh, MeshError, require_gpus
from tessera.dist.sharding import shard
from tessera.dist.tensor import DistTensor
from tessera.ir.attrs import MeshAttr, ShardSpecAttr
from tessera.passes.shard_propagation import SHARD, STAGE, has_user_collectives
from tessera.passes.spmd_partition import SPMD, partition_function


def _find(module: ModuleOp, name: str) -> func.FuncOp:
    for op in module.walk():
        if isinstance(op, func.FuncOp) and op.sym_name.data == name:
            return op
    names = [op.sym_name.data for op in module.walk() if isinstance(op, func.FuncOp)]
    raise KeyError(f"no function '{name}' in the module (functions: {', '.join(names)})")


def _check_mesh(fn: func.FuncOp, mesh: Mesh) -> None:
    m = fn.attributes.get("tessera.mesh")
    if not isinstance(m, MeshAttr):
        raise MeshError(f"@{fn.sym_name.data}: has no tessera.mesh attribute")
    if m.as_dict() != dict(zip(mesh.axes, mesh.shape)):
        raise MeshError(
            f"@{fn.sym_name.data}: its mesh {m} differs from the runtime mesh {mesh!r}"
        )


def partitioned(module: ModuleOp, name: str) -> ModuleOp:
    """A copy of ``module`` whose function ``name`` is the per-rank program."""
    mod = module.clone()
    partition_function(_find(mod, name))
    mod.verify()
    return mod


def run_local(
    module: ModuleOp, name: str, args: Sequence[Any], mesh: Mesh, stage_axis: str = "pp"
) -> list[np.ndarray | None]:
    """Run per-rank function ``name`` on this rank's arguments."""
    from tessera.dist.interpreter import make_interpreter
    from tessera.runtime.graph_interpreter import check_arguments

    fn = _find(module, name)
    _check_mesh(fn, mesh)
    rank = mesh.check_world()
    mesh.device_mesh()
    coords = mesh.coords(rank)
    arrays = check_arguments(fn, args)
    interp = make_interpreter(module, mesh)
    env: dict[Any, Any] = dict(zip(fn.body.block.args, arrays))
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp):
            return [None if v not in env else np.asarray(env[v]) for v in op.operands]
        st = op.attributes.get(STAGE)
        if (
            isinstance(st, IntegerAttr) and stage_axis in coords
            and coords[stage_axis] != st.value.data
        ):
            continue
        outs = interp.run_op(op, tuple(env[v] for v in op.operands))
        env.update(zip(op.results, outs))
    return []


def local_args(
    fn: func.FuncOp, args: Sequence[Any], mesh: Mesh, rank: int
) -> list[np.ndarray]:
    """This rank's block of each global argument, per the arguments' ``tessera.shard``."""
    out = []
    for i, a in enumerate(args):
        attrs = fn.arg_attrs.data[i].data if fn.arg_attrs and i < len(fn.arg_attrs.data) else {}
        layout = attrs.get(SHARD)
        if isinstance(a, DistTensor):
            a = a.shard(rank) if layout is None or a.layout.to_attr(a.ndim) == layout else \
                shard(a.numpy(), layout, mesh, rank)
            out.append(a)
            continue
        a = np.asarray(a)
        out.append(shard(a, layout, mesh, rank) if isinstance(layout, ShardSpecAttr) else a)
    return out


def run_spmd(
    module: ModuleOp, name: str, args: Sequence[Any], mesh: Mesh, stage_axis: str = "pp"
) -> list[np.ndarray | None]:
    """Partition (if needed) and run function ``name`` on this rank; see the module doc.

    For a global-view function ``args`` are global values; for a per-rank function
    (one with collectives, or already partitioned) they are this rank's blocks.
    """
    fn = _find(module, name)
    _check_mesh(fn, mesh)
    rank = mesh.check_world()
    if SPMD in fn.attributes:
        return run_local(module, name, args, mesh, stage_axis)
    mod = partitioned(module, name)
    if has_user_collectives(fn):
        return run_local(mod, name, args, mesh, stage_axis)
    return run_local(mod, name, local_args(fn, args, mesh, rank), mesh, stage_axis)


def run_compiled(
    module: ModuleOp, name: str, args: Sequence[Any], mesh: Mesh, device: str | None = None,
    stage_axis: str = "pp", overlap: bool = True,
) -> list[Any]:
    """Like :func:`run_spmd`, with compiled segments (:mod:`tessera.dist.segments`).

    The per-rank function is split at its collectives; each segment goes through the
    graph pipeline and runs on the numpy interpreter (``device="cpu"``) or as PTX on
    this rank's GPU (``device="cuda"``, arguments moved there; results are torch CUDA
    tensors). ``device`` defaults to the mesh's device type. ``overlap`` runs
    collectives alongside the compute that does not need them
    (:mod:`tessera.dist.overlap`; on CUDA, on a stream of their own); the results are
    bitwise the same without it.
    """
    from tessera.dist.segments import SegmentedProgram

    fn = _find(module, name)
    _check_mesh(fn, mesh)
    rank = mesh.check_world()
    device = device or mesh.device_type
    if SPMD in fn.attributes or has_user_collectives(fn):
        mod, local = partitioned(module, name), list(args)
    else:
        mod, local = partitioned(module, name), local_args(fn, args, mesh, rank)
    if device == "cuda":
        import torch

        from tessera.runtime import convert

        require_gpus(f"@{name} on {mesh!r}")
        dev = torch.device("cuda", torch.cuda.current_device())
        local = [
            a.to(dev) if convert.is_torch_tensor(a) else convert.to_torch(np.asarray(a)).to(dev)
            for a in local
        ]
    return SegmentedProgram(mod, name, mesh, stage_axis, overlap).run(local, device)


def lowered(module: ModuleOp, name: str) -> ModuleOp:
    """The per-rank program of function ``name`` lowered to Tile IR (``lower-graph-to-tile``):
    kernels and one host function whose collectives are host ops (``ttile.all_reduce`` ...)."""
    from xdsl.context import Context

    from tessera.passes.lower_graph_to_tile import LowerGraphToTile

    fn = _find(partitioned(module, name), name).clone()
    mod = ModuleOp([fn])
    LowerGraphToTile().apply(Context(), mod)
    mod.verify()
    return mod


def run_lowered(
    module: ModuleOp, name: str, args: Sequence[Any], mesh: Mesh, device: str | None = None
) -> list[Any]:
    """Like :func:`run_compiled`, with the whole per-rank program lowered as one (see
    :func:`lowered`): on ``"cpu"`` the Tile IR interpreter runs it on numpy arrays, the
    collectives over gloo; on ``"cuda"`` its PTX runs on this rank's GPU through
    :func:`tessera.runtime.cuda.run_host`, the collectives over NCCL, and results are
    torch CUDA tensors. Programs with pipeline stages (``tessera.stage``) are not lowered.
    """
    fn = _find(module, name)
    _check_mesh(fn, mesh)
    rank = mesh.check_world()
    device = device or mesh.device_type
    if device not in ("cpu", "cuda"):
        raise MeshError(f"@{name}: unknown device '{device}' (valid: cpu, cuda)")
    local = list(args) if SPMD in fn.attributes or has_user_collectives(fn) else local_args(
        fn, args, mesh, rank
    )
    tile_module = lowered(module, name)
    mesh.device_mesh()  # every rank creates the process groups before any collective
    if device == "cpu":
        from tessera.runtime.tile_interpreter import run_host

        return list(run_host(tile_module, name, local, mesh=mesh))
    import torch

    from tessera.runtime import convert, cuda

    require_gpus(f"@{name} on {mesh!r}")
    dev = torch.device("cuda", torch.cuda.current_device())
    local = [
        a.to(dev) if convert.is_torch_tensor(a) else convert.to_torch(np.asarray(a)).to(dev)
        for a in local
    ]
    from tessera.passes.pipelines import lower_to_target, to_ptx

    target = lower_to_target(tile_module)
    with mesh:
        return cuda.run_host(target, name, local, ptx=to_ptx(target))


def parse(text: str, name: str = "<string>") -> ModuleOp:
    """Parse and verify Graph IR text (builtin, func, tessera and tgraph dialects)."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin

    from tessera.ir.attrs import Tessera
    from tessera.ir.diagnostics import parse_module
    from tessera.ir.graph import Graph

    ctx = Context()
    for d in (Builtin, func.Func, Tessera, Graph):
        ctx.load_dialect(d)
    return parse_module(ctx, text, name)
