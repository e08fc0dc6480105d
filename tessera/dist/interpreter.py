"""Per-rank semantics of Graph IR collectives for the numpy reference interpreter.

:class:`DistFunctions` implements ``tgraph.all_reduce``, ``all_gather``,
``reduce_scatter``, ``all_to_all``, ``all_slice``, ``send`` and ``recv`` with the
collectives of :mod:`tessera.dist.collectives` on a runtime :class:`Mesh`; it is
registered with ``xdsl.interpreter`` on top of the tgraph implementations of
:mod:`tessera.runtime.graph_interpreter` (overriding their single-process
collectives). ``tgraph.all_reduce`` is deterministic unless the op says
``nondeterministic``.

Single-process semantics: with no process group, collectives over a mesh axis of
size 1 are the identity and larger axes raise :class:`CollectiveError`.

:func:`install` also plugs these semantics into ``graph_interpreter.run_function``
(its ``COLLECTIVE_BACKEND`` hook), so a per-rank program can be run with it
directly inside a process group.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls
from xdsl.ir import Operation

from tessera.dist import collectives as C
from tessera.dist.mesh import Mesh
from tessera.ir import graph as g
from tessera.ir.attrs import MeshAttr


def _np_dtype(t: Any) -> np.dtype:
    from tessera.runtime.graph_interpreter import np_dtype_of

    return np_dtype_of(t)


@register_impls
class DistFunctions(InterpreterFunctions):
    """Collectives of Graph IR on ``mesh`` (this process is one rank of it)."""

    def __init__(self, mesh: Mesh):
        self.mesh = mesh

    @impl(g.AllReduceOp)
    def run_all_reduce(self, interp: Interpreter, op: g.AllReduceOp, args: tuple[Any, ...]):
        det = op.nondeterministic is None
        return (
            C.all_reduce(args[0], op.op.data, op.axis.data, mesh=self.mesh, deterministic=det),
        )

    @impl(g.AllGatherOp)
    def run_all_gather(self, interp: Interpreter, op: g.AllGatherOp, args: tuple[Any, ...]):
        return (C.all_gather(args[0], op.axis.data, op.dim.value.data, mesh=self.mesh),)

    @impl(g.ReduceScatterOp)
    def run_reduce_scatter(
        self, interp: Interpreter, op: g.ReduceScatterOp, args: tuple[Any, ...]
    ):
        return (
            C.reduce_scatter(
                args[0], op.op.data, op.axis.data, op.dim.value.data, mesh=self.mesh
            ),
        )

    @impl(g.AllToAllOp)
    def run_all_to_all(self, interp: Interpreter, op: g.AllToAllOp, args: tuple[Any, ...]):
        return (
            C.all_to_all(
                args[0], op.axis.data, op.split_dim.value.data, op.concat_dim.value.data,
                mesh=self.mesh,
            ),
        )

    @impl(g.AllSliceOp)
    def run_all_slice(self, interp: Interpreter, op: g.AllSliceOp, args: tuple[Any, ...]):
        return (C.all_slice(args[0], op.axis.data, op.dim.value.data, mesh=self.mesh),)

    @impl(g.SendOp)
    def run_send(self, interp: Interpreter, op: g.SendOp, args: tuple[Any, ...]):
        C.send(np.ascontiguousarray(args[0]), op.axis.data, op.peer.value.data, mesh=self.mesh)
        return ()

    @impl(g.RecvOp)
    def run_recv(self, interp: Interpreter, op: g.RecvOp, args: tuple[Any, ...]):
        t = op.result.type
        assert isinstance(t, TensorType)
        return (
            C.recv(
                tuple(t.get_shape()), _np_dtype(t), op.axis.data, op.peer.value.data,
                mesh=self.mesh,
            ),
        )


def make_interpreter(module: ModuleOp, mesh: Mesh) -> Interpreter:
    """The Graph IR reference interpreter with collectives running on ``mesh``."""
    from tessera.runtime.graph_interpreter import make_interpreter as base

    interp = base(module)
    interp.register_implementations(DistFunctions(mesh), override=True)
    return interp


def _mesh_for(op: Operation) -> Mesh:
    p = op.parent_op()
    while p is not None:
        m = p.attributes.get("tessera.mesh")
        if isinstance(m, MeshAttr):
            return Mesh.from_attr(m)
        p = p.parent_op()
    raise C.CollectiveError(f"{op.name}: no enclosing op has a tessera.mesh attribute")


_MESHES: dict[tuple[tuple[str, int], ...], Mesh] = {}


def _backend(op: Operation, args: list[np.ndarray], group: int) -> np.ndarray | None:
    m = _mesh_for(op)
    key = tuple(zip(m.axes, m.shape))
    mesh = _MESHES.setdefault(key, m)
    impls = DistFunctions(mesh)
    fn = {
        g.AllReduceOp: impls.run_all_reduce, g.AllGatherOp: impls.run_all_gather,
        g.ReduceScatterOp: impls.run_reduce_scatter, g.AllToAllOp: impls.run_all_to_all,
        g.AllSliceOp: impls.run_all_slice, g.SendOp: impls.run_send, g.RecvOp: impls.run_recv,
    }[type(op)]
    out = fn(None, op, tuple(args)).values  # type: ignore[arg-type]
    return out[0] if out else None


def install() -> None:
    """Make ``graph_interpreter.run_function`` run collectives over torch.distributed
    (the mesh is the function's ``tessera.mesh``, rank ``i`` = device ``i``)."""
    from tessera.runtime import graph_interpreter

    graph_interpreter.COLLECTIVE_BACKEND = _backend
