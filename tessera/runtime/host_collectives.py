"""Execution of the host-side collectives of lowered programs.

The Tile IR interpreter (``ttile.all_reduce`` ...) and the CUDA host-program runner
(``ttarget.all_reduce`` ...) both call :func:`run_host_collective`, which runs the
deterministic collectives of :mod:`tessera.dist.collectives` over torch.distributed
on the process group of the op's mesh axis: numpy arrays through gloo on the
interpreter, torch CUDA tensors through NCCL on the GPU.

The mesh is, in order: the ``mesh`` passed by the caller, the one entered with
``with mesh:``, or one built from the host function's ``tessera.mesh`` attribute
(rank ``i`` = device ``i``). A mesh whose axes differ from the ``tessera.mesh``
the program was lowered for is an error. Without a process group, collectives over
an axis of size 1 are the identity and larger axes raise :class:`CollectiveError`
naming the op.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import MemRefType

from tessera.dist import collectives as C
from tessera.dist.collectives import CollectiveError
from tessera.dist.mesh import Mesh, MeshError, current_mesh
from tessera.ir import host_collectives as hc

_MESHES: dict[tuple[tuple[str, int], ...], Mesh] = {}
"""Meshes built from ``tessera.mesh`` attributes, one per shape, so that each creates its
process groups once."""


def mesh_for(op: hc.HostCollectiveOp, mesh: Mesh | None = None) -> Mesh:
    """The runtime mesh of ``op`` (see the module docstring)."""
    sizes = op.mesh_sizes()
    if mesh is None:
        mesh = current_mesh()
    if mesh is None:
        if sizes is None:
            raise CollectiveError(
                f"{op.name}: no mesh for axis '{op.axis.data}': the host function has no "
                "tessera.mesh attribute; pass mesh=, or run inside `with mesh:`"
            )
        key = tuple(sizes.items())
        if key not in _MESHES:
            _MESHES[key] = Mesh(axes=list(sizes), shape=list(sizes.values()))
        return _MESHES[key]
    if sizes is not None and dict(zip(mesh.axes, mesh.shape)) != sizes:
        raise CollectiveError(
            f"{op.name}: the program was lowered for mesh {sizes}, but runs on {mesh!r}"
        )
    return mesh


def mesh_coord(op: hc.HostCollectiveOp, mesh: Mesh) -> int:
    """This rank's coordinate along ``op``'s axis (0 on an axis of size 1)."""
    axis = op.axis.data
    if mesh.axis_size(axis) == 1:
        return 0
    if not mesh.is_initialized():
        raise CollectiveError(
            f"mesh axis '{axis}' (size {mesh.axis_size(axis)}) needs an initialized "
            "torch.distributed process group: run one process per rank (torchrun, or "
            "tessera.dist.launch.spawn)"
        )
    return mesh.coords(mesh.check_world())[axis]


def _like(op: hc.RecvBase, device: str) -> Any:
    """An empty array of the received element type: numpy, or torch on this CUDA device."""
    t = op.result.type
    assert isinstance(t, MemRefType)
    if device == "cuda":
        import torch

        from tessera.runtime.cuda import torch_dtype

        return torch.empty(
            (0,), dtype=torch_dtype(t.element_type),
            device=torch.device("cuda", torch.cuda.current_device()),
        )
    from tessera.runtime.tile_interpreter import np_dtype

    return np.empty((0,), dtype=np_dtype(t.element_type))


def _run(op: hc.HostCollectiveOp, args: Sequence[Any], m: Mesh, device: str) -> Any:
    if isinstance(op, hc.AllReduceBase):
        return C.all_reduce(
            args[0], op.op.data, op.axis.data, mesh=m, deterministic=op.nondeterministic is None
        )
    if isinstance(op, hc.AllGatherBase):
        return C.all_gather(args[0], op.axis.data, op.dim.value.data, mesh=m)
    if isinstance(op, hc.ReduceScatterBase):
        return C.reduce_scatter(args[0], op.op.data, op.axis.data, op.dim.value.data, mesh=m)
    if isinstance(op, hc.AllToAllBase):
        return C.all_to_all(
            args[0], op.axis.data, op.split_dim.value.data, op.concat_dim.value.data, mesh=m
        )
    if isinstance(op, hc.SendBase):
        C.send(args[0], op.axis.data, op.peer.value.data, mesh=m)
        return None
    if isinstance(op, hc.RecvBase):
        t = op.result.type
        assert isinstance(t, MemRefType)
        like = _like(op, device)
        return C.recv(
            tuple(t.get_shape()), like.dtype if device == "cpu" else None, op.axis.data,
            op.peer.value.data, mesh=m, like=like,
        )
    if isinstance(op, hc.MeshCoordBase):
        return mesh_coord(op, m)
    raise CollectiveError(f"{op.name}: not a host collective")


def run_host_collective(
    op: hc.HostCollectiveOp, args: Sequence[Any], mesh: Mesh | None = None, device: str = "cpu"
) -> tuple[Any, ...]:
    """Run host collective ``op`` on ``args`` (numpy arrays for ``device="cpu"``, torch
    CUDA tensors for ``"cuda"``); returns its results (fresh, contiguous buffers)."""
    try:
        m = mesh_for(op, mesh)
        out = _run(op, args, m, device)
    except (CollectiveError, MeshError) as e:
        msg = str(e)
        raise CollectiveError(msg if msg.startswith(op.name) else f"{op.name}: {msg}") from None
    if not op.results:
        return ()
    if isinstance(op, hc.MeshCoordBase):
        return (out,)
    if device == "cuda":
        return (out.contiguous(),)
    return (np.ascontiguousarray(out),)
