"""Test-suite setup: every test runs against a temporary cache root.

Tessera keeps compiled programs, cubins and tuning results under
:func:`tessera.options.cache_root`. The session points ``TESSERA_CACHE_DIR`` at a
temporary folder before any test runs (subprocesses started by tests inherit it),
so the suite never reads a user's cache or writes into ``~/.cache/tessera``; tests
that need an empty cache of their own still set ``TESSERA_CACHE_DIR`` to their
``tmp_path``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

_ROOT = tempfile.mkdtemp(prefix="tessera-test-cache-")
os.environ["TESSERA_CACHE_DIR"] = _ROOT  # before any test module imports tessera


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache_root() -> Iterator[str]:
    """The session's cache root (removed at the end)."""
    yield _ROOT
    shutil.rmtree(_ROOT, ignore_errors=True)


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """Dynamo's caches cleared and a new backend report started before and after the
    test (the ``torch.compile`` tests: one test's graphs, guards, recompile counts and
    report entries -- what ``tessera.torch.last_report()`` lists -- never reach the
    next)."""
    import torch

    from tessera.torch import report

    torch._dynamo.reset()
    report.reset()
    yield
    torch._dynamo.reset()
    report.reset()
