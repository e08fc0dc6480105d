"""The benchmark harness in its CPU mode: Tessera cases compile and pass ptxas; errors become rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import run  # noqa: E402
from tessera.runtime import ptxas  # noqa: E402

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")


@needs_ptxas
def test_dry_run_compiles_cases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    rc = run.main(["--dry-run", "--quick", "--cases", "softmax,host_overhead,nope", "--out", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    rows = {(r["case"], r["impl"]): r for r in data["rows"]}
    assert rows[("softmax bf16 8192x8192", "tessera")]["status"] == "compiled"
    assert rows[("host overhead (3 args)", "tessera")]["status"] == "compiled"
    assert rows[("nope", "-")]["status"] == "error"
    assert data["environment"]["dry_run"] is True
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:3] == ["case", "impl", "ms"]


def test_guarded_turns_exceptions_into_rows() -> None:
    ctx = run.Ctx(quick=True, dry=True, rows=[])

    def boom() -> None:
        raise NotImplementedError("no lowering for tgraph.x")

    run.guarded(ctx, "case", "tessera", boom)
    (row,) = ctx.rows
    assert row.status == "error" and "no lowering for tgraph.x" in row.note


def test_ratios_and_table() -> None:
    rows = [run.Row("g", "peer", ms=2.0, tflops=100.0), run.Row("g", "tessera", ms=4.0, tflops=50.0)]
    run.ratios(rows)
    assert rows[1].ratio == pytest.approx(0.5)
    text = run.table(rows)
    assert "0.50" in text and text.count("\n") == 2


@needs_ptxas
def test_gemm_store_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/gemm_store.py compiles both stores of a case; only the staged one reads its
    tile back from shared memory."""
    from bench import gemm_store

    assert gemm_store.main(["--dry-run", "--cases", "n4100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].endswith("tessera staged      compiled, ptxas ok, staged")
    assert lines[-1].endswith("tessera registers   compiled, ptxas ok")
    with pytest.raises(SystemExit):
        gemm_store.main(["--cases", "nope"])


def test_conv_backward_plan_lists_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/conv_backward.py --plan (no GPU): a 3x3/2 input gradient's kernels on the
    sm90 lowering and their bytes against the ideal."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    from bench import conv_backward

    spec = next(s for s in conv_backward.INPUT_GRAD_LAYERS if s[0] == "l4 3x3 s2")
    row = conv_backward.plan(*spec, 2)
    assert [n.rsplit("_", 1)[0] for n, _ in row["launches"]] == ["conv_nhwc", "conv_weight",
                                                                  "conv"]
    assert row["ideal"] == 2 * (2 * 512 * 7 * 7 + 512 * 512 * 9 + 2 * 512 * 14 * 14)
    assert sum(b for _, b in row["launches"]) > row["ideal"]
