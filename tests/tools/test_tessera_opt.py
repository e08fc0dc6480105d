"""tessera-opt's command-line habits and diagnostics, in-process (the lit suite runs it too)."""

import io
import sys
import time

import pytest

import tessera
from tessera.tools.opt import main, split_chunks

OK = b"func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  func.return %x : tensor<4xf32>\n}\n"


def run(args, stdin=b"", capsys=None, monkeypatch=None):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def test_version(capsys):
    assert isinstance(tessera.__version__, str) and tessera.__version__[0].isdigit()
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert f"Tessera version {tessera.__version__}" in capsys.readouterr().out


def test_dash_is_stdin_and_stdout(capsys, monkeypatch, tmp_path):
    rc, out, err = run(["-", "-o", "-"], OK, capsys, monkeypatch)
    assert rc == 0 and "func.func @f" in out and err == ""
    target = tmp_path / "out.mlir"
    rc, out, err = run(["-", "-o", str(target)], OK, capsys, monkeypatch)
    assert rc == 0 and out == "" and "func.func @f" in target.read_text()


def test_split_input_file_runs_every_chunk(capsys, monkeypatch):
    bad = b"func.func @g() {\n  %y = tgraph.nope\n}\n"
    text = OK + b"// -----\n" + bad + b"// -----\n" + OK.replace(b"@f", b"@h")
    rc, out, err = run(["-", "--split-input-file"], text, capsys, monkeypatch)
    assert rc == 1
    assert out.count("// -----") == 2 and "@f" in out and "@h" in out
    assert err.strip() == "<stdin>:6:8: error: Operation tgraph.nope is not registered"


def test_split_chunks_counts_lines():
    chunks = split_chunks(b"a\nb\n// -----\nc\n// ----- tail\nd")
    assert [(c, off) for c, off in chunks] == [(b"a\nb\n", 0), (b"\nc\n", 2), (b"\nd", 4)]


def test_verify_diagnostics_fails_on_missing_and_unexpected(capsys, monkeypatch):
    text = b"// expected-error @+1 {{never}}\n" + OK
    rc, _, err = run(["-", "--verify-diagnostics"], text, capsys, monkeypatch)
    assert rc == 1 and 'expected error "never" at line 2 was not produced' in err
    bad = b"func.func @f() {\n  %c = arith.constant 300 : i8\n  func.return\n}\n"
    rc, _, err = run(["-", "--verify-diagnostics"], bad, capsys, monkeypatch)
    assert rc == 1 and "<stdin>:2:" in err and "unexpected error" in err
    good = bad.replace(b"  %c", b"  // expected-error @+1 {{out of range for type i8}}\n  %c")
    rc, _, err = run(["-", "--verify-diagnostics"], good, capsys, monkeypatch)
    assert rc == 0 and err == ""


def test_invalid_utf8_is_located(capsys, monkeypatch):
    rc, _, err = run(["-"], b"func.func @f() {\n  %a = \xff\n}\n", capsys, monkeypatch)
    assert rc == 1 and err.strip() == "<stdin>:2:8: error: invalid UTF-8 byte 0xff"


def test_unterminated_string_is_linear(capsys, monkeypatch):
    """xDSL's string pattern backtracked exponentially on an unterminated literal."""
    text = b'func.func @f() {\n  %x = "ttile.foo' + b"a" * 60 + b"\n}\n"
    start = time.process_time()
    rc, _, err = run(["-"], text, capsys, monkeypatch)
    assert time.process_time() - start < 2.0
    assert rc == 1 and err.startswith("<stdin>:2:8: error: End of file reached before closing string")


def test_use_before_def_is_located_before_any_pass(capsys, monkeypatch):
    text = (b"func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
            b"  %y = tgraph.exp %z : (tensor<4xf32>) -> tensor<4xf32>\n"
            b"  %z = tgraph.exp %x : (tensor<4xf32>) -> tensor<4xf32>\n"
            b"  func.return %y : tensor<4xf32>\n}\n")
    for p in ("lower-graph-to-tile", "spmd-partition", "autodiff", "shard-propagation"):
        rc, _, err = run(["-", "-p", p], text, capsys, monkeypatch)
        assert rc == 1
        assert err.strip() == (
            "<stdin>:2:3: error: 'tgraph.exp' operand #0 (%z) is used before it is defined"
        ), p


def test_use_before_def_in_a_kernel_is_located(capsys, monkeypatch):
    text = (b"ttile.kernel @k(%x: memref<4xf32>) group_size = 32 {\n"
            b"  %v = ttile.load %x[%c0] : memref<4xf32> -> f32\n"
            b"  %c0 = arith.constant 0 : index\n"
            b"  ttile.store %v, %x[%c0] : f32, memref<4xf32>\n"
            b"  ttile.return\n}\n")
    rc, _, err = run(["-", "-p", "lower-tile-to-target"], text, capsys, monkeypatch)
    assert rc == 1
    assert err.strip() == (
        "<stdin>:2:3: error: 'ttile.load' operand #1 (%c0) is used before it is defined"
    )


def test_every_error_is_one_line(capsys, monkeypatch):
    for text in (b"func.func @f(", b"\"x\"() : () -> ()\n", b"%0 = arith.constant 1 : i32 {"):
        rc, out, err = run(["-"], text, capsys, monkeypatch)
        assert rc == 1 and out == "" and len(err.strip().splitlines()) == 1, err
        assert err.startswith("<stdin>:") and "error:" in err and "Traceback" not in err
