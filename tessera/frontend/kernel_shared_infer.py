"""Shapes of bare ``tshared.alloc`` buffers, inferred from the copies into them.

The guide's double-buffered pipeline allocates its shared buffers without a
shape or dtype and fills them with ``cp_async``::

    s0 = tshared.alloc
    s1 = tshared.alloc
    for t in tile.range(m, step=128, prefetch=2):
        cp_async.shared.global(s1, X[t:t+128])
        ...
        s0, s1 = s1, s0

A bare ``tshared.alloc`` takes the shape and dtype of the window copied into
it by ``cp_async`` (or into a buffer it is swapped with: ``a, b = b, a``).
Window extents come from the slices: ``t:t+128`` and ``:128`` have extent
``128``, ``a:b`` with constant bounds ``b - a``; an integer index drops the
dim; dims not subscripted keep the tensor's fixed size. The extents stay
expressions (``BM`` in ``X[k:k+BM]`` is evaluated as a compile-time constant).

:func:`infer_bare_allocs` returns the kernel's statements with each bare
allocation rewritten to ``tshared.alloc((<extents>), <dtype>)``; kernels
without bare allocations come back unchanged.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Sequence
from typing import Any

from tessera.frontend.kernel_intrinsics import Intrinsic
from tessera.frontend.kernel_signature import KernelParam, TensorParam
from tessera.frontend.kernel_source import KernelSource
from tessera.ir.dtypes import DType

_Shape = tuple[list[ast.expr], DType]


def _resolve(node: ast.AST, globals_: dict[str, Any]) -> Any:
    """The value of a dotted name (``tshared.alloc``, ``cp_async.shared.global_``)."""
    if isinstance(node, ast.Name):
        return globals_.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, globals_)
        if base is None:
            return None
        attr = "global_" if node.attr == "global" else node.attr
        try:
            return getattr(base, attr)
        except AttributeError:
            return None
    return None


def _is_intrinsic(node: ast.AST, name: str, globals_: dict[str, Any]) -> bool:
    v = _resolve(node, globals_)
    return isinstance(v, Intrinsic) and v.name == name and not v.bound


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


class _Inference:
    def __init__(
        self, source: KernelSource, params: Sequence[KernelParam],
        dtype_of: Callable[[TensorParam], DType | None],
    ):
        self.source = source
        self.globals = source.globals
        self.params = {p.name: p for p in params if isinstance(p, TensorParam)}
        self.dtype_of = dtype_of
        self.parent: dict[str, str] = {}

    def find(self, name: str) -> str:
        while self.parent.get(name, name) != name:
            name = self.parent[name]
        return name

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb

    def window(self, call: ast.Call, src: ast.AST) -> _Shape:
        """(extent expressions, dtype) of the window ``src`` of a tensor parameter."""
        base, items = src, []
        if isinstance(src, ast.Subscript):
            base = src.value
            items = list(src.slice.elts) if isinstance(src.slice, ast.Tuple) else [src.slice]
        p = self.params.get(base.id) if isinstance(base, ast.Name) else None
        if p is None:
            raise self.source.error(
                call, "cannot infer the shape of a bare tshared.alloc: the cp_async source "
                "must be a window of a tensor argument, e.g. X[t:t+128]"
            )
        dtype = self.dtype_of(p)
        if dtype is None:
            raise self.source.error(
                call, f"cannot infer the dtype of a bare tshared.alloc: argument '{p.name}' "
                "has no dtype in its annotation"
            )
        if len(items) > p.rank:
            raise self.source.error(call, f"too many indices for '{p.name}' ({p.spelling})")
        extents: list[ast.expr] = []
        for k, item in enumerate(items):
            if isinstance(item, ast.Slice):
                extents.append(self.extent(call, item, p, k))
        for d in p.dims[len(items):]:
            if not isinstance(d, int):
                raise self.source.error(
                    call, f"cannot infer the shape of a bare tshared.alloc: dim '{d}' of "
                    f"'{p.name}' is symbolic; slice it with a constant extent (X[t:t+128])"
                )
            extents.append(ast.Constant(d))
        return extents, dtype

    def extent(self, call: ast.Call, s: ast.Slice, p: TensorParam, k: int) -> ast.expr:
        if s.step is not None:
            raise self.source.error(call, "slices with a step are not supported")
        lo, hi = s.lower, s.upper
        if hi is None:
            d = p.dims[k]
            if isinstance(d, int) and (lo is None or isinstance(lo, ast.Constant)):
                return ast.Constant(d - (lo.value if lo is not None else 0))
        elif lo is None or (isinstance(lo, ast.Constant) and lo.value == 0):
            return hi
        elif isinstance(hi, ast.BinOp) and isinstance(hi.op, ast.Add) and _same(hi.left, lo):
            return hi.right
        elif isinstance(lo, ast.Constant) and isinstance(hi, ast.Constant):
            return ast.Constant(hi.value - lo.value)
        else:
            return ast.BinOp(hi, ast.Sub(), lo)
        raise self.source.error(
            call, f"cannot infer the shape of a bare tshared.alloc from '{ast.unparse(s)}': "
            "the extent must not depend on a symbolic dim"
        )

    def run(self, body: list[ast.stmt]) -> list[ast.stmt]:
        module = ast.Module(body=body, type_ignores=[])
        bare: dict[str, list[ast.Assign]] = {}
        for node in ast.walk(module):
            if (
                isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and _is_intrinsic(node.value, "shared_alloc", self.globals)
            ):
                bare.setdefault(node.targets[0].id, []).append(node)
        if not bare:
            return body
        for node in ast.walk(module):
            if (
                isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple)
            ):
                for t, v in zip(node.targets[0].elts, node.value.elts):
                    if isinstance(t, ast.Name) and isinstance(v, ast.Name):
                        self.union(t.id, v.id)
        shapes: dict[str, tuple[_Shape, ast.Call]] = {}
        for node in ast.walk(module):
            if not (
                isinstance(node, ast.Call) and len(node.args) == 2
                and _is_intrinsic(node.func, "cp_async", self.globals)
                and isinstance(node.args[0], ast.Name) and node.args[0].id in bare
            ):
                continue
            got = self.window(node, node.args[1])
            root = self.find(node.args[0].id)
            seen = shapes.get(root)
            if seen is None:
                shapes[root] = (got, node)
            elif seen[0][1] != got[1] or len(seen[0][0]) != len(got[0]) or not all(
                _same(a, b) for a, b in zip(seen[0][0], got[0])
            ):
                raise self.source.error(
                    node, f"the bare tshared.alloc '{node.args[0].id}' receives windows of "
                    f"different shapes or dtypes (also at line {self.source.line_of(seen[1])})"
                )
        for name, assigns in bare.items():
            found = shapes.get(self.find(name))
            if found is None:
                raise self.source.error(
                    assigns[0], f"a bare tshared.alloc has no shape or dtype, and no cp_async "
                    f"copies into '{name}' to infer them from; allocate with "
                    "tshared.alloc[f16](128) or tile.alloc_shared((128,), f16)"
                )
            (extents, dtype), _ = found
            for a in assigns:
                a.value = ast.copy_location(
                    ast.Call(
                        func=a.value,
                        args=[
                            ast.Tuple([copy.deepcopy(e) for e in extents], ast.Load()),
                            ast.Constant(dtype),
                        ],
                        keywords=[],
                    ),
                    a.value,
                )
                ast.fix_missing_locations(a)
        return body


def infer_bare_allocs(
    source: KernelSource,
    params: Sequence[KernelParam],
    body: list[ast.stmt],
    dtype_of: Callable[[TensorParam], DType | None],
) -> list[ast.stmt]:
    """``body`` with every bare ``tshared.alloc`` given the shape and dtype it receives.

    The statements are copied before rewriting, so ``source`` stays as it was.
    ``dtype_of`` gives a tensor parameter's dtype (from its annotation or the call).
    """
    has_bare = any(
        isinstance(n, ast.Assign) and _is_intrinsic(n.value, "shared_alloc", source.globals)
        for s in body for n in ast.walk(s)
    )
    if not has_bare:
        return body
    return _Inference(source, params, dtype_of).run(copy.deepcopy(body))
