"""Validate PTX with ``ptxas`` in a subprocess.

``check(ptx)`` assembles the text for ``sm_90a`` and raises :class:`PtxasError`
with ptxas's own message when it is rejected. The assembler runs in a child
process, so a crash there cannot take the caller down. ``assemble(ptx)`` returns
the cubin bytes (used by the disk cache when the driver's JIT is not wanted).
``resources(ptx)`` reads ``ptxas -v``: each kernel's registers, spills, stack frame and
the "Potential Performance Loss" notes (``setmaxnreg`` ignored, ``wgmma`` serialized).

ptxas is looked up as ``$TESSERA_PTXAS``, then on ``PATH``, then in the
``nvidia-cuda-nvcc`` wheel.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tessera.errors import TesseraError
from tessera.options import RuntimeOptions


class PtxasError(TesseraError, RuntimeError):
    """ptxas rejected the PTX; the message is ptxas's."""


class PtxasNotFound(TesseraError, RuntimeError):
    """No ptxas executable could be found."""


@functools.cache
def find_ptxas() -> str | None:
    """Path of the ptxas executable, or None."""
    env = RuntimeOptions.from_env().ptxas
    if env:
        return env if os.path.exists(env) else None
    found = shutil.which("ptxas")
    if found:
        return found
    try:
        import nvidia.cuda_nvcc as nvcc  # type: ignore[import-not-found]

        for base in getattr(nvcc, "__path__", []):
            cand = Path(base) / "bin" / "ptxas"
            if cand.exists():
                return str(cand)
    except ImportError:
        pass
    return None


@functools.cache
def version() -> str:
    """ptxas's version line (part of the disk cache key)."""
    exe = find_ptxas()
    if exe is None:
        raise PtxasNotFound("ptxas not found (set TESSERA_PTXAS or put ptxas on PATH)")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else "unknown"


def _run(ptx: str, arch: str, output: Path, timeout: float, flags: tuple[str, ...] = ()) -> str:
    """Assemble ``ptx`` into ``output`` with ptxas's ``flags``; its messages (stdout, then
    stderr), or :class:`PtxasError` with them when it rejects the PTX or times out."""
    exe = find_ptxas()
    if exe is None:
        raise PtxasNotFound("ptxas not found (set TESSERA_PTXAS or put ptxas on PATH)")
    with tempfile.TemporaryDirectory(prefix="tessera-ptxas-") as d:
        src = Path(d) / "kernel.ptx"
        src.write_text(ptx)
        try:
            res = subprocess.run(
                [exe, f"-arch={arch}", *flags, str(src), "-o", str(output)],
                capture_output=True, text=True, timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise PtxasError(f"ptxas timed out after {timeout:.0f} s") from None
    if res.returncode != 0:
        msg = (res.stderr or res.stdout).strip().replace(str(src), "kernel.ptx")
        if res.returncode < 0:
            msg = f"ptxas was killed by signal {-res.returncode}. {msg}"
        raise PtxasError(f"ptxas -arch={arch} rejected the PTX:\n{msg}")
    return res.stdout + res.stderr


def check(ptx: str, arch: str = "sm_90a", timeout: float = 120.0) -> None:
    """Assemble ``ptx`` for ``arch``; raise :class:`PtxasError` with ptxas's message if invalid."""
    with tempfile.TemporaryDirectory(prefix="tessera-ptxas-") as d:
        _run(ptx, arch, Path(d) / "kernel.cubin", timeout)


def assemble(ptx: str, arch: str = "sm_90a", timeout: float = 120.0) -> bytes:
    """The cubin ptxas makes from ``ptx`` for ``arch``."""
    with tempfile.TemporaryDirectory(prefix="tessera-ptxas-") as d:
        out = Path(d) / "kernel.cubin"
        _run(ptx, arch, out, timeout)
        return out.read_bytes()


@dataclass
class KernelResources:
    """What ``ptxas -v`` says of one kernel."""

    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    losses: list[str] = field(default_factory=list)
    """The "Potential Performance Loss" notes, e.g. ``C7508: 'setmaxnreg' ignored ...``."""

    @property
    def spill_bytes(self) -> int:
        """Spill stores plus spill loads, in bytes per thread."""
        return self.spill_stores + self.spill_loads


_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
_LOSS = re.compile(r"\((C\d+)\) Potential Performance Loss: (.*?)(?: for the function '(\w+)')?\.?$")


def resources(ptx: str, arch: str = "sm_90a", timeout: float = 300.0) -> dict[str, KernelResources]:
    """Each kernel's :class:`KernelResources` from ``ptxas -v`` (raises
    :class:`PtxasError` when the PTX is rejected). A loss note that names no function is
    given to the kernel being compiled when ptxas printed it."""
    with tempfile.TemporaryDirectory(prefix="tessera-ptxas-") as d:
        messages = _run(ptx, arch, Path(d) / "kernel.cubin", timeout, ("-v",))
    out: dict[str, KernelResources] = {}
    current: KernelResources | None = None
    for line in messages.splitlines():
        if m := _ENTRY.search(line):
            current = out.setdefault(m.group(1), KernelResources())
        elif m := _LOSS.search(line.strip()):
            target = out.setdefault(m.group(3), KernelResources()) if m.group(3) else current
            if target is not None:
                target.losses.append(f"{m.group(1)}: {m.group(2)}")
        elif current is not None and (m := _SPILL.search(line)):
            current.stack_bytes = int(m.group(1))
            current.spill_stores, current.spill_loads = int(m.group(2)), int(m.group(3))
        elif current is not None and (m := _REGS.search(line)):
            current.registers = int(m.group(1))
    return out
