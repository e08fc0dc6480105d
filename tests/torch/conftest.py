"""Every test of the ``torch.compile`` backend starts and ends with dynamo's caches
cleared and a new backend report, so one test's compiled graphs, guards, recompile
counts and report entries never reach the next."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_dynamo(fresh_dynamo: None) -> None:
    """Every test here: :func:`tests.conftest.fresh_dynamo`."""
