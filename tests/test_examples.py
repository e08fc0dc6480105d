"""The guide's graph-level examples run as scripts and check themselves against numpy."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = ["attention.py", "mixed_precision_gemm.py", "stable_softmax.py", "transformer_block.py"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_runs(script: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
    r = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "func.func @" in r.stdout and "tgraph." in r.stdout
    assert "max abs error" in r.stdout


def test_train_transformer_loss_goes_down() -> None:
    """The transformer training example (CPU reference here) prints a falling loss and its
    tokens per second."""
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent), CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, str(EXAMPLES / "train_transformer.py"), "12"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert "tokens/s" in r.stdout
    first, last = (float(x) for x in r.stdout.split("loss: ")[1].split(" after")[0].split(" -> "))
    assert last < 0.5 * first
