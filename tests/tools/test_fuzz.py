"""tessera-fuzz: the mutations, and the short CI run (fixed seed) with no bugs found.

The long mode is ``python -m tessera.tools.fuzz --long`` (100,000 IR cases and 10,000
front-end cases)."""

import random

import pytest

from tessera.tools.fuzz import (
    BUGS,
    Case,
    IRRunner,
    Seed,
    default_corpus,
    fuzz,
    load_corpus,
    make_case,
)
from tessera.tools.fuzz_frontend import FrontendRunner
from tessera.tools.fuzz_mutate import MUTATIONS, mutate, tokenize

CI_IR_CASES = 2000
CI_FRONTEND_CASES = 500


def test_tokenize_round_trips():
    for seed in load_corpus(default_corpus())[:40]:
        assert b"".join(tokenize(seed.text)) == seed.text


def test_mutations_change_text_and_are_deterministic():
    text = b'%0 = tgraph.matmul %a, %b tile_shape = [32, 32, 32] : (tensor<4x8xf32>) -> tensor<4x8xf32>\n"s"\n'
    for name, fn in MUTATIONS.items():
        outs = {fn(text, random.Random(i)) for i in range(20)}
        assert outs - {text}, name
        assert fn(text, random.Random(3)) == fn(text, random.Random(3)), name
    assert mutate(text, random.Random(1), 3) == mutate(text, random.Random(1), 3)


def test_cases_are_a_function_of_seed_and_number():
    seeds = load_corpus(default_corpus())
    assert len(seeds) > 200
    assert make_case(seeds, 5, 17) == make_case(seeds, 5, 17)
    assert make_case(seeds, 5, 17) != make_case(seeds, 6, 17)
    assert make_case(seeds, 0, 0).mutations == ()  # case 0 is an unmutated seed


def ir_case(text: bytes, pipeline: str) -> Case:
    return Case(0, Seed("test", 0, text, (pipeline,)), text, (), pipeline)


def test_runner_classifies_outcomes():
    runner = IRRunner()
    ok = b"func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %y = tgraph.exp %x : (tensor<4xf32>) -> tensor<4xf32>\n  func.return %y : tensor<4xf32>\n}\n"
    assert runner.run(ir_case(ok, "lower-graph-to-tile")).outcome == "ok"
    bad = ok.replace(b"tgraph.exp", b"tgraph.nope", 1)
    result = runner.run(ir_case(bad, ""))
    assert result.outcome == "error" and ":2:8: error: Operation tgraph.nope" in result.detail


def test_runner_reports_pass_output_that_breaks_dominance():
    """A pass that moves a definition after its use produced invalid IR: not an error."""
    from xdsl.passes import ModulePass
    from xdsl.rewriter import InsertPoint, Rewriter

    from tessera.ir import graph as g

    class MoveDefinitionDown(ModulePass):
        name = "move-definition-down"

        def apply(self, ctx, op):
            first, second = [o for o in op.walk() if isinstance(o, g.ExpOp)]
            first.detach()
            Rewriter.insert_op(first, InsertPoint.after(second))

    import dataclasses

    runner = IRRunner()
    main = runner._main("")
    main.pipeline = dataclasses.replace(main.pipeline, passes=(MoveDefinitionDown(),))
    text = (b"func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
            b"  %y = tgraph.exp %x : (tensor<4xf32>) -> tensor<4xf32>\n"
            b"  %z = tgraph.exp %y : (tensor<4xf32>) -> tensor<4xf32>\n"
            b"  func.return %z : tensor<4xf32>\n}\n")
    result = runner.run(ir_case(text, ""))
    assert result.outcome == "invalid"
    assert result.detail == (
        "after move-definition-down: 'tgraph.exp' operand #0 (%y) is used before it is defined"
    )


def test_frontend_cases_are_deterministic():
    runner = FrontendRunner()
    assert runner.describe(0, 5) == runner.describe(0, 5)
    assert {runner.run(0, i).outcome for i in range(30)} <= {"ok", "error", "unlocated"}


def test_fuzz_ci_run_finds_no_bugs():
    """The short run: a few thousand cases, fixed seed, no traceback, hang or invalid output.

    A case over 60 s of CPU time counts as a hang: the slowest legitimate cases (the
    generic lowering of a doubled attention backward) take about 20 s alone, more on a
    loaded 2-core machine."""
    run = fuzz(CI_IR_CASES, CI_FRONTEND_CASES, seed=0, jobs=2, time_limit=60.0)
    ir, frontend = run.reports["ir"], run.reports["frontend"]
    assert sum(ir.counts.values()) == CI_IR_CASES
    assert sum(frontend.counts.values()) == CI_FRONTEND_CASES
    assert ir.findings == [] and frontend.findings == [], (ir.findings + frontend.findings)[:10]
    assert all(ir.counts[b] == 0 for b in BUGS)
    # The run exercises both ends: programs that compile and programs that are rejected.
    assert ir.counts["ok"] > CI_IR_CASES // 20 and ir.counts["error"] > CI_IR_CASES // 4
    assert frontend.counts["ok"] > 0 and frontend.counts["error"] + frontend.counts["unlocated"] > 0


def test_frontend_regressions():
    """Front-end inputs the fuzzer found: Python scalars beyond the tensor type's range."""
    import numpy as np

    import tessera as ts

    c, x = np.array([True, False]), np.array([1.0, 2.0], np.float32)
    # torch.where(c, x, 1e308) on a float32 x saturates the scalar to inf.
    np.testing.assert_array_equal(ts.jit(lambda c, x: ts.where(c, x, 1e308))(c, x), [1.0, np.inf])
    xi = np.array([1, 2], np.int64)
    with pytest.raises(ts.TesseraTypeError, match=r"does not fit in the tensor type i64 \(test_fuzz.py:\d+\)"):
        ts.jit(lambda x: x + 10**30)(xi)
