"""TESSERA_DUMP_DIR (every IR stage of every compile) and the progress bars (terminal only)."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

import tessera as ts
from tessera.options import DEFAULT_GRAPH_PASSES
from tessera.runtime import progress


def _fn():
    def mlp(x, w):
        return ts.relu(ts.matmul(x, w)) * 2.0

    return ts.jit(mlp)


def _mm():
    def mm(x, w):
        return ts.matmul(x, w)

    return ts.jit(mm)


def test_dump_dir_has_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_DUMP_DIR", str(tmp_path))
    fn = _mm()
    x, w = np.ones((4, 8), np.float32), np.ones((8, 3), np.float32)
    fn(x, w)
    (folder,) = tmp_path.iterdir()
    assert re.fullmatch(r"mm-[0-9a-f]{12}", folder.name)
    names = sorted(p.name for p in folder.iterdir())
    passes = list(DEFAULT_GRAPH_PASSES)
    want = ["00-traced.mlir"] + [f"{i + 1:02d}-{n}.mlir" for i, n in enumerate(passes)]
    want.append(f"{len(passes) + 1:02d}-graph.mlir")
    assert names == want
    assert (folder / names[-1]).read_text() == fn.inspect_ir("graph") + "\n"
    assert "tgraph.matmul" in (folder / "00-traced.mlir").read_text()
    assert "tgraph.matmul" in (folder / names[-1]).read_text()
    fn(x, w)  # cached: nothing new
    assert len(list(folder.iterdir())) == len(want)
    fn.inspect_ir("ptx")  # the lower stages are dumped when they are built
    k = len(passes) + 2
    tail = sorted(p.name for p in folder.iterdir())[-3:]
    assert tail == [f"{k:02d}-tile.mlir", f"{k + 1:02d}-target.mlir", f"{k + 2:02d}-ptx.ptx"]
    assert "ttile.kernel" in (folder / tail[0]).read_text()
    assert "ttarget" in (folder / tail[1]).read_text()
    assert ".entry" in (folder / tail[2]).read_text()


def test_dump_one_folder_per_signature(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_DUMP_DIR", str(tmp_path))
    fn = _fn()
    fn(np.ones((4, 8), np.float32), np.ones((8, 3), np.float32))
    fn(np.ones((2, 8), np.float32), np.ones((8, 3), np.float32))
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert len(folders) == 2 and all(f.startswith("mlp-") for f in folders)


def test_dump_off_without_env(tmp_path, monkeypatch):
    monkeypatch.delenv("TESSERA_DUMP_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    from tessera.options import CompileOptions
    from tessera.runtime import dump

    assert CompileOptions.from_env(device=None).dump_dir is None
    assert dump.observers(None) == [] and dump.observers("") == []
    _fn()(np.ones((4, 8), np.float32), np.ones((8, 3), np.float32))
    assert list(tmp_path.iterdir()) == []


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(monkeypatch):
    monkeypatch.delenv("TESSERA_PROGRESS", raising=False)
    quiet = io.StringIO()
    with progress.bar(5, "work", quiet) as b:
        for _ in range(5):
            b.update()
    assert quiet.getvalue() == "" and b.n == 5 and not b.drawn
    tty = _Tty()
    with progress.bar(5, "work", tty) as b:
        assert b.drawn
        b.update(5, note="done")
    assert "work" in tty.getvalue() and "5/5" in tty.getvalue()
    monkeypatch.setenv("TESSERA_PROGRESS", "0")
    assert not progress.enabled(_Tty())


def test_compile_bar_on_a_terminal(monkeypatch):
    monkeypatch.delenv("TESSERA_PROGRESS", raising=False)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert progress.compile_observers() == []
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    monkeypatch.setenv("TESSERA_PROGRESS_MIN_STEPS", "1")
    monkeypatch.setattr(progress, "COMPILE_BAR_DELAY", 0.0)
    obs = progress.compile_observers()
    assert len(obs) == 1
    fn = _fn()
    spec = fn.specialize(np.ones((4, 8), np.float32), np.ones((8, 3), np.float32))
    o = obs[0]
    o.begin(spec, "graph", 2)
    assert o._bars[(id(spec), "graph")].drawn
    o.pass_done(spec, "cse", spec.traced, 0.0)
    o.pass_done(spec, "dce", spec.traced, 0.0)
    o.stage(spec, "graph", spec.traced, 0.0)
    assert "compile mlp (graph)" in tty.getvalue() and (id(spec), "graph") not in o._bars


def test_autotune_bar_uses_progress_helper(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TESSERA_PROGRESS", raising=False)
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    k = ts.kernel.from_source("""
@kernel.autotune(space=dict(group_size=[32, 64]))
def scale(x: f32[n], y: mut f32[n]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] * 2.0
""")
    x, y = np.arange(40, dtype=np.float32), np.zeros(40, np.float32)
    k(x, y)
    np.testing.assert_array_equal(y, 2 * x)
    assert "autotune scale" in tty.getvalue() and "2/2" in tty.getvalue()


@pytest.mark.parametrize("flag", ["1", "0"])
def test_jit_results_unchanged_by_observers(flag, tmp_path, monkeypatch):
    if flag == "1":
        monkeypatch.setenv("TESSERA_DUMP_DIR", str(tmp_path))
    x, w = np.ones((4, 8), np.float32), np.full((8, 3), 0.5, np.float32)
    np.testing.assert_allclose(_fn()(x, w), np.maximum(x @ w, 0) * 2.0)
