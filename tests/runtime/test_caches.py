"""Compile options, the cache root, and caches that are safe to share."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera import compiler
from tessera.options import (
    DEFAULT_GRAPH_PASSES,
    CompileOptions,
    Device,
    OptionsError,
    RuntimeOptions,
    cache_root,
)
from tessera.passes import matmul_config as mc
from tessera.runtime import cache, program_cache
from tessera.tuning import kernel as kernel_store
from tessera.tuning import sm90
from tessera.tuning.store import JsonStore

H100 = Device("NVIDIA H100 80GB HBM3", (9, 0))

# --------------------------------------------------------------------------- options


def test_options_from_env_and_device() -> None:
    off = CompileOptions.from_env({}, device=None)
    assert off == CompileOptions() and off.arch is None and not off.sm90_kernels
    on = CompileOptions.from_env({}, device=H100)
    assert on.arch == "sm_90" and on.device == H100.name and on.sm90_kernels
    assert not CompileOptions.from_env({"TESSERA_SM90_MATMUL": "0"}, device=H100).sm90_kernels
    assert CompileOptions.from_env({"TESSERA_SM90_MATMUL": "1"}, device=None).sm90_kernels
    env = {"TESSERA_AUTOTUNE": "1", "TESSERA_DUMP_DIR": "/tmp/d", "TESSERA_DEBUG": "1"}
    o = CompileOptions.from_env(env, device=None)
    assert o.autotune and o.dump_dir == "/tmp/d" and o.debug
    # TF32 only when asked for; it changes the code, so it is part of the key
    assert not on.allow_tf32
    tf32 = CompileOptions.from_env({"TESSERA_ALLOW_TF32": "1"}, device=None)
    assert tf32.allow_tf32 and tf32.key() != CompileOptions().key()
    assert not CompileOptions.from_env({"TESSERA_ALLOW_TF32": "0"}, device=None).allow_tf32
    assert CompileOptions.from_env({}, device=None, graph_passes=["dce"]).graph_passes == ("dce",)
    assert off.deterministic and not off.allow_tf32
    o = CompileOptions.from_env(
        {"TESSERA_DETERMINISTIC": "0", "TESSERA_ALLOW_TF32": "1"}, device=None
    )
    assert not o.deterministic and o.allow_tf32
    assert CompileOptions.from_env({"TESSERA_DETERMINISTIC": "1"}, device=None).deterministic
    # conv2d's implicit GEMM unless turned off
    assert CompileOptions.from_env({}, device=None).implicit_conv
    assert not CompileOptions.from_env({"TESSERA_IMPLICIT_CONV": "0"}, device=None).implicit_conv
    # sm90 results TMA does not store: staged through shared memory unless asked otherwise
    assert CompileOptions.from_env({}, device=None).sm90_store == "staged"
    regs = CompileOptions.from_env({"TESSERA_SM90_STORE": "Registers"}, device=None)
    assert regs.sm90_store == "registers"
    with pytest.raises(OptionsError, match="sm90_store"):
        CompileOptions.from_env({"TESSERA_SM90_STORE": "tma"}, device=None)


def test_determinism_and_tf32_options_reach_the_tile_lowering() -> None:
    from tessera.passes.lower_graph_to_tile import LowerGraphToTile
    from tessera.passes.pipelines import stage_passes

    (default, _) = stage_passes("tile", CompileOptions())
    assert isinstance(default, LowerGraphToTile)
    assert default.deterministic and not default.allow_tf32
    (fast, _) = stage_passes("tile", CompileOptions(deterministic=False, allow_tf32=True))
    assert not fast.deterministic and fast.allow_tf32
    assert default.implicit_conv
    (im2col, _) = stage_passes("tile", CompileOptions(implicit_conv=False))
    assert not im2col.implicit_conv
    assert default.sm90_store == "staged"
    (regs, _) = stage_passes("tile", CompileOptions(sm90_store="registers"))
    assert regs.sm90_store == "registers"


def test_options_key_covers_only_code_changing_fields() -> None:
    base = CompileOptions()
    assert base.graph_passes == DEFAULT_GRAPH_PASSES
    quiet = base.replace(debug=True, dump_dir="/tmp/x")
    assert quiet == base and hash(quiet) == hash(base) and quiet.key() == base.key()
    for change in (
        {"sm90_kernels": True}, {"autotune": True}, {"arch": "sm_90"}, {"device": "H100"},
        {"graph_passes": ("canonicalize",)}, {"deterministic": False}, {"allow_tf32": True},
        {"implicit_conv": False}, {"sm90_store": "registers"},
        {"sm90_tiles": (("64x64x64:bf16->bf16", (128, 3, 2, 8, 1)),)},
    ):
        other = base.replace(**change)
        assert other != base and other.key() != base.key(), change
    assert len({base, quiet, base.replace(autotune=True)}) == 2  # hashable, by value


def test_unknown_option_is_an_error() -> None:
    with pytest.raises(OptionsError, match="unknown option.*sm100") as e:
        CompileOptions().replace(sm100=True)
    assert isinstance(e.value, ts.TesseraError)
    with pytest.raises(OptionsError, match="TESSERA_PROGRESS_MIN_STEPS"):
        RuntimeOptions.from_env({"TESSERA_PROGRESS_MIN_STEPS": "many"})
    with pytest.raises(ts.TesseraError, match="unknown pass 'no-such-pass'"):
        ts.jit(lambda x: x * 2.0, options=CompileOptions(graph_passes=("no-such-pass",)))(
            np.ones(3, np.float32)
        )


def test_runtime_options() -> None:
    r = RuntimeOptions.from_env({})
    assert r.disk_cache and r.progress and not r.cuda_sync and r.ptxas is None
    r = RuntimeOptions.from_env({
        "TESSERA_NO_DISK_CACHE": "1", "TESSERA_PROGRESS": "0", "TESSERA_CUDA_SYNC": "1",
        "TESSERA_PTXAS": "/opt/ptxas", "TESSERA_PROGRESS_MIN_STEPS": "3",
    })
    assert (r.disk_cache, r.progress, r.cuda_sync, r.ptxas, r.progress_min_steps) == (
        False, False, True, "/opt/ptxas", 3,
    )


def test_jit_options_argument_drives_the_pipeline() -> None:
    def f(x):
        return ts.exp(x) * 0.0 + x

    x = np.ones(4, np.float32)
    no_dce = ts.jit(f, options=CompileOptions(graph_passes=("canonicalize",)))
    full = ts.jit(f)
    np.testing.assert_allclose(no_dce(x), full(x))
    assert no_dce._last.options.graph_passes == ("canonicalize",)
    assert "tgraph.fused" in full.inspect_ir("graph")
    assert "tgraph.fused" not in no_dce.inspect_ir("graph")  # no fuse-elementwise


# --------------------------------------------------------------------------- cache root


def test_cache_root_rules(tmp_path) -> None:
    assert cache_root({"TESSERA_CACHE_DIR": str(tmp_path)}) == tmp_path
    xdg = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert cache_root(xdg) == tmp_path / "xdg" / "tessera"
    both = {**xdg, "TESSERA_CACHE_DIR": str(tmp_path / "t")}
    assert cache_root(both) == tmp_path / "t"
    default = cache_root({"XDG_CACHE_HOME": "relative/path"})  # not absolute: ignored
    if sys.platform.startswith("linux"):
        assert default == Path.home() / ".cache" / "tessera"
    assert default.name in ("tessera", "Cache")


def test_the_suite_uses_a_temporary_cache_root() -> None:
    root = cache_root()
    assert root != Path.home() / ".cache" / "tessera"
    assert os.environ["TESSERA_CACHE_DIR"] == str(root)


# --------------------------------------------------------------------------- program cache


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TESSERA_NO_DISK_CACHE", raising=False)
    monkeypatch.delenv("TESSERA_DUMP_DIR", raising=False)
    return tmp_path


def _axpy(a, b):
    return a * 2.0 + b


def _spec():
    return ts.jit(_axpy).specialize(np.ones(16, np.float32), np.ones(16, np.float32))


def _entry(root: Path) -> Path:
    (entry,) = (root / "programs").glob("*.json")
    return entry


def test_edited_ptx_is_detected_and_rebuilt(fresh) -> None:
    ptx = _spec().ir("ptx")
    entry = _entry(fresh)
    data = json.loads(entry.read_text())
    data["ptx"] = data["ptx"].replace("mul.rn.f32", "add.rn.f32")
    assert data["ptx"] != ptx
    entry.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="checksum mismatch"):
        assert _spec().ir("ptx") == ptx
    assert json.loads(entry.read_text())["ptx"] == ptx  # healed
    assert _spec().ir("ptx") == ptx


@pytest.mark.parametrize(
    "launch", ["not IR at all", 'builtin.module { "nope.op"() : () -> () }', "module {"]
)
def test_a_launch_text_that_does_not_load_heals_its_entry(fresh, launch) -> None:
    first = _spec()
    ptx = first.ir("ptx")
    entry = _entry(fresh)
    bad = program_cache.CompiledProgram(ptx=ptx, launch=launch)
    key = entry.stem
    program_cache.store(key, bad)  # valid checksum, launch text that is not IR
    spec = _spec()
    with pytest.warns(UserWarning, match="launch module does not load"):
        assert spec.ir("ptx") == ptx
    assert spec.launch_text is None  # rebuilt here
    healed = _spec()
    assert healed.ir("ptx") == ptx and healed.launch_text is not None  # a hit again
    assert str(healed.launch_module()).count("ttarget.func") >= 1


def test_failed_writes_leave_no_temporary_files(fresh, monkeypatch) -> None:
    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    assert program_cache.store("k" * 64, program_cache.CompiledProgram("ptx", "launch")) is None
    assert cache.store_cubin("c" * 64, b"CUBIN") is None
    assert not JsonStore(fresh / "t.json").update("k", {"v": 1})
    leftovers = [p for p in fresh.rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert leftovers == []


def test_cubin_checksum(fresh) -> None:
    key = "a" * 64
    assert cache.store_cubin(key, b"\x7fELF cubin bytes") is not None
    assert cache.load_cubin(key) == b"\x7fELF cubin bytes"
    path = cache.cubin_path(key)
    raw = path.read_bytes()
    path.write_bytes(raw[:-1] + b"X")  # flipped byte
    assert cache.load_cubin(key) is None
    path.write_bytes(b"\x7fELF old format")
    assert cache.load_cubin(key) is None
    built = []
    assert cache.cubin_for("ptx", "sm_90a", "t", "d", lambda: built.append(1) or b"NEW") == b"NEW"
    assert built == [1]


# --------------------------------------------------------------------------- tuning stores


def _tuner(path: str, worker: int, n: int) -> None:
    store = JsonStore(Path(path))
    for i in range(n):
        assert store.update(f"w{worker}-{i}", {"worker": worker, "i": i})


def test_concurrent_tuners_lose_no_updates(tmp_path) -> None:
    path = tmp_path / "autotune.json"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_tuner, args=(str(path), w, 10)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    data = json.loads(path.read_text())
    assert sorted(data) == sorted(f"w{w}-{i}" for w in range(8) for i in range(10))
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("text", ["[]", '"text"', "3", '{"k": 3, "ok": {"v": 1}}', "{bad", ""])
def test_a_store_of_the_wrong_shape_reads_as_empty(tmp_path, text) -> None:
    path = tmp_path / "s.json"
    path.write_text(text)
    store = JsonStore(path)
    assert all(isinstance(v, dict) for v in store.read().values())
    assert store.update("new", {"v": 2})
    assert store.get("new") == {"v": 2}


def test_sm90_tile_outside_the_search_space_is_never_used(fresh) -> None:
    m = n = k = 512
    outside = mc.Sm90Config(bn=64, stages=3, consumers=2)  # valid, but not a tuner choice
    assert outside.valid() and outside not in mc.search_space(m, n, k)
    key = sm90.cache_key(H100.name, m, n, k, "bf16", "bf16")
    sm90.store(key, outside, 1e-6)
    assert sm90.cached(key) is None and sm90.tiles_for(H100.name) == ()
    tiles = mc.format_tiles([(mc.shape_key(m, n, k, "bf16", "bf16"), mc.as_numbers(outside))])
    assert mc.sm90_config(m, n, k, "bf16", "bf16", tiles) == mc.heuristic(m, n, k)
    inside = mc.search_space(m, n, k)[-1]
    tiles = mc.format_tiles([(mc.shape_key(m, n, k, "bf16", "bf16"), mc.as_numbers(inside))])
    assert mc.sm90_config(m, n, k, "bf16", "bf16", tiles) == inside
    (fresh / "matmul_sm90.json").write_text(json.dumps({key: {"bn": "wide"}, "junk": 7}))
    assert sm90.tiles_for(H100.name) == ()


def test_tuned_tiles_reach_the_options_of_an_sm90_compile(fresh) -> None:
    m = n = k = 512
    inside = mc.search_space(m, n, k)[-1]
    sm90.store(sm90.cache_key(H100.name, m, n, k, "bf16", "bf16"), inside, 1e-6)
    opts = compiler.resolve_options(CompileOptions.from_env({}, device=H100))
    assert opts.sm90_tile(mc.shape_key(m, n, k, "bf16", "bf16")) == mc.as_numbers(inside)
    cpu = compiler.resolve_options(CompileOptions.from_env({}, device=None))
    assert cpu.sm90_tiles == ()  # no sm90 kernels: tuned tiles do not matter


def test_kernel_autotune_config_outside_the_space_is_retuned(fresh, capsys) -> None:
    text = """
@kernel.autotune(space=dict(U=[1, 2]))
def tuned(x: f32[n], y: mut f32[n]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] * (2.0 / U)
"""
    x, y = np.ones(40, np.float32), np.zeros(40, np.float32)
    k = ts.kernel.from_source(text)
    k(x, y)
    (key,) = json.loads((fresh / "autotune.json").read_text())
    kernel_store.record(key, {"config": {"U": 0}, "how": "edited"})  # U=0 divides by zero
    capsys.readouterr()
    k2 = ts.kernel.from_source(text)
    y[:] = 0
    k2(x, y)
    np.testing.assert_allclose(y, 2 * x)
    assert k2.last_trials, "a config outside the space must be tuned again, not run"
    assert json.loads((fresh / "autotune.json").read_text())[key]["config"] == {"U": 1}


# --------------------------------------------------------------------------- the stage table


def test_stage_table_order() -> None:
    assert [(s.source, s.name) for s in compiler.STAGES] == [
        ("traced", "graph"), ("graph", "tile"), ("tile", "target"), ("target", "ptx"),
        ("ptx", "cubin"),
    ]
    assert compiler.LEVELS == ("traced", "graph", "tile", "target", "ptx")


def test_cubin_stage(fresh) -> None:
    from tessera.runtime import ptxas

    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found")
    spec = _spec()
    with pytest.raises(ts.TesseraError, match="no target architecture"):
        compiler.build(spec, "cubin")
    spec.options = CompileOptions(arch="sm_90")
    cubin = compiler.build(spec, "cubin")
    assert cubin[:4] == b"\x7fELF"


def test_each_pipeline_is_defined_once() -> None:
    from tessera.passes.graph_optimize import GraphOptimizePass
    from tessera.passes.pipelines import GraphPipelinePass, PtxPipelinePass, stage_passes
    from tessera.profiler.pipeline import expand

    graph = [p.name for p in stage_passes("graph")]
    assert graph == list(DEFAULT_GRAPH_PASSES)
    assert [p.name for p in expand([GraphPipelinePass()])] == graph
    assert [p.name for p in expand([GraphOptimizePass()])] == graph[1:]  # after canonicalize
    assert [p.name for p in expand([GraphOptimizePass(cse=False)])] == [
        n for n in graph[1:] if n != "cse"
    ]
    assert [p.name for p in expand([PtxPipelinePass()])] == [
        *graph, "lower-graph-to-tile", "dedupe-kernels", "lower-tile-to-target",
    ]
    (tile, _dedupe) = stage_passes("tile", CompileOptions(
        sm90_kernels=True, sm90_tiles=(("8x8x8:bf16->bf16", (128, 3, 1, 8, 1)),),
    ))
    assert tile.sm90 and tile.sm90_tiles == ("8x8x8:bf16->bf16=128,3,1,8,1",)


def test_autotune_on_a_miss_fills_the_options(fresh, monkeypatch) -> None:
    import ml_dtypes

    tuned: list[tuple[int, int, int, str, str]] = []
    pick = mc.search_space(128, 256, 64)[-1]

    def fake_autotune(m, n, k, in_type="bf16", out_type="bf16", reps=20):
        tuned.append((m, n, k, in_type, out_type))
        return pick

    monkeypatch.setattr(sm90, "autotune", fake_autotune)
    a = np.zeros((128, 64), ml_dtypes.bfloat16)
    b = np.zeros((64, 256), ml_dtypes.bfloat16)
    graph = ts.jit(lambda a, b: ts.matmul(a, b)).specialize(a, b).ir("graph")
    on = CompileOptions(arch="sm_90", device="H100", sm90_kernels=True, autotune=True)
    done = sm90.complete(graph, on)
    assert tuned == [(128, 256, 64, "bf16", "bf16")]
    assert done.sm90_tile("128x256x64:bf16->bf16") == mc.as_numbers(pick)
    assert sm90.complete(graph, done) is done and len(tuned) == 1  # tuned once
    for off in (on.replace(autotune=False), on.replace(arch=None), on.replace(sm90_kernels=False)):
        assert sm90.complete(graph, off) is off
    assert len(tuned) == 1
