"""A mesh of ``cuda:*`` devices on a machine without GPUs: building and describing it
works (the guide's 72-GPU meshes are built on any machine), but running on it raises
the named ``dist.GPUUnavailableError`` (a TesseraError), not torch's AttributeError or
AssertionError."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tessera as ts
from tessera import dist
from tessera.dist.launch import spawn
from tessera.errors import TesseraError

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without GPUs")


def cuda_mesh() -> dist.Mesh:
    return dist.Mesh(axes=["tp"], devices=["cuda:0", "cuda:1"])


def test_building_a_cuda_mesh_works():
    m = cuda_mesh()
    assert m.shape == (2,) and m.device_type == "cuda" and m.backend == "nccl"


@pytest.mark.parametrize("use", [
    lambda m: m.check_world(),
    lambda m: m.device_of(0),
    lambda m: dist.all_reduce(np.ones(3), "sum", "tp", mesh=m),
    lambda m: ts.jit(lambda x: ts.op.all_reduce(x, "sum", "tp"), mesh=m)(np.ones(4)),
])
def test_running_on_it_is_a_named_error(use):
    with pytest.raises(dist.GPUUnavailableError, match=r"needs CUDA devices, but torch") as e:
        use(cuda_mesh())
    assert isinstance(e.value, TesseraError)
    assert "devices=range(n)" in str(e.value)


def test_nccl_spawn_and_init_are_named_errors():
    with pytest.raises(dist.GPUUnavailableError, match="spawn.*nccl"):
        spawn(lambda rank, n: rank, 2, backend="nccl")
    with pytest.raises(dist.GPUUnavailableError, match="NCCL"):
        dist.init(backend="nccl")
