"""Device meshes: named axes over a list of devices, backed by torch.distributed.

A :class:`Mesh` is first a *description*: axis names, axis sizes and the devices
in row-major order (device ``i`` of the list is the process of global rank ``i``).
Building one needs no process group, so the guide's 72-GPU meshes can be written
down anywhere. Process groups (one per axis, through
``torch.distributed.device_mesh.DeviceMesh``) are created lazily, on the first
collective, when a process group is initialized; NCCL serves CUDA devices and
gloo serves CPU devices.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from tessera.errors import TesseraError
from tessera.ir.attrs import MeshAttr
from tessera.options import process_group_env


class MeshError(TesseraError, ValueError):
    """A mesh that cannot be built or used as asked (bad shape, unknown axis, ...)."""


class GPUUnavailableError(MeshError):
    """A mesh of ``cuda:*`` devices (or the NCCL backend) used where torch sees no GPU."""


def require_gpus(what: str) -> int:
    """The number of CUDA devices torch sees; :class:`GPUUnavailableError` naming ``what``
    when there are none (torch without CUDA, or no device visible)."""
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n == 0:
        why = ("torch was built without CUDA" if not torch.backends.cuda.is_built()
               else "torch sees no CUDA device")
        raise GPUUnavailableError(
            f"{what} needs CUDA devices, but {why}; on a CPU machine use a mesh of int "
            "ranks or 'cpu' devices (gloo), e.g. dist.Mesh(axes=..., devices=range(n))"
        )
    return n


def _device_kind(d: Any) -> str:
    """``cuda`` or ``cpu`` for one device entry (an int rank, ``"cuda:3"``, a torch device)."""
    s = str(d)
    if s.startswith("cuda"):
        return "cuda"
    if s.startswith("cpu"):
        return "cpu"
    if isinstance(d, int) or s.isdigit():
        return "rank"
    raise MeshError(f"unknown device {d!r}: expected an int rank, 'cuda:N' or 'cpu'")


class Mesh:
    """A logical device mesh: ``Mesh(axes=["dp", "tp"], devices=range(8), shape=(2, 4))``.

    ``shape`` may be omitted: the first axis takes all devices that the others
    leave (all axes but the first default to size 1, so ``Mesh(axes=["tp", "pp",
    "dp"], devices=range(72))`` is a 72x1x1 mesh; pass ``shape`` to factor it).
    ``axes`` may also be a ``{name: size}`` dict.
    """

    def __init__(
        self,
        axes: Sequence[str] | dict[str, int],
        devices: Iterable[Any] | int | None = None,
        shape: Sequence[int] | None = None,
        *,
        ranks_per_node: int | None = None,
    ):
        if isinstance(axes, dict):
            if shape is not None:
                raise MeshError("give axis sizes either in the axes dict or in shape, not both")
            shape = list(axes.values())
            axes = list(axes.keys())
        axes = [str(a) for a in axes]
        if not axes:
            raise MeshError("a mesh needs at least one axis")
        if len(set(axes)) != len(axes):
            raise MeshError(f"mesh axis names repeat: {axes}")
        if devices is None:
            if shape is None:
                raise MeshError("give devices or shape")
            devices = range(math.prod(shape))
        elif isinstance(devices, int):
            devices = range(devices)
        devs = list(devices)
        if not devs:
            raise MeshError("a mesh needs at least one device")
        if shape is None:
            shape = [len(devs)] + [1] * (len(axes) - 1)
        shape = [int(s) for s in shape]
        if len(shape) != len(axes):
            raise MeshError(
                f"mesh shape {tuple(shape)} has {len(shape)} sizes for {len(axes)} axes {tuple(axes)}"
            )
        if any(s < 1 for s in shape):
            raise MeshError(f"mesh shape {tuple(shape)}: sizes must be >= 1")
        if math.prod(shape) != len(devs):
            raise MeshError(
                f"mesh shape {tuple(shape)} holds {math.prod(shape)} devices, "
                f"but {len(devs)} devices were given"
            )
        kinds = {_device_kind(d) for d in devs}
        if len(kinds - {"rank"}) > 1:
            raise MeshError("a mesh cannot mix CPU and CUDA devices")
        self.axes: tuple[str, ...] = tuple(axes)
        self.shape: tuple[int, ...] = tuple(shape)
        self.devices: tuple[Any, ...] = tuple(devs)
        self._kind = next(iter(kinds - {"rank"}), "rank")
        self._device_mesh: Any = None
        if ranks_per_node is not None and (
            isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int)
            or ranks_per_node < 1
        ):
            raise MeshError(f"ranks_per_node must be an int >= 1, got {ranks_per_node!r}")
        self.ranks_per_node = ranks_per_node
        """Ranks per machine (consecutive ranks share one); None: from the devices
        (see :mod:`tessera.dist.topology`)."""
        self._topology: Any = None

    # ------------------------------------------------------------------ description

    @property
    def size(self) -> int:
        """Number of devices (= ranks) in the mesh."""
        return len(self.devices)

    def axis_size(self, axis: str) -> int:
        """Size of mesh axis ``axis``; a clear error if the mesh has no such axis."""
        return self.shape[self.axis_index(axis)]

    def axis_index(self, axis: str) -> int:
        if axis not in self.axes:
            raise MeshError(f"mesh has no axis '{axis}' (axes: {', '.join(self.axes)})")
        return self.axes.index(axis)

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of ``rank`` along every axis (row-major: the last axis is minor)."""
        if not 0 <= rank < self.size:
            raise MeshError(f"rank {rank} is not in a mesh of {self.size} devices")
        out: dict[str, int] = {}
        for a, s in zip(reversed(self.axes), reversed(self.shape)):
            out[a] = rank % s
            rank //= s
        return {a: out[a] for a in self.axes}

    def rank_of(self, coords: dict[str, int]) -> int:
        """The global rank at ``coords`` (missing axes are 0)."""
        r = 0
        for a, s in zip(self.axes, self.shape):
            c = coords.get(a, 0)
            if not 0 <= c < s:
                raise MeshError(f"coordinate {a}={c} is outside axis '{a}' of size {s}")
            r = r * s + c
        return r

    def axis_group_ranks(self, axis: str, rank: int) -> list[int]:
        """Global ranks of the group along ``axis`` that contains ``rank``, in axis order."""
        c = self.coords(rank)
        return [self.rank_of({**c, axis: i}) for i in range(self.axis_size(axis))]

    def to_attr(self) -> MeshAttr:
        """The IR form, ``#tessera.mesh<dp = 2, tp = 4>``."""
        return MeshAttr.get(list(zip(self.axes, self.shape)))

    @staticmethod
    def from_attr(attr: MeshAttr, devices: Iterable[Any] | None = None) -> Mesh:
        d = attr.as_dict()
        return Mesh(axes=list(d), shape=list(d.values()), devices=devices)

    @property
    def device_type(self) -> str:
        """``cuda`` for CUDA devices (or int ranks on a machine with CUDA), else ``cpu``."""
        if self._kind == "rank":
            import torch

            return "cuda" if torch.cuda.is_available() else "cpu"
        return self._kind

    @property
    def backend(self) -> str:
        """The torch.distributed backend for this mesh: ``nccl`` on CUDA, ``gloo`` on CPU."""
        return "nccl" if self.device_type == "cuda" else "gloo"

    def device_of(self, rank: int) -> Any:
        """The torch device that ``rank`` computes on."""
        import torch

        if self.device_type == "cuda":
            self.check_devices()
            d = self.devices[rank]
            if isinstance(d, str) and d.startswith("cuda"):
                return torch.device(d)
            return torch.device("cuda", rank % max(torch.cuda.device_count(), 1))
        return torch.device("cpu")

    def __enter__(self) -> Mesh:
        """``with mesh:`` makes this the mesh of collectives given only an axis, and of
        ``@ts.jit`` functions compiled without ``mesh=`` (in this thread)."""
        _CURRENT.set((*_CURRENT.get(), self))
        return self

    def __exit__(self, *exc: object) -> None:
        _CURRENT.set(_CURRENT.get()[:-1])

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Mesh)
            and self.axes == other.axes
            and self.shape == other.shape
            and self.devices == other.devices
        )

    def __hash__(self) -> int:
        return hash((self.axes, self.shape))

    def __repr__(self) -> str:
        ax = ", ".join(f"{a}={s}" for a, s in zip(self.axes, self.shape))
        return f"Mesh({ax}; {self.size} {self.device_type} devices)"

    # ------------------------------------------------------------------ execution

    def topology(self) -> Any:
        """The :class:`tessera.dist.topology.Topology` the collectives' reduction order is
        chosen from (computed once)."""
        if self._topology is None:
            from tessera.dist.topology import Topology

            self._topology = Topology.of(self)
        return self._topology

    def check_devices(self) -> None:
        """:class:`GPUUnavailableError` when the mesh names CUDA devices and torch sees
        none (a mesh of int ranks runs on whatever the machine has)."""
        if self._kind == "cuda":
            require_gpus(f"{self!r} (devices {self.devices[0]!r}, ...)")

    def is_initialized(self) -> bool:
        import torch.distributed as tdist

        return tdist.is_available() and tdist.is_initialized()

    def check_world(self) -> int:
        """This process's rank; errors if no process group exists or its size differs."""
        import torch.distributed as tdist

        self.check_devices()
        if not self.is_initialized():
            raise MeshError(
                f"{self!r} needs an initialized torch.distributed process group to execute "
                "(launch with torchrun, or call tessera.dist.init())"
            )
        ws = tdist.get_world_size()
        if ws != self.size:
            raise MeshError(
                f"mesh shape {self.shape} has {self.size} devices, but the process group "
                f"has {ws} ranks"
            )
        return tdist.get_rank()

    @property
    def rank(self) -> int:
        """This process's global rank (needs a process group)."""
        return self.check_world()

    def device_mesh(self) -> Any:
        """The ``torch.distributed.device_mesh.DeviceMesh``, created on first use.

        Every rank must reach the first use (it creates one process group per
        axis collectively); :func:`tessera.dist.executor.run_spmd` does this up front.
        """
        if self._device_mesh is None:
            import torch
            from torch.distributed.device_mesh import DeviceMesh

            self.check_world()
            ids = torch.arange(self.size).reshape(self.shape)
            self._device_mesh = DeviceMesh(self.device_type, ids, mesh_dim_names=self.axes)
        return self._device_mesh

    def group(self, axis: str) -> Any:
        """The process group of ``axis`` that contains this rank."""
        self.axis_index(axis)
        return self.device_mesh().get_group(axis)


_CURRENT: ContextVar[tuple[Mesh, ...]] = ContextVar("tessera_current_mesh", default=())
"""The meshes entered with ``with mesh:`` / :func:`use_mesh` in this thread, innermost last."""


def current_mesh() -> Mesh | None:
    """The innermost mesh entered with ``with mesh:`` or :func:`use_mesh`, or None."""
    stack = _CURRENT.get()
    return stack[-1] if stack else None


@contextmanager
def use_mesh(mesh: Mesh | dict[str, int]) -> Iterator[Mesh]:
    """``with dist.use_mesh(mesh):`` is ``with mesh:``; a ``{axis: size}`` dict is a mesh of
    that many devices (enough to trace per-rank programs, e.g. to inspect their IR)."""
    m = mesh if isinstance(mesh, Mesh) else Mesh(axes=dict(mesh))
    with m:
        yield m


def mesh(
    devices: Iterable[Any] | int | None = None,
    axes: Sequence[str] | dict[str, int] = ("dp",),
    shape: Sequence[int] | None = None,
) -> Mesh:
    """The guide's spelling: ``dist.mesh(devices=[...], axes=("dp", "tp"), shape=(4, 2))``."""
    return Mesh(axes=axes, devices=devices, shape=shape)


def init(backend: str | None = None, device_type: str | None = None) -> int:
    """Initialize the default process group from torchrun's environment, if not done yet.

    The backend is NCCL when CUDA is available (or ``device_type == "cuda"``) and
    gloo otherwise. Returns this process's rank. Without torchrun's variables
    (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) it starts a
    one-process group on localhost.
    """
    import torch
    import torch.distributed as tdist

    if tdist.is_initialized():
        return tdist.get_rank()
    if device_type is None:
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    if backend is None:
        backend = "nccl" if device_type == "cuda" else "gloo"
    local = process_group_env(_free_port)
    if backend == "nccl":
        torch.cuda.set_device(local % require_gpus("dist.init with the NCCL backend"))
    tdist.init_process_group(backend)
    return tdist.get_rank()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
