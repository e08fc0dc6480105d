"""The source of a ``@ts.kernel`` function: its AST, its lines and located errors.

A tile kernel is compiled from its Python source, not by running it, so the
front end reads the function's text (:func:`inspect.getsource`), parses it
with :mod:`ast`, and keeps the file name and first line number so every error
can quote the user's line::

    saxpy.py:7: error: cannot write to 'x': the argument is read-only (declare it `mut f32[n]`)
        x[i] = alpha * x[i]

The guide's spelling ``y: mut f32[n]`` is not valid Python; kernels given as
text (:func:`KernelSource.from_text`) are rewritten to ``y: mut[f32[n]]``
before parsing, so the guide's examples compile verbatim from a string.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

from tessera.frontend.errors import TesseraError

# ``x: mut f32[n]`` (guide syntax) -> ``x: mut[f32[n]]`` (Python syntax).
_MUT_PREFIX = re.compile(r"(?P<head>[:(,]\s*)mut\s+(?P<ann>[A-Za-z_][\w.]*\[[^\]]*\])")


class KernelCompileError(TesseraError):
    """A ``@ts.kernel`` construct that cannot be compiled; names file:line and quotes it."""

    def __init__(self, message: str, file: str = "", line: int = 0, text: str = ""):
        self.message = message
        self.file = file
        self.line = line
        self.text = text
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"{self.file}:{self.line}: error: {self.message}" if self.file else self.message
        return head + (f"\n    {self.text.strip()}" if self.text.strip() else "")


def rewrite_mut_syntax(text: str) -> str:
    """Turn the guide's ``mut f32[n]`` annotations into ``mut[f32[n]]``."""
    return _MUT_PREFIX.sub(lambda m: f"{m.group('head')}mut[{m.group('ann')}]", text)


@dataclass
class KernelSource:
    """A kernel's ``ast.FunctionDef`` with the file and line numbers of its text."""

    fn_def: ast.FunctionDef
    file: str
    first_line: int
    lines: list[str]
    globals: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_function(fn: Any) -> KernelSource:
        """Read and parse the source of the Python function ``fn``."""
        try:
            lines, first = inspect.getsourcelines(fn)
            file = inspect.getsourcefile(fn) or inspect.getfile(fn)
        except (OSError, TypeError) as e:
            raise KernelCompileError(
                f"cannot read the source of kernel '{getattr(fn, '__name__', fn)}' ({e}); "
                "define kernels in a file, or use ts.kernel.from_source(text)"
            ) from None
        text = textwrap.dedent("".join(lines))
        namespace = dict(getattr(fn, "__globals__", {}))
        closure = inspect.getclosurevars(fn) if inspect.isfunction(fn) else None
        if closure is not None:
            namespace.update(closure.nonlocals)
        return KernelSource._parse(text, file, first, namespace, getattr(fn, "__name__", None))

    @staticmethod
    def from_text(text: str, namespace: dict[str, Any], file: str = "<kernel>") -> KernelSource:
        """Parse kernel text written in the guide's syntax (``y: mut f32[n]`` accepted)."""
        return KernelSource._parse(rewrite_mut_syntax(textwrap.dedent(text)), file, 1, namespace)

    @staticmethod
    def _parse(
        text: str, file: str, first: int, namespace: dict[str, Any], name: str | None = None
    ) -> KernelSource:
        try:
            tree = ast.parse(text)
        except SyntaxError as e:
            line = (e.lineno or 1) + first - 1
            raise KernelCompileError(
                f"syntax error: {e.msg}", file, line, e.text or ""
            ) from None
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        if name is not None:
            defs = [d for d in defs if d.name == name] or defs
        if not defs:
            raise KernelCompileError("no function definition found in the kernel source", file)
        return KernelSource(defs[0], file, first, text.splitlines(), namespace)

    def line_of(self, node: ast.AST) -> int:
        """The line number of ``node`` in the user's file."""
        return getattr(node, "lineno", 1) + self.first_line - 1

    def text_of(self, node: ast.AST) -> str:
        """The source line of ``node``."""
        idx = getattr(node, "lineno", 1) - 1
        return self.lines[idx] if 0 <= idx < len(self.lines) else ""

    def error(self, node: ast.AST, message: str) -> KernelCompileError:
        """A :class:`KernelCompileError` located at ``node``."""
        return KernelCompileError(message, self.file, self.line_of(node), self.text_of(node))
