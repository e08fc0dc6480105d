"""Progress bars for autotuning and long compiles, drawn only on a terminal.

:func:`bar` returns a :class:`Bar` that draws with tqdm on ``stream`` (stderr
by default) when that stream is a TTY and ``TESSERA_PROGRESS`` is not ``0``;
otherwise it stays silent and costs nothing but a counter. The compile pipeline
shows a bar (through :func:`compile_observers`) when a stage has at least
``TESSERA_PROGRESS_MIN_STEPS`` passes (default 6) and lasts longer than
half a second
(:data:`COMPILE_BAR_DELAY`); it is erased when the stage ends.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tessera.options import RuntimeOptions

MIN_STEPS_DEFAULT = 6
"""Fewest passes a compile stage needs before it gets a bar."""

COMPILE_BAR_DELAY = 0.5
"""Seconds a compile stage runs before its bar is drawn (quick compiles draw nothing)."""


def enabled(stream: TextIO | None = None) -> bool:
    """Whether bars are drawn on ``stream`` (a terminal, and not switched off)."""
    if not RuntimeOptions.from_env().progress:
        return False
    stream = stream or sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Bar:
    """A counter with a tqdm bar on ``stream`` when :func:`enabled`."""

    def __init__(
        self, total: int, desc: str, stream: TextIO | None = None, *, delay: float = 0.0,
        leave: bool = True,
    ):
        self.total, self.desc, self.n = total, desc, 0
        self.stream = stream or sys.stderr
        self._tqdm: Any = None
        if enabled(self.stream):
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._tqdm = tqdm(
                total=total, desc=desc, file=self.stream, delay=delay, leave=leave,
                dynamic_ncols=True,
            )

    @property
    def drawn(self) -> bool:
        """Whether a bar is being drawn."""
        return self._tqdm is not None

    def update(self, n: int = 1, note: str | None = None) -> None:
        """Advance by ``n``; ``note`` is shown after the bar."""
        self.n += n
        if self._tqdm is not None:
            if note is not None:
                self._tqdm.set_postfix_str(note, refresh=False)
            self._tqdm.update(n)

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bar(
    total: int, desc: str, stream: TextIO | None = None, *, delay: float = 0.0,
    leave: bool = True,
) -> Bar:
    """A progress bar over ``total`` steps (silent when not on a terminal); ``delay``
    seconds pass before it is first drawn; ``leave`` keeps the finished bar on screen."""
    return Bar(total, desc, stream, delay=delay, leave=leave)


def _min_steps() -> int:
    try:
        steps = RuntimeOptions.from_env().progress_min_steps
        return MIN_STEPS_DEFAULT if steps is None else steps
    except ValueError:
        return MIN_STEPS_DEFAULT


class CompileProgress:
    """A compile observer drawing one bar per stage with many passes."""

    def __init__(self) -> None:
        self._bars: dict[tuple[int, str], Bar] = {}

    def begin(self, spec: Any, level: str, steps: int) -> None:
        if steps >= _min_steps():
            self._bars[(id(spec), level)] = bar(
                steps, f"compile {spec.name} ({level})", delay=COMPILE_BAR_DELAY, leave=False
            )

    def pass_done(self, spec: Any, name: str, module: Any, seconds: float) -> None:
        b = self._bars.get((id(spec), "graph"))
        if b is not None:
            b.update(1, note=name)

    def stage(self, spec: Any, level: str, ir: Any, seconds: float) -> None:
        b = self._bars.pop((id(spec), level), None)
        if b is not None:
            b.close()


_COMPILE_PROGRESS = CompileProgress()


def compile_observers() -> list[Any]:
    """The compile progress observer when stderr is a terminal, else nothing."""
    return [_COMPILE_PROGRESS] if enabled() else []
