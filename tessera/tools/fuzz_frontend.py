"""Front-end argument fuzzing: ``@ts.jit`` programs called with wrong shapes, dtypes and kinds.

A case picks one of :data:`PROGRAMS` and a random argument list (numpy arrays of
any rank and dtype, torch tensors, Python scalars, lists, ``None``, strings,
objects, a missing or an extra argument). A call either returns, or raises a
``TesseraError`` (``error`` when the message names a ``file.py:line``,
``unlocated`` otherwise); any other exception is a ``traceback``.
"""

from __future__ import annotations

import random
import re
import traceback
from collections.abc import Callable
from typing import Any

_LOCATED = re.compile(r"\.py:\d+")


# The programs, compiled under a file name outside the tessera package: to Tessera they
# are user code, whose file:line an error must name.
PROGRAM_FILE = "fuzz_programs.py"
_PROGRAM_SOURCE = """
mk, kn, fixed = ts.Tensor["M", "K", ts.f32], ts.Tensor["K", "N", ts.f32], ts.Tensor[4, 3, ts.f32]

def annotated_matmul(a: mk, b: kn):
    return a @ b

def fixed_add(x: fixed, y: fixed):
    return x + y

PROGRAMS = {
    "matmul": (lambda a, b: a @ b, 2),
    "add": (lambda x, y: x + y, 2),
    "softmax": (lambda x: ts.softmax(x), 1),
    "sum": (lambda x: ts.sum(x), 1),
    "relu-scale": (lambda x: ts.relu(x) * 2.0, 1),
    "layernorm": (lambda x: ts.layernorm(x), 1),
    "transpose": (lambda x: ts.transpose(x), 1),
    "reshape": (lambda x: ts.reshape(x, (2, -1)), 1),
    "attention": (lambda q, k, v: ts.flash_attention(q, k, v), 3),
    "where": (lambda c, x, y: ts.where(c, x, y), 3),
    "cast": (lambda x: ts.cast(x, ts.bf16), 1),
    "annotated-matmul": (annotated_matmul, 2),
    "fixed-add": (fixed_add, 2),
}
"""


def _programs() -> dict[str, tuple[Callable[..., Any], int]]:
    """Name -> (function to jit, number of arguments)."""
    import tessera as ts

    namespace: dict[str, Any] = {"ts": ts}
    exec(compile(_PROGRAM_SOURCE, PROGRAM_FILE, "exec"), namespace)
    return namespace["PROGRAMS"]


_DIMS = [0, 1, 2, 3, 4, 7, 8]
_NP_DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8",
              "bool", "complex64"]
_TORCH_DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "bool"]


def _array(rng: random.Random, shape: tuple[int, ...] | None = None) -> Any:
    import ml_dtypes
    import numpy as np

    if shape is None:
        shape = tuple(rng.choice(_DIMS) for _ in range(rng.choice([0, 1, 2, 2, 2, 3, 4])))
    name = rng.choice(_NP_DTYPES)
    dtype = ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)
    data = np.random.default_rng(rng.randrange(2**32)).standard_normal(shape)
    special = rng.random()
    if special < 0.1 and data.size:
        data.flat[0] = rng.choice([np.nan, np.inf, -np.inf, -0.0, 1e38])
    with np.errstate(all="ignore"):
        return data.astype(dtype)


def _argument(rng: random.Random, like: Any) -> Any:
    """A random argument, often close to the well-formed ``like``."""
    import numpy as np
    import torch

    kind = rng.random()
    if kind < 0.35:
        return _array(rng)
    if kind < 0.5 and isinstance(like, np.ndarray):  # right shape, other dtype
        return _array(rng, like.shape)
    if kind < 0.6 and isinstance(like, np.ndarray) and like.ndim:  # one dim off
        shape = list(like.shape)
        shape[rng.randrange(len(shape))] += rng.choice([-1, 1, 5])
        return _array(rng, tuple(max(d, 0) for d in shape))
    if kind < 0.7:
        t = torch.from_numpy(np.asarray(_array(rng), dtype=np.float64))
        return t.to(getattr(torch, rng.choice(_TORCH_DTYPES)))
    if kind < 0.8:
        return rng.choice([0, 1, -3, 2.5, float("nan"), True, 10**30, 1e308, complex(1, 2)])
    if kind < 0.9:
        return rng.choice([[1.0, 2.0], [[1, 2], [3]], [], (1, 2, 3), [[1.0, 2.0], [3.0, 4.0]]])
    return rng.choice([None, "x", b"\x00", object(), {"a": 1}, np.float32(1.5),
                       np.array("text"), np.array([object()])])


def _good_args(name: str, rng: random.Random) -> list[Any]:
    """Well-formed arguments for program ``name`` (the fuzzer perturbs some of them)."""
    import numpy as np

    f = np.float32
    g = np.random.default_rng(rng.randrange(2**32))
    if name in ("matmul", "annotated-matmul"):
        return [g.standard_normal((4, 3)).astype(f), g.standard_normal((3, 5)).astype(f)]
    if name == "attention":
        return [g.standard_normal((1, 2, 8, 16)).astype(f) for _ in range(3)]
    if name == "where":
        x = g.standard_normal((4, 3)).astype(f)
        return [x > 0, x, g.standard_normal((4, 3)).astype(f)]
    if name in ("add", "fixed-add"):
        return [g.standard_normal((4, 3)).astype(f), g.standard_normal((4, 3)).astype(f)]
    return [g.standard_normal((4, 6)).astype(f)]


class FrontendRunner:
    """Builds and runs front-end cases."""

    def __init__(self) -> None:
        self._programs: dict[str, tuple[Callable[..., Any], int]] | None = None

    def programs(self) -> dict[str, tuple[Callable[..., Any], int]]:
        if self._programs is None:
            self._programs = _programs()
        return self._programs

    def case(self, seed: int, number: int) -> tuple[str, list[Any], str]:
        """Program name, arguments and a description of case ``number``."""
        rng = random.Random(seed * 7_000_003 + number)
        name = rng.choice(sorted(self.programs()))
        args = _good_args(name, rng)
        edits: list[str] = []
        for i in range(len(args)):
            if rng.random() < 0.6:
                args[i] = _argument(rng, args[i])
                edits.append(f"argument {i}")
        r = rng.random()
        if r < 0.05:
            args.append(_argument(rng, None))
            edits.append("one argument too many")
        elif r < 0.1 and args:
            args.pop()
            edits.append("one argument too few")
        return name, args, ", ".join(edits) or "well-formed"

    def describe(self, seed: int, number: int) -> str:
        name, args, edits = self.case(seed, number)
        shown = ", ".join(_show(a) for a in args)
        return f"frontend case {number}: {name}({shown}) [{edits}]"

    def run(self, seed: int, number: int, reraise: bool = False):
        import tessera as ts
        from tessera.frontend.errors import TesseraError
        from tessera.tools.fuzz import Result

        name, args, _ = self.case(seed, number)
        fn, _ = self.programs()[name]
        try:
            ts.jit(fn)(*args)
        except TesseraError as e:
            text = str(e)
            located = bool(_LOCATED.search(text))
            return Result("error" if located else "unlocated", f"{name}: {text.splitlines()[0]}")
        except (MemoryError, RecursionError):
            raise
        except Exception as e:
            if reraise:
                raise
            where = traceback.extract_tb(e.__traceback__)[-1]
            if where.filename == PROGRAM_FILE:
                # The program's own Python failed (a tuple + an int, say): as it would
                # without Tessera.
                return Result("error", f"{name}: {type(e).__name__} in the program: {e}")
            return Result(
                "traceback",
                f"{name}: {type(e).__name__}: {str(e)[:200]} "
                f"(at {where.filename}:{where.lineno})",
            )
        return Result("ok")


def _show(value: Any) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{type(value).__module__.split('.')[0]}[{tuple(shape)}, {dtype}]"
    return repr(value)[:40]
