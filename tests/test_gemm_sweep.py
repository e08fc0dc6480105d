"""``bench/gemm_sweep.py`` in its CPU mode: every config builds, passes ``ptxas -v`` without
spills, and lands in the table and the JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import gemm_sweep  # noqa: E402
from tessera.passes import matmul_config as mc  # noqa: E402
from tessera.runtime import ptxas  # noqa: E402

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")


@needs_ptxas
def test_dry_run_builds_and_assembles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.json"
    rc = gemm_sweep.main(["--dry-run", "--sizes", "512", "--max-configs", "3", "--out", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert len(rows) == 3 and data["environment"]["dry_run"] is True
    assert rows[0]["impl"] == "tessera sm90 *"  # the heuristic comes first
    for r in rows:
        assert r["status"] == "compiled", r
        assert 0 < r["regs"] <= 255 and r["smem"] > 0 and r["grid"] > 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["size", "impl", "config"] and len(lines) == 4


def test_configs_put_the_heuristic_first() -> None:
    cs = gemm_sweep.configs(4096, None)
    assert cs[0] == (True, mc.heuristic(4096, 4096, 4096))
    assert sum(h for h, _ in cs) == 1 and len(cs) == len(mc.search_space(4096, 4096, 4096))
    assert gemm_sweep.label(mc.Sm90Config(bn=256, stages=4, consumers=2)) == "128x256x64 s4"


def test_table_formats_missing_values() -> None:
    rows = [gemm_sweep.Row(2048, "cuBLAS", "torch.matmul", ms=0.03, tflops=600.0, x_cublas=1.0),
            gemm_sweep.Row(2048, "tessera sm90", "128x128x64 s5", status="mismatch", note="x")]
    text = gemm_sweep.table(rows)
    assert "600.0" in text and "mismatch: x" in text and text.count("\n") == 2
