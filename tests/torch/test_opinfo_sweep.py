"""scripts/opinfo_sweep.py on the ops whose OpInfo samples found defects (a crash on a
0-d ``index_select``, the wrong dtype of an integer ``native_dropout_backward``, a
verifier error on a masked 0-d ``argmax``, a 0-d weight gradient of a one-row
``rms_norm``): every sample that reaches Tessera matches eager, forward and backward."""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

pytest.importorskip("expecttest")  # torch's OpInfo database imports it
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from scripts import opinfo_sweep  # noqa: E402

OPS = ["index_select", "native_dropout_backward", "masked.argmax", "nn.functional.rms_norm"]


def _sweep(argv: list[str]) -> list[dict]:
    """The JSON rows ``scripts/opinfo_sweep.py`` prints for ``argv``."""
    out = io.StringIO()
    with redirect_stdout(out):
        opinfo_sweep.main(argv)
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.parametrize("mode", ["fwd", "grad"])
def test_found_defects_stay_fixed(mode):
    rows = _sweep([*OPS, "--samples", "0:3", "--mode", mode,
                   "--dtypes", "float32,float64,int64,bool"])
    bad = [r for r in rows if r["res"] not in ("ok", "skip")]
    assert not bad, bad[:3]
    ran = {r["op"] for r in rows if r.get("tessera_ops", 0) > 0}
    # masked.argmax has no gradient: its grad samples are skipped
    assert ran == set(OPS) - ({"masked.argmax"} if mode == "grad" else set()), ran


def test_reference_input_defects_stay_fixed():
    """The reference inputs that found defects: an int64 ``arange`` whose float bounds
    torch truncates first (``arange(0., -8.000001, -4.)`` has two elements; numpy's rule
    gave three), and ``F.conv2d(..., stride=2, padding="valid")``, which reaches aten with
    one-number lists (``padding=[0]``)."""
    rows = _sweep(["arange", "nn.functional.conv2d", "--inputs", "reference",
                   "--samples", "10:12", "--dtypes", "int64,float32"])
    bad = [r for r in rows if r["res"] not in ("ok", "skip")]
    assert not bad, bad[:3]
    assert {r["op"] for r in rows if r.get("tessera_ops", 0) > 0} == {
        "arange", "nn.functional.conv2d"}


def test_through_the_tile_lowering(monkeypatch):
    """``--lowering tile``: the samples run the GPU lowering's Tile IR on the Tile IR
    interpreter (and the switch is off again afterwards)."""
    from tessera.runtime import tile_interpreter

    calls = []
    real = tile_interpreter.run_host
    monkeypatch.setattr(tile_interpreter, "run_host",
                        lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    rows = _sweep(["nn.functional.rms_norm", "index_select", "--samples", "0:2",
                   "--dtypes", "float32,bfloat16", "--lowering", "tile"])
    bad = [r for r in rows if r["res"] not in ("ok", "skip")]
    assert not bad, bad[:3]
    assert calls and any(r.get("tessera_ops", 0) > 0 for r in rows)
    import os

    assert "TESSERA_INTERPRET_TILE" not in os.environ
