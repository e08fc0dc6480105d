"""The persistent per-signature program cache (``tessera.runtime.program_cache``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import compiler
from tessera.ir import target as tt
from tessera.options import CompileOptions
from tessera.passes import pipelines
from tessera.runtime import program_cache

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty TESSERA_CACHE_DIR and counters of the lowerings that run."""
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TESSERA_NO_DISK_CACHE", raising=False)
    monkeypatch.delenv("TESSERA_DUMP_DIR", raising=False)
    monkeypatch.delenv("TESSERA_SM90_MATMUL", raising=False)
    runs = {"tile": 0, "target": 0}
    real_lower = pipelines.lower

    def lower(m, stage, *args, **kw):
        if stage in runs:
            runs[stage] += 1
        return real_lower(m, stage, *args, **kw)

    monkeypatch.setattr(pipelines, "lower", lower)
    return tmp_path, runs


def _axpy(a, b):
    return a * 2.0 + b


def _args(n=64, dtype=np.float32):
    return np.ones((n,), dtype), np.ones((n,), dtype)


def _entries(root: Path) -> list[Path]:
    return sorted((root / "programs").glob("*.json"))


def test_miss_stores_and_fresh_function_hits(cache):
    root, runs = cache
    first = ts.jit(_axpy).specialize(*_args())
    ptx = first.ir("ptx")
    assert runs == {"tile": 1, "target": 1} and len(_entries(root)) == 1
    assert first.launch_text is None  # lowered here: the runtime uses the full module

    again = ts.jit(_axpy).specialize(*_args())  # nothing shared in memory
    assert again.ir("ptx") == ptx
    assert runs == {"tile": 1, "target": 1}, "a hit must not lower again"
    assert again.launch_text is not None
    launch = again.launch_module()
    kernels = [op for op in launch.body.block.ops if isinstance(op, tt.FuncOp)]
    full = [op for op in first.ir("target").body.block.ops if isinstance(op, tt.FuncOp)]
    assert [k.sym_name.data for k in kernels] == [k.sym_name.data for k in full]
    assert all([o.name for o in k.block.ops] == ["ttarget.ret"] for k in kernels)
    assert [[str(a.type) for a in k.block.args] for k in kernels] == [
        [str(a.type) for a in k.block.args] for k in full
    ]
    assert again.launch_module() is launch  # parsed once


def test_other_levels_recomputed_on_a_hit(cache):
    root, runs = cache
    fn = ts.jit(_axpy)
    fn(*_args())
    want = {level: fn.inspect_ir(level) for level in ("graph", "tile", "target", "ptx")}
    hit = ts.jit(_axpy)
    hit(*_args())
    assert hit.inspect_ir("ptx") == want["ptx"]
    assert runs["tile"] == 1
    for level in ("graph", "tile", "target"):
        assert hit.inspect_ir(level) == want[level]
    assert runs == {"tile": 2, "target": 2}


def _key(fn, *args, options=None):
    return compiler.program_key(ts.jit(fn, options=options).specialize(*args))


def test_key_covers_shapes_dtypes_and_static_values(cache):
    base = _key(_axpy, *_args())
    assert base is not None and base == _key(_axpy, *_args())
    assert _key(_axpy, *_args(n=65)) != base
    assert _key(_axpy, *_args(dtype=np.float64)) != base

    def scaled(a, b, s):
        return a * s + b

    assert _key(scaled, *_args(), 2.0) != _key(scaled, *_args(), 3.0)


def test_key_covers_policy_and_body(cache):
    def f(a: ts.Tensor["N", ts.bf16], b: ts.Tensor["N", ts.bf16]):  # noqa: F821
        return a + b

    plain = _key(f, *_args(dtype=ml_dtypes.bfloat16))

    def f(a: ts.Tensor["N", ts.bf16 @ ts.accum(ts.f32)], b: ts.Tensor["N", ts.bf16]):  # noqa: F811,F821
        return a + b

    assert _key(f, *_args(dtype=ml_dtypes.bfloat16)) != plain

    def g(a, b):
        return a * 2.0 + b

    def g2(a, b):
        return a * 3.0 + b

    g2.__name__ = "g"
    assert _key(g, *_args()) != _key(g2, *_args())


def test_key_covers_env_switches_and_compiler(cache, monkeypatch):
    base = _key(_axpy, *_args())
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    on = _key(_axpy, *_args())
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "0")
    off = _key(_axpy, *_args())
    assert on != off and base in (on, off)  # unset: the device decides
    monkeypatch.delenv("TESSERA_SM90_MATMUL")
    monkeypatch.setenv("TESSERA_PROGRESS", "0")  # does not change the program
    assert _key(_axpy, *_args()) == base
    monkeypatch.setattr(program_cache, "compiler_fingerprint", lambda: "another compiler")
    assert _key(_axpy, *_args()) != base


def test_key_is_the_options_key(cache):
    base = _key(_axpy, *_args(), options=CompileOptions())
    assert base == _key(_axpy, *_args(), options=CompileOptions(debug=True, dump_dir=None))
    tuned = CompileOptions(sm90_tiles=(("256x256x256:bf16->bf16", (128, 4, 2, 8, 1)),))
    assert _key(_axpy, *_args(), options=tuned) != base
    assert _key(_axpy, *_args(), options=CompileOptions(sm90_kernels=True)) != base
    assert _key(_axpy, *_args(), options=CompileOptions(arch="sm_90", device="H100")) != base
    fewer = CompileOptions(graph_passes=("canonicalize", "dce"))
    assert _key(_axpy, *_args(), options=fewer) != base


def test_env_switch_change_is_a_miss(cache, monkeypatch):
    root, runs = cache
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    ts.jit(_axpy).specialize(*_args()).ir("ptx")
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "0")
    ts.jit(_axpy).specialize(*_args()).ir("ptx")
    assert runs["tile"] == 2 and len(_entries(root)) == 2


@pytest.mark.parametrize(
    "damage",
    [b"", b"{not json", b"\xff\xfe", b"[]", b'{"format": 1}', None],
    ids=["empty", "truncated", "binary", "list", "no-fields", "wrong-key"],
)
def test_corrupt_entry_is_ignored_with_a_warning_and_rebuilt(cache, damage):
    root, runs = cache
    ptx = ts.jit(_axpy).specialize(*_args()).ir("ptx")
    (entry,) = _entries(root)
    if damage is None:  # a valid entry stored under another key's name
        data = json.loads(entry.read_text())
        data["key"] = "0" * 64
        entry.write_text(json.dumps(data))
    else:
        entry.write_bytes(damage)
    with pytest.warns(UserWarning, match="corrupt compile cache entry"):
        assert ts.jit(_axpy).specialize(*_args()).ir("ptx") == ptx
    assert runs["tile"] == 2
    data = json.loads(entry.read_text())
    assert data["ptx"] == ptx and data["key"] == entry.stem
    assert ts.jit(_axpy).specialize(*_args()).ir("ptx") == ptx and runs["tile"] == 2


def test_no_disk_cache_switch(cache, monkeypatch):
    root, runs = cache
    monkeypatch.setenv("TESSERA_NO_DISK_CACHE", "1")
    ts.jit(_axpy).specialize(*_args()).ir("ptx")
    ts.jit(_axpy).specialize(*_args()).ir("ptx")
    assert runs["tile"] == 2 and not _entries(root)


def test_process_local_programs_are_not_cached(cache, monkeypatch):
    root, _ = cache
    spec = ts.jit(_axpy).specialize(*_args())
    assert compiler.program_key(spec) is not None
    monkeypatch.setenv("TESSERA_DUMP_DIR", str(root / "dump"))  # an observer of every pass
    assert compiler.program_key(ts.jit(_axpy).specialize(*_args())) is None
    monkeypatch.delenv("TESSERA_DUMP_DIR")

    @ts.custom_vjp
    def twice(x):
        return x * 2.0

    twice.defvjp(lambda x: (x * 2.0, None), lambda saved, g: (g * 2.0,))
    custom = ts.jit(lambda a, b: twice(a) + b).specialize(*_args())
    assert compiler.CUSTOM_VJP_ATTR in str(custom.traced)
    assert compiler.program_key(custom) is None


def test_warm_hit_in_a_fresh_process(tmp_path):
    """A second process compiling the transformer block reads the PTX from the cache."""
    script = f"""
import sys, numpy as np
sys.path.insert(0, {str(ROOT / "examples")!r})
import transformer_block as tb
import tessera as ts
s, d = 17, 32
args = [np.zeros((s, d), np.float32), np.zeros((d, 3 * d), np.float32),
        np.zeros((d, d), np.float32)]
spec = ts.jit(tb.block.fn).specialize(*args)
ptx = spec.ir("ptx")
levels = sorted(spec.levels)
from xdsl.dialects import func
(host,) = [op for op in spec.launch_module().body.block.ops if isinstance(op, func.FuncOp)]
import hashlib
print("HIT" if spec.launch_text is not None else "MISS", levels,
      hashlib.sha256(ptx.encode()).hexdigest(), hashlib.sha256(str(host).encode()).hexdigest())
"""
    env = {**os.environ, "TESSERA_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("TESSERA_NO_DISK_CACHE", None)
    outs = [
        subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        ).stdout.split()
        for _ in range(2)
    ]
    assert outs[0][0] == "MISS" and outs[1][0] == "HIT"
    assert outs[1][1:-2] == ["['ptx']"], "a hit lowers nothing"
    assert outs[0][-2:] == outs[1][-2:], "same PTX and the same host function"
