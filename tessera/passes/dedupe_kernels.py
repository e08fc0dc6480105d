"""``dedupe-kernels``: one kernel for each distinct kernel body.

``lower-graph-to-tile`` makes one kernel per operator, named after it, so a model of
twelve identical layers gets twelve copies of each of its kernels, which would then
each be lowered to Target IR, printed, assembled and loaded. This pass keeps the first
kernel of every group of kernels that differ only in their symbol name and points the
launches of the others at it::

    ttile.kernel @f_add_0(...) group_size = 256 { BODY }
    ttile.kernel @f_add_1(...) group_size = 256 { BODY }
    ttile.launch @f_add_1(%a, %b, %c) grid = [...]

becomes ``ttile.kernel @f_add_0`` alone, launched twice. Two kernels count as equal
when they are structurally equal once the name is left out (signature, launch
attributes, every op with its properties, attributes and operands), so a kernel that refers to another symbol (a module-level constant) is
merged only with kernels referring to the same symbol. It applies to ``ttile.kernel``
and ``ttarget.func`` definitions and to every op whose ``callee`` property names one
(``ttile.launch``, ``ttarget.launch``, ``ttarget.launch_ex``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, SymbolRefAttr
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from tessera.ir import target as tt
from tessera.ir import tile as ti

KERNEL_OPS: tuple[type[Operation], ...] = (ti.KernelOp, tt.FuncOp)
"""The kernel definitions this pass merges."""


def _name(op: Operation) -> str:
    name = op.properties["sym_name"]
    assert isinstance(name, StringAttr)
    return name.data


def kernel_fingerprint(op: Operation) -> tuple[Hashable, ...]:
    """A structural fingerprint of kernel ``op`` without its name: for every op in order,
    its name, properties, attributes, operand numbers (values are numbered as they are
    defined), result types and region/block shape. Equal fingerprints mean the kernels
    print the same once renamed (xDSL attributes are immutable and hashable)."""
    ids: dict[SSAValue, int] = {}
    out: list[Hashable] = []

    def value(v: SSAValue) -> int:
        return ids.setdefault(v, len(ids))

    def visit(o: Operation, top: bool) -> None:
        props = tuple(sorted(
            (k, v) for k, v in o.properties.items() if not (top and k == "sym_name")
        ))
        out.append((
            o.name, props, tuple(sorted(o.attributes.items())),
            tuple(value(x) for x in o.operands), tuple(r.type for r in o.results),
            tuple(len(r.blocks) for r in o.regions),
        ))
        for r in o.results:
            value(r)
        for region in o.regions:
            for block in region.blocks:
                out.append(("^", tuple(a.type for a in block.args), len(block.ops)))
                for a in block.args:
                    value(a)
                for inner in block.ops:
                    visit(inner, False)

    visit(op, True)
    return tuple(out)


def refers_to_symbols(op: Operation) -> bool:
    """Whether an op in ``op`` (a kernel) names a symbol through a property or attribute:
    such a kernel means something only together with its module."""
    for o in op.walk():
        for v in (*o.properties.values(), *o.attributes.values()):
            if isinstance(v, SymbolRefAttr):
                return True
    return False


def dedupe_kernels(module: ModuleOp) -> dict[str, str]:
    """Merge equal kernels of ``module`` in place; returns ``{removed name: kept name}``."""
    kept: dict[tuple[Hashable, ...], str] = {}  # (op name, key) -> kept kernel name
    alias: dict[str, str] = {}
    for op in list(module.body.block.ops):
        if not isinstance(op, KERNEL_OPS):
            continue
        name = _name(op)
        k = kernel_fingerprint(op)
        first = kept.setdefault(k, name)
        if first != name:
            alias[name] = first
            op.detach()
            op.erase()
    if not alias:
        return alias
    for op in module.walk():
        callee = op.properties.get("callee")
        if isinstance(callee, SymbolRefAttr) and callee.root_reference.data in alias:
            op.properties["callee"] = SymbolRefAttr(alias[callee.root_reference.data])
    return alias


@dataclass(frozen=True)
class DedupeKernelsPass(ModulePass):
    """Keep one kernel per distinct body and launch it wherever its copies were."""

    name = "dedupe-kernels"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        dedupe_kernels(op)


__all__ = ["DedupeKernelsPass", "dedupe_kernels", "KERNEL_OPS"]
