"""Calling ``@ts.jit`` functions on sharded values: one call per rank.

Inside a process group (torchrun, or :func:`tessera.dist.launch.spawn`) every
rank calls the compiled function with the same arguments::

    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(2)], axes=("tp",))
    W = dist.tensor((K, N), layout=dist.ShardSpec(partition=("col",), mesh_axes=("tp",)),
                    mesh=mesh, dtype="f32", data=w)

    @ts.jit
    def layer(x, W):
        return ts.relu(ts.matmul(x, W))

    y = layer(x, W)        # x: replicated array; W: DistTensor; y: the global result

Two program forms are accepted:

* **Global view** (no collectives in the function): ``DistTensor`` arguments
  contribute their global shape and their layout (the argument's
  ``tessera.shard``), arrays are replicated. The traced program is partitioned
  (``shard-propagation`` + ``spmd-partition``) and each rank runs its per-rank
  program on its blocks. Results are replicated global values, except the
  gradients of ``ts.grad``/``ts.value_and_grad`` with respect to a
  ``DistTensor``: those are ``DistTensor`` s with the argument's layout, holding
  this rank's block (so the backward pass ends in ``reduce_scatter`` where the
  forward broadcast a sharded weight).
* **Per-rank view** (the function calls ``ts.all_gather`` & co. itself, like the
  guide's ``y = all_gather(x @ W_shard, axis="tp")``): traced with the local
  shapes; a ``DistTensor`` argument contributes its local block. The function
  needs a mesh (``@ts.jit(mesh=mesh)`` or a ``DistTensor`` argument); results are
  what the program computes on this rank.

Execution goes through :class:`tessera.dist.segments.SegmentedProgram`: on a CPU
mesh (gloo) each segment runs on the numpy reference interpreter; on a CUDA
mesh (NCCL) each segment runs its compiled PTX on this rank's GPU and the
results are torch CUDA tensors.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, ModuleOp

from tessera.dist.mesh import Mesh, MeshError, current_mesh, require_gpus, use_mesh
from tessera.dist.segments import SegmentedProgram
from tessera.dist.sharding import ShardSpec
from tessera.dist.tensor import DistTensor
from tessera.frontend.errors import TesseraError
from tessera.frontend.jit import CompiledFunction, Specialization, _arrays_of, _flatten
from tessera.ir.attrs import MeshAttr
from tessera.passes.shard_propagation import SHARD, has_user_collectives
from tessera.passes.spmd_partition import partition_function

_PROGRAMS: weakref.WeakKeyDictionary[CompiledFunction, dict[Any, Any]] = (
    weakref.WeakKeyDictionary()
)


def _runtime_mesh(cf: CompiledFunction, dists: dict[str, DistTensor]) -> Mesh:
    """The mesh of the call: the DistTensors' (all the same), else the one given to jit."""
    meshes = {id(d.mesh): (p, d.mesh) for p, d in dists.items()}
    first = next(iter(meshes.values()), None)
    for p, m in meshes.values():
        assert first is not None
        if (m.axes, m.shape) != (first[1].axes, first[1].shape):
            raise MeshError(
                f"{cf.name}: arguments '{first[0]}' and '{p}' are laid out over different "
                f"meshes ({first[1]!r} and {m!r})"
            )
    given = getattr(cf, "runtime_mesh", None) or getattr(
        getattr(cf, "primal", None), "runtime_mesh", None
    )
    ctx = current_mesh()
    if given is None and ctx is not None and cf.mesh in (None, dict(zip(ctx.axes, ctx.shape))):
        given = ctx
    mesh = first[1] if first is not None else given
    if mesh is None and cf.mesh is not None:
        mesh = Mesh(axes=list(cf.mesh), shape=list(cf.mesh.values()))
    if mesh is None:
        raise MeshError(f"{cf.name}: a sharded call needs a mesh (jit(mesh=...) or DistTensors)")
    if cf.mesh is not None and cf.mesh != dict(zip(mesh.axes, mesh.shape)):
        raise MeshError(
            f"{cf.name}: compiled for mesh {cf.mesh}, but the arguments are laid out over "
            f"{mesh!r}"
        )
    return mesh


def _stand_in(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A zero-stride array of ``shape`` (no storage): tracing needs shapes and dtypes only."""
    return np.broadcast_to(np.empty((), dtype=dtype), shape)


def _trace(
    cf: CompiledFunction, bound: inspect.BoundArguments, dists: dict[str, DistTensor],
    local: bool,
) -> Specialization:
    arrays = _arrays_of(bound, cf.name, meta=True)
    for p, d in dists.items():
        arrays[p] = _stand_in(d.local_shape if local else d.shape, d.dtype.np_dtype)
    return cf._specialize(cf._arg_infos(bound, arrays))


def _traced_on(mesh: Mesh, cf: CompiledFunction) -> Any:
    """Trace inside ``mesh`` (the call's mesh) unless ``cf`` was compiled with its own."""
    import contextlib

    return use_mesh(mesh) if cf.mesh is None else contextlib.nullcontext()


def _specialize(
    cf: CompiledFunction, bound: inspect.BoundArguments, dists: dict[str, DistTensor]
) -> tuple[Specialization, bool]:
    """The specialization of the call and whether it is a per-rank program."""
    if not dists:
        spec = _trace(cf, bound, dists, local=False)
        return spec, has_user_collectives(_only_func(spec.traced))
    try:
        spec = _trace(cf, bound, dists, local=False)
    except TesseraError as global_error:
        try:
            spec = _trace(cf, bound, dists, local=True)
        except TesseraError:
            raise global_error from None
        if not has_user_collectives(_only_func(spec.traced)):
            raise global_error from None
        return spec, True
    if has_user_collectives(_only_func(spec.traced)):
        return _trace(cf, bound, dists, local=True), True
    return spec, False


def _only_func(module: ModuleOp) -> func.FuncOp:
    fns = [op for op in module.ops if isinstance(op, func.FuncOp)]
    assert len(fns) == 1, "a traced module holds one function"
    return fns[0]


def _grad_outputs(cf: CompiledFunction, spec: Specialization) -> dict[int, str]:
    """For ts.grad functions: result index -> the tensor parameter it is the gradient of."""
    from tessera.autodiff.api import GradFunction, _wrt_args

    if not isinstance(cf, GradFunction):
        return {}
    wrt = _wrt_args(cf.primal.name, cf.signature, cf.argnums, spec.tensor_params)
    off = 1 if cf.with_value else 0
    return {off + k: spec.tensor_params[i] for k, i in enumerate(wrt)}


def _program(
    cf: CompiledFunction, spec: Specialization, mesh: Mesh, per_rank: bool,
    dists: dict[str, DistTensor],
) -> tuple[SegmentedProgram, dict[int, str]]:
    layouts = tuple(
        (p, repr(dists[p].layout)) if p in dists else (p, None) for p in spec.tensor_params
    )
    key = (spec.key, layouts, mesh.axes, mesh.shape, per_rank)
    cache = _PROGRAMS.setdefault(cf, {})
    if key in cache:
        return cache[key]
    module = spec.traced.clone()
    fn = _only_func(module)
    want = mesh.to_attr()
    have = fn.attributes.get("tessera.mesh")
    if isinstance(have, MeshAttr) and have.as_dict() != want.as_dict():
        raise MeshError(f"{cf.name}: traced for mesh {have}, but called on {mesh!r}")
    fn.attributes["tessera.mesh"] = want
    sharded_results: dict[int, str] = {}
    if not per_rank:
        fn.arg_attrs = ArrayAttr([
            DictionaryAttr({SHARD: dists[p].layout.to_attr(dists[p].ndim)} if p in dists else {})
            for p in spec.tensor_params
        ])
        sharded_results = {
            i: p for i, p in _grad_outputs(cf, spec).items()
            if p in dists and not dists[p].layout.partial
        }
        if sharded_results:
            n = len(fn.function_type.outputs.data)
            fn.res_attrs = ArrayAttr([
                DictionaryAttr(
                    {SHARD: dists[sharded_results[i]].layout.to_attr(dists[sharded_results[i]].ndim)}
                    if i in sharded_results else {}
                )
                for i in range(n)
            ])
    try:
        partition_function(fn)
        module.verify()
    except Exception as e:
        raise TesseraError(f"{cf.name}: cannot partition the program over {mesh!r}: {e}") from None
    cache[key] = (SegmentedProgram(module, spec.name, mesh), sharded_results)
    return cache[key]


def _device(mesh: Mesh, values: list[Any]) -> str:
    from tessera.runtime import convert

    if mesh.device_type == "cuda":
        require_gpus(f"{mesh!r}")
        return "cuda"
    cuda = [v for v in values if convert.is_cuda_tensor(v)]
    if cuda:
        raise MeshError(
            f"{mesh!r} is a CPU mesh (gloo), but an argument is on {cuda[0].device}; use a "
            "mesh of CUDA devices"
        )
    return "cpu"


def _to_device(x: Any, device: str, where: str) -> Any:
    from tessera.runtime import convert

    if device == "cpu":
        return convert.to_numpy(x, where=where)
    import torch

    dev = torch.device("cuda", torch.cuda.current_device())
    if convert.is_torch_tensor(x):
        return x.to(dev)
    return convert.to_torch(np.asarray(x)).to(dev)


def call_sharded(cf: CompiledFunction, bound: inspect.BoundArguments) -> Any:
    """Run ``cf`` on this rank (see the module docstring); every rank must call it."""
    from tessera.runtime import convert

    items = _flatten(bound)
    dists = {p: v for p, v in items if isinstance(v, DistTensor)}
    mesh = _runtime_mesh(cf, dists)
    mesh.check_world()
    values = [v.local if isinstance(v, DistTensor) else v for _, v in items]
    device = _device(mesh, values)
    with _traced_on(mesh, cf):
        spec, per_rank = _specialize(cf, bound, dists)
    if per_rank:
        _check_even(cf, dists)
    program, sharded = _program(cf, spec, mesh, per_rank, dists)
    by_key = dict(items)
    args = []
    for p in spec.tensor_params:
        v = by_key[p]
        v = v.local if isinstance(v, DistTensor) else v
        args.append(_to_device(v, device, f"{cf.name} argument '{p}'"))
    results = program.run(args, device)
    torchy = any(convert.is_torch_tensor(v) for v in values)
    out = []
    for i, r in enumerate(results):
        if i in sharded:
            d = dists[sharded[i]]
            out.append(DistTensor(d.shape, _dense(d.layout), mesh, d.dtype, local=r))
        elif r is not None and device == "cpu" and torchy:
            out.append(convert.to_torch(r))
        else:
            out.append(r)
    return tuple(out) if spec.returns_tuple else out[0]


def _check_even(cf: CompiledFunction, dists: dict[str, DistTensor]) -> None:
    """Per-rank programs see each rank's block as it is: an uneven layout's padding would
    flow into hand-written collectives (an all_gather would return the padding too)."""
    from tessera.dist.sharding import is_even

    for p, d in dists.items():
        if not is_even(d.shape, d.layout, d.mesh):
            raise TesseraError(
                f"{cf.name}: argument '{p}' of shape {d.shape} is split unevenly by "
                f"{d.layout} over {d.mesh!r}; a function with hand-written collectives runs "
                "per rank on equal blocks only. Write it in the global view (no collectives; "
                "the partitioner handles the padding) or pass the padded block "
                f"(.local, shape {d.local_shape}) and slice the result yourself"
            )


def _dense(layout: ShardSpec) -> ShardSpec:
    return ShardSpec(partition=layout.partition, mesh_axes=layout.mesh_axes)


def sharded_call(cf: CompiledFunction, values: list[Any]) -> bool:
    """Whether a call of ``cf`` with ``values`` runs per rank: a DistTensor argument, or a
    function compiled with a mesh (or called inside ``with mesh:``) inside a process group.
    A mesh of ``cuda:*`` devices where torch sees no GPU is a ``GPUUnavailableError``."""
    import sys

    mesh = cf.runtime_mesh if cf.runtime_mesh is not None else current_mesh()
    if isinstance(mesh, Mesh):
        mesh.check_devices()  # a cuda:* mesh without GPUs: a named error, not torch's
    if any(isinstance(v, DistTensor) for v in values):
        return True
    if cf.mesh is None and current_mesh() is None:
        return False
    tdist = sys.modules.get("torch.distributed")
    return bool(tdist is not None and tdist.is_available() and tdist.is_initialized())

