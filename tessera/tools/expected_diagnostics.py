"""``--verify-diagnostics``: compare the diagnostics of a run with the ones the input expects.

As in MLIR, the input states what it expects in comments::

    // expected-error @+1 {{inner dimensions differ}}
    %r = tgraph.matmul %a, %b : ...
    %s = tgraph.exp %r : ...  // expected-warning {{...}}

The text between ``{{`` and ``}}`` must occur in the message. The line is the
comment's own, or shifted by ``@+N``/``@-N``, or ``@above``/``@below`` (the line
before/after); ``@unknown`` expects a diagnostic that names no line (a warning:
errors always have one, the module's when nothing closer is known). Each expected diagnostic must be
produced, and each produced one must be expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SEVERITIES = ("error", "warning", "remark", "note")

_EXPECTED = re.compile(
    r"expected-(error|warning|remark|note)"
    r"(?:\s*@\s*([+-]\d+|above|below|unknown))?"
    r"\s*\{\{(.*?)\}\}"
)


@dataclass(frozen=True)
class Diagnostic:
    """One message of a run: ``file:line:col: severity: message`` (no line: ``file: ...``)."""

    severity: str
    message: str
    file: str
    line: int | None = None
    col: int | None = None

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.file}: {self.severity}: {self.message}"
        return f"{self.file}:{self.line}:{self.col or 1}: {self.severity}: {self.message}"


@dataclass
class Expected:
    """An ``expected-*`` annotation: ``line`` None means ``@unknown``."""

    severity: str
    text: str
    line: int | None
    written_at: int
    matched: bool = False


def parse_expected(text: str, line_offset: int = 0) -> list[Expected]:
    """The annotations in ``text``, with lines numbered from ``line_offset + 1``."""
    found: list[Expected] = []
    for number, line in enumerate(text.splitlines(), start=line_offset + 1):
        if "expected-" not in line:
            continue
        for m in _EXPECTED.finditer(line):
            severity, where, message = m.group(1), m.group(2), m.group(3)
            target: int | None
            if where is None:
                target = number
            elif where == "unknown":
                target = None
            elif where == "above":
                target = number - 1
            elif where == "below":
                target = number + 1
            else:
                target = number + int(where)
            found.append(Expected(severity, message, target, number))
    return found


def check(
    produced: list[Diagnostic], expected: list[Expected], file: str
) -> list[Diagnostic]:
    """The mismatches between ``produced`` and ``expected``, as error diagnostics."""
    problems: list[Diagnostic] = []
    for diag in produced:
        for exp in expected:
            if (
                not exp.matched
                and exp.severity == diag.severity
                and exp.line == diag.line
                and exp.text in diag.message
            ):
                exp.matched = True
                break
        else:
            problems.append(
                Diagnostic(
                    "error",
                    f"unexpected {diag.severity}: {diag.message}",
                    diag.file,
                    diag.line,
                    diag.col,
                )
            )
    for exp in expected:
        if not exp.matched:
            where = "with no location" if exp.line is None else f"at line {exp.line}"
            problems.append(
                Diagnostic(
                    "error",
                    f'expected {exp.severity} "{exp.text}" {where} was not produced',
                    file,
                    exp.written_at,
                    1,
                )
            )
    return problems
