"""``tessera-fuzz``: mutation fuzzing of ``tessera-opt`` and argument fuzzing of ``@ts.jit``.

IR fuzzing takes the chunks of the ``tests/filecheck`` corpus, applies a few
mutations (:mod:`tessera.tools.fuzz_mutate`) and runs each mutant through a
pipeline (one of its file's ``-p`` pipelines, or any registered pass) the way
``tessera-opt`` does, in long-lived worker processes. Each case ends as one of

* ``ok``: the pipeline ran, and its output verifies and prints back the same
  after a re-parse;
* ``error``: a diagnostic at ``file:line:col`` (what bad input must give);
* ``unlocated``: an error that names no line (a front-end ``TesseraError`` without
  the user's ``file.py:line``; ``tessera-opt`` always names one);
* ``traceback``: any other exception (a bug);
* ``hang``: the case ran past its time limit or out of memory (a bug);
* ``invalid``: a pass produced IR that does not verify, or does not print back
  to the same text after a re-parse (a bug).

Front-end fuzzing (:mod:`tessera.tools.fuzz_frontend`) calls ``@ts.jit``
functions with arguments of wrong shapes, dtypes and kinds; there a bad call
must raise a ``TesseraError``.

Cases are a function of ``--seed`` and their number, so any finding can be
replayed with ``--replay N``. The exit status is 1 if any case was a bug.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import re
import resource
import shlex
import signal
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from io import BytesIO
from multiprocessing.connection import Connection, wait
from pathlib import Path

from tessera.tools.fuzz_mutate import mutate

BUGS = ("traceback", "hang", "invalid")
OUTCOMES = ("ok", "error", "unlocated", *BUGS)

# Passes with default options that any mutant may also be run through.
EXTRA_PIPELINES = [
    "", "canonicalize,cse", "dce", "algebraic-simplify", "fuse-elementwise",
    "fuse-matmul-epilogue", "fuse-attention", "graph-optimize", "tessera-graph-pipeline",
    "shard-propagation", "spmd-partition", "autodiff", "lower-graph-to-tile",
    "lower-tile-to-target", "lower-matmul-sm90", "lower-attention-sm90",
    "tessera-ptx-pipeline -t ptx", "lower-tile-to-target -t ptx",
]

_PIPELINE = re.compile(r"""(?:^|\s)-p\s+('[^']*'|"[^"]*"|\S+)""")


@dataclass(frozen=True)
class Seed:
    """One ``// -----`` chunk of a corpus file and the pipelines its RUN lines use."""

    path: str
    chunk: int
    text: bytes
    pipelines: tuple[str, ...]


@dataclass(frozen=True)
class Case:
    """A mutant and the pipeline (``-p`` spec, optionally followed by ``-t TARGET``) to run."""

    number: int
    seed: Seed
    text: bytes
    mutations: tuple[str, ...]
    pipeline: str

    def describe(self) -> str:
        return (
            f"case {self.number}: {self.seed.path} chunk {self.seed.chunk}, "
            f"mutations {', '.join(self.mutations) or '(none)'}, pipeline '{self.pipeline}'"
        )


@dataclass
class Result:
    outcome: str
    detail: str = ""


def _run_pipelines(text: str) -> list[str]:
    pipelines: list[str] = []
    for line in text.splitlines():
        if "RUN:" not in line or "tessera-opt" not in line:
            continue
        command = line.split("RUN:", 1)[1].split("|")[0]
        m = _PIPELINE.search(command)
        spec = m.group(1).strip("'\"") if m else ""
        if " -t ptx" in command:
            spec += " -t ptx"
        pipelines.append(spec)
    return pipelines


def load_corpus(root: Path) -> list[Seed]:
    """Every ``// -----`` chunk of the ``.mlir`` files under ``root``."""
    from tessera.tools.opt import split_chunks

    seeds: list[Seed] = []
    for path in sorted(root.rglob("*.mlir")):
        if "Output" in path.parts:
            continue
        data = path.read_bytes()
        pipelines = tuple(dict.fromkeys(_run_pipelines(data.decode("utf-8", "replace"))))
        for i, (chunk, _) in enumerate(split_chunks(data)):
            if chunk.strip():
                seeds.append(Seed(str(path.relative_to(root)), i, chunk, pipelines or ("",)))
    return seeds


def make_case(seeds: list[Seed], seed: int, number: int) -> Case:
    """Case ``number`` of the run with random seed ``seed``."""
    rng = random.Random(seed * 1_000_003 + number)
    base = rng.choice(seeds)
    count = rng.choice([0, 1, 1, 1, 2, 2, 3]) if number else 0
    text, names = mutate(base.text, rng, count)
    if rng.random() < 0.6:
        pipeline = rng.choice(base.pipelines)
    else:
        pipeline = rng.choice(EXTRA_PIPELINES)
    return Case(number, base, text, tuple(names), pipeline)


# --- running one case (in a worker) --------------------------------------------------


class _Timeout(BaseException):
    """The case ran past its time limit (a BaseException, so no ``except Exception`` eats it)."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _Timeout()


class IRRunner:
    """Runs cases the way ``tessera-opt`` does, checking each pass's output."""

    def __init__(self) -> None:
        from tessera.tools.opt import TesseraOptMain

        self._main_type = TesseraOptMain
        self._mains: dict[str, TesseraOptMain] = {}

    def _main(self, pipeline: str):
        main = self._mains.get(pipeline)
        if main is None:
            main = self._main_type(args=shlex.split(f"-p '{pipeline.split(' -t ')[0]}'")
                                   + (["-t", pipeline.split(" -t ")[1]] if " -t " in pipeline
                                      else []))
            self._mains[pipeline] = main
        return main

    def run(self, case: Case) -> Result:
        from xdsl.utils.exceptions import ArgSpecParseError

        from tessera.tools.opt import user_error_types

        try:
            main = self._main(case.pipeline)
        except SystemExit:
            return Result("error", f"bad pipeline '{case.pipeline}'")
        except ArgSpecParseError as e:  # a seed's RUN line the fuzzer read wrongly
            return Result("error", f"bad pipeline '{case.pipeline}': {e}")
        try:
            module = main.parse_chunk(BytesIO(case.text), "mlir", 0)
        except user_error_types() as e:
            return self._error(main, e)
        except (_Timeout, MemoryError):
            raise
        except Exception as e:
            return Result("traceback", f"parse: {type(e).__name__}: {e}"[:500])
        for p in main.pipeline.passes:
            try:
                p.apply(main.ctx, module)
            except user_error_types() as e:
                return self._error(main, e)
            except (_Timeout, MemoryError):
                raise
            except Exception as e:
                return Result("traceback", f"{p.name}: {type(e).__name__}: {e}"[:500])
            problem = self._check(main, module)
            if problem is not None:
                return Result("invalid", f"after {p.name}: {problem}"[:500])
        try:
            main.output_resulting_program(module)
        except user_error_types() as e:
            return self._error(main, e)
        except (_Timeout, MemoryError):
            raise
        except Exception as e:
            return Result("traceback", f"output: {type(e).__name__}: {e}"[:500])
        return Result("ok")

    @staticmethod
    def _error(main, e: BaseException) -> Result:
        diag = main.diagnostic_for(e, 0)
        return Result("error" if diag.line is not None else "unlocated", str(diag)[:500])

    @staticmethod
    def _check(main, module) -> str | None:
        """Why ``module`` (a pass's output) is invalid, or None."""
        from tessera.ir.diagnostics import LocatedError, LocatingParser, verify_located
        from tessera.ir.dominance import find_dominance_violation

        try:
            module.verify()
        except Exception as e:
            return f"does not verify: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        violation = find_dominance_violation(module)
        if violation is not None:
            return f"'{violation.op.name}' {violation.message}"
        printed = str(module)
        try:
            parser = LocatingParser(main.ctx, printed, "<output>")
            again = parser.parse_module()
            verify_located(again, parser)
        except LocatedError as e:
            return f"does not re-parse: {e.msg}"
        except Exception as e:
            return f"does not re-parse: {type(e).__name__}: {e}"
        if str(again) != printed:
            return "prints differently after a re-parse"
        return None


def _limit_memory(extra_bytes: int) -> None:
    """Cap this process's address space at its current size plus ``extra_bytes``."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[0])
        size = pages * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (size + extra_bytes, resource.RLIM_INFINITY))
    except (OSError, ValueError):
        pass


def _worker(conn: Connection, corpus: str, seed: int, time_limit: float, memory: int) -> None:
    """Run the case numbers that arrive on ``conn``; send back (number, Result)."""
    seeds = load_corpus(Path(corpus))
    runner = IRRunner()
    from tessera.tools.fuzz_frontend import FrontendRunner

    frontend = FrontendRunner()
    _limit_memory(memory)
    signal.signal(signal.SIGPROF, _on_alarm)
    warnings.simplefilter("ignore")
    sys.setrecursionlimit(5000)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        kind, number = job
        signal.setitimer(signal.ITIMER_PROF, time_limit)
        try:
            if kind == "ir":
                result = runner.run(make_case(seeds, seed, number))
            else:
                result = frontend.run(seed, number)
        except _Timeout:
            result = Result("hang", f"over the {time_limit:g} s CPU time limit")
        except MemoryError:
            result = Result("hang", "out of memory")
        except RecursionError:
            result = Result("traceback", "RecursionError")
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        conn.send((number, result))


# --- the driver ------------------------------------------------------------------------


@dataclass
class FuzzRun:
    """The reports of a run (``ir`` and ``frontend``) and the time it took."""

    reports: dict[str, Report]
    wall_seconds: float
    cpu_seconds: float  # of the worker processes

    @property
    def bugs(self) -> int:
        return sum(r.bugs for r in self.reports.values())


@dataclass
class Report:
    """Counts per outcome and the first findings of each bug kind."""

    counts: Counter[str] = field(default_factory=Counter)
    findings: list[tuple[str, int, str]] = field(default_factory=list)

    def add(self, kind: str, number: int, result: Result) -> None:
        self.counts[result.outcome] += 1
        if result.outcome in BUGS:
            self.findings.append((kind, number, f"{result.outcome}: {result.detail}"))

    @property
    def bugs(self) -> int:
        return sum(self.counts[b] for b in BUGS)

    def summary(self) -> str:
        return ", ".join(f"{k} {self.counts[k]}" for k in OUTCOMES)


class _Pool:
    """Worker processes fed one case at a time; a worker that stops answering is replaced."""

    def __init__(self, jobs: int, corpus: str, seed: int, time_limit: float, memory: int):
        self._ctx = mp.get_context("fork")
        self._args = (corpus, seed, time_limit, memory)
        self._limit = time_limit
        self.cpu_seconds = 0.0  # CPU time of the workers that have finished
        self._workers = [self._start() for _ in range(jobs)]

    def _start(self) -> tuple[mp.process.BaseProcess, Connection]:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker, args=(child, *self._args), daemon=True)
        proc.start()
        child.close()
        return proc, parent

    def run(self, jobs: Iterator[tuple[str, int]]) -> Iterator[tuple[str, int, Result]]:
        busy: dict[Connection, tuple[int, str, int, float, float]] = {}
        pending = iter(jobs)
        startup = 120.0  # the first case of a worker also imports Tessera

        def feed(index: int, fresh: bool) -> bool:
            job = next(pending, None)
            if job is None:
                return False
            proc, conn = self._workers[index]
            conn.send(job)
            busy[conn] = (index, job[0], job[1], time.monotonic() + (startup if fresh else 0),
                          _cpu_seconds(proc.pid) + (startup if fresh else 0))
            return True

        for index in range(len(self._workers)):
            feed(index, True)
        while busy:
            ready = wait(list(busy), timeout=1.0)
            now = time.monotonic()
            for conn in ready:
                index, kind, number, _, _ = busy.pop(conn)
                try:
                    _, result = conn.recv()
                except EOFError:  # the worker died (a crash of the interpreter itself)
                    result = Result("traceback", "the worker process died")
                    self._replace(index)
                    yield kind, number, result
                    feed(index, True)
                    continue
                yield kind, number, result
                feed(index, False)
            for conn, (index, kind, number, since, cpu) in list(busy.items()):
                if conn in ready:
                    continue
                spent = _cpu_seconds(self._workers[index][0].pid) - cpu
                if spent > 2 * self._limit + 5 or now - since > 30 * self._limit + 300:
                    # Stuck where the alarm cannot reach (in C code), or blocked: replace it.
                    busy.pop(conn)
                    self._replace(index)
                    yield kind, number, Result("hang", f"over the {self._limit:g} s limit (killed)")
                    feed(index, True)

    def _replace(self, index: int) -> None:
        proc, conn = self._workers[index]
        self.cpu_seconds += _cpu_seconds(proc.pid)
        proc.kill()
        proc.join()
        conn.close()
        self._workers[index] = self._start()

    def close(self) -> None:
        for proc, conn in self._workers:
            self.cpu_seconds += _cpu_seconds(proc.pid)
            try:
                conn.send(None)
            except OSError:
                pass
        for proc, conn in self._workers:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
            conn.close()


def _cpu_seconds(pid: int | None) -> float:
    """The CPU time process ``pid`` has used (0 if it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def default_corpus() -> Path:
    """``tests/filecheck`` of the source tree this module is in."""
    return Path(__file__).resolve().parents[2] / "tests" / "filecheck"


def fuzz(
    ir_cases: int,
    frontend_cases: int = 0,
    *,
    seed: int = 0,
    jobs: int = 2,
    time_limit: float = 30.0,
    memory_bytes: int = 3 << 30,
    corpus: Path | None = None,
    log=None,
) -> FuzzRun:
    """Run ``ir_cases`` IR cases and ``frontend_cases`` front-end cases."""
    start = time.monotonic()
    corpus = corpus or default_corpus()
    reports = {"ir": Report(), "frontend": Report()}
    jobs_list = [("ir", i) for i in range(ir_cases)] + [
        ("frontend", i) for i in range(frontend_cases)
    ]
    pool = _Pool(jobs, str(corpus), seed, time_limit, memory_bytes)
    done = 0
    try:
        for kind, number, result in pool.run(iter(jobs_list)):
            reports[kind].add(kind, number, result)
            done += 1
            if log is not None and result.outcome in BUGS:
                log(f"[{kind} {number}] {result.outcome}: {result.detail}")
            if log is not None and done % 1000 == 0:
                log(f"{done} cases: ir {reports['ir'].summary()}")
    finally:
        pool.close()
    return FuzzRun(reports, time.monotonic() - start, pool.cpu_seconds)


def replay(number: int, seed: int, corpus: Path | None = None, frontend: bool = False) -> None:
    """Print case ``number`` and run it here, with tracebacks shown."""
    if frontend:
        from tessera.tools.fuzz_frontend import FrontendRunner

        runner = FrontendRunner()
        print(runner.describe(seed, number))
        print(runner.run(seed, number, reraise=True))
        return
    case = make_case(load_corpus(corpus or default_corpus()), seed, number)
    print(f"// {case.describe()}")
    sys.stdout.write(case.text.decode("utf-8", "replace"))
    print("\n// result:", IRRunner().run(case))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tessera-fuzz",
        description="Mutation fuzzing of tessera-opt over the tests/filecheck corpus, and "
        "argument fuzzing of @ts.jit. Exit status 1 if any case was a traceback, a hang or "
        "an invalid pass output.",
    )
    parser.add_argument("--cases", type=int, default=2000, help="IR cases (default 2000)")
    parser.add_argument("--frontend-cases", type=int, default=500,
                        help="front-end cases (default 500)")
    parser.add_argument("--long", action="store_true",
                        help="a long run: 100000 IR and 10000 front-end cases")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--time-limit", type=float, default=30.0,
                        help="CPU seconds per case before it counts as a hang (default 30)")
    parser.add_argument("--corpus", type=Path, default=None,
                        help="directory of .mlir seeds (default tests/filecheck)")
    parser.add_argument("--replay", type=int, default=None, metavar="N",
                        help="print IR case N of --seed and run it with tracebacks")
    parser.add_argument("--replay-frontend", type=int, default=None, metavar="N",
                        help="describe front-end case N of --seed and run it")
    args = parser.parse_args(argv)
    if args.replay is not None:
        replay(args.replay, args.seed, args.corpus)
        return 0
    if args.replay_frontend is not None:
        replay(args.replay_frontend, args.seed, frontend=True)
        return 0
    if args.long:
        args.cases, args.frontend_cases = 100_000, 10_000
    run = fuzz(args.cases, args.frontend_cases, seed=args.seed, jobs=args.jobs,
               time_limit=args.time_limit, corpus=args.corpus,
               log=lambda s: print(s, file=sys.stderr, flush=True))
    for kind, report in run.reports.items():
        print(f"{kind}: {report.summary()}")
    print(f"{args.cases + args.frontend_cases} cases in {run.wall_seconds:.1f} s "
          f"({run.cpu_seconds:.1f} s CPU in {args.jobs} workers; seed {args.seed})")
    return 1 if run.bugs else 0


if __name__ == "__main__":
    sys.exit(main())
