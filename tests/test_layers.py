"""Tessera's modules import only downward: a test over every import, local ones included.

The layers, bottom to top (docs/ARCHITECTURE.md):

0. ``tessera.errors``: nothing of Tessera
1. ``tessera.options``: compile and runtime options, the cache root
2. ``tessera.ir``: the dialects
3. knowledge about ops shared by passes and interpreters: ``tessera.numerics`` (number
   formats, rounding, packing, random streams), the adjoint rules
   (``tessera.autodiff.rules``, ``.emitter``, ``.scientific_rules``; custom adjoints are
   registered there by the front end), the numpy reference semantics of Graph IR
   (``tessera.runtime.graph_interpreter``, used by constant folding), and the transport
   of distributed programs (``tessera.dist.mesh``, ``.sharding``, ``.collectives``, ``.topology``:
   meshes, shard layouts and deterministic collectives over torch.distributed)
4. ``tessera.passes`` and ``tessera.runtime``: siblings that never import each other
   (the runtime loads and launches PTX; the passes transform IR)
5. ``tessera.tuning``: both autotuners (may build kernels and run them)
6. ``tessera.compiler``: the driver (stage table, options, program cache)
7. the front ends: ``tessera.frontend``, ``tessera.autodiff``, ``tessera.dist``,
   ``tessera.profiler``, ``tessera.tile``, and the ``ts.numerics`` user functions
   (``tessera.numerics.api``, ``.eager``, ``.policy_classes``)
8. the public API and tools: ``tessera`` (``__init__``), ``tessera.tools``,
   ``tessera.universe``

A module may import its own package, the other units of its layer (except that
passes and runtime never import each other), and any layer below its own. Known
violations that remain are listed in :data:`ALLOWED` (importer, imported module or
package) with the reason; the test fails on any other, and on an entry of
:data:`ALLOWED` that no longer occurs (so the list only shrinks).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tessera as ts

ROOT = Path(__file__).resolve().parents[1] / "tessera"

LAYERS: list[tuple[str, ...]] = [
    ("tessera.errors",),
    ("tessera.options",),
    ("tessera.ir",),
    (
        "tessera.numerics", "tessera.autodiff.rules", "tessera.autodiff.emitter",
        "tessera.autodiff.scientific_rules", "tessera.autodiff.conv_grad",
        "tessera.runtime.graph_interpreter",
        "tessera.dist.mesh", "tessera.dist.sharding", "tessera.dist.collectives",
        "tessera.dist.topology",
    ),
    ("tessera.passes", "tessera.runtime"),
    ("tessera.tuning",),
    ("tessera.compiler",),
    (
        "tessera.frontend", "tessera.autodiff", "tessera.dist", "tessera.profiler",
        "tessera.tile", "tessera.numerics.api", "tessera.numerics.eager",
        "tessera.numerics.policy_classes", "tessera.optim",
    ),
    ("tessera", "tessera.tools", "tessera.universe"),
]
"""Units (a package or a top-level module) per layer, bottom first."""
_SIBLINGS = ("tessera.passes", "tessera.runtime")

ALLOWED: dict[tuple[str, str], str] = {
    ("tessera.frontend.kernel_api", "tessera"):
        "kernels compiled from source text see the public API as `ts`, as the guide's do",
    ("tessera.numerics.eager", "tessera"):
        "policy methods run eagerly see the public API as `ts` (EAGER_TS falls back to it)",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every ``tessera`` module ``path`` imports (at any depth), with its line."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "tessera"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "tessera":
                continue
            folder = ROOT.parent.joinpath(*target.split("."))
            for a in node.names:  # from x import y: y may be a module of package x
                sub = folder / a.name
                known = sub.is_dir() or sub.with_suffix(".py").exists()
                out.append((f"{target}.{a.name}" if known else target, node.lineno))
    return sorted(set(out), key=lambda x: (x[1], x[0]))


def _unit(module: str) -> str:
    """The layered unit of ``module``: the longest unit of :data:`LAYERS` that contains it."""
    best = ""
    for layer in LAYERS:
        for unit in layer:
            if (module == unit or module.startswith(unit + ".")) and len(unit) > len(best):
                best = unit
    return best


def _layer(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def _allowed(src: str, dst: str) -> bool:
    su, du = _unit(src), _unit(dst)
    if su == du:
        return True
    ls, ld = _layer(su), _layer(du)
    if ld < ls:
        return True
    return ld == ls and LAYERS[ls] != _SIBLINGS  # units of one layer may use each other


def _listed(src: str, dst: str) -> tuple[str, str] | None:
    """The entry of :data:`ALLOWED` that covers ``src`` importing ``dst``, if any."""
    for s, d in ALLOWED:
        if s == src and (dst == d or dst.startswith(d + ".")):
            return s, d
    return None


def _violations() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        src = _module_name(path)
        for dst, line in _imports(path):
            if not _allowed(src, dst):
                found.setdefault((src, dst), []).append(f"{path.relative_to(ROOT.parent)}:{line}")
    return found


def test_every_module_has_a_layer() -> None:
    missing = [
        _module_name(p) for p in ROOT.rglob("*.py") if not _unit(_module_name(p))
    ]
    assert missing == [], f"modules outside every layer of LAYERS: {missing}"


def test_imports_go_only_downward() -> None:
    found = _violations()
    new = {k: v for k, v in found.items() if _listed(*k) is None}
    assert not new, "imports against the layers:\n" + "\n".join(
        f"  {s} -> {d}  ({', '.join(where)})" for (s, d), where in sorted(new.items())
    )
    gone = sorted(set(ALLOWED) - {_listed(*k) for k in found})
    assert not gone, f"remove these fixed entries from ALLOWED: {gone}"


def test_the_checker_sees_local_imports() -> None:
    f = ROOT / "runtime" / "cuda.py"
    names = [n for n, _ in _imports(f)]
    assert "tessera.ir.target" in names
    assert not _allowed("tessera.runtime.cuda", "tessera.passes.emit_ptx")
    assert not _allowed("tessera.passes.x", "tessera.runtime.y")
    assert _allowed("tessera.ir.graph", "tessera.errors")
    assert not _allowed("tessera.ir.dtypes", "tessera.frontend.annotations")
    assert _allowed("tessera.ir.dtypes", "tessera.ir.annotations")
    assert _allowed("tessera.frontend.jit", "tessera.dist.jit")
    assert not _allowed("tessera.compiler", "tessera.frontend.jit")


def _exception_classes() -> list[tuple[str, str]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                if bases == ["BaseException"]:
                    continue  # a control-flow signal (like KeyboardInterrupt), not an error
                if node.name.endswith(("Error", "Exception", "NotFound")) or any(
                    b.endswith(("Error", "Exception")) for b in bases
                ):
                    out.append((_module_name(path), node.name))
    return out


@pytest.mark.parametrize("module,name", _exception_classes())
def test_every_exception_class_derives_from_tessera_error(module: str, name: str) -> None:
    import importlib

    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, ts.TesseraError), f"{module}.{name} bases: {cls.__mro__}"
