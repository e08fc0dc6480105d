"""Every test of the ``torch.compile`` backend starts and ends with dynamo's caches
cleared, so one test's compiled graphs, guards and recompile counts never reach the
next."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    import torch

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
