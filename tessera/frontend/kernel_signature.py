"""Parameters of a tile kernel, read from the annotations in its source.

Accepted spellings (the first three are the guide's):

=============================  ===============================================
``x: ts.Tensor["N", ts.f32]``  tensor, symbolic dim ``N``, writable
``x: f32[n]``                  tensor, symbolic dim ``n``, read-only
``y: mut f32[n]``              writable tensor (only in kernels given as text;
                               in a ``.py`` file write one of the two below)
``y: mut[f32[n]]``             writable tensor
``y: "mut f32[n]"``            writable tensor (string annotation)
``alpha: f32`` / ``ts.f16``    scalar of that dtype
``k: int`` / ``float`` /       scalar ``index`` / ``f32`` / ``i1``
``bool``
=============================  ===============================================

Dims are ints (fixed sizes), strings or bare names (symbolic sizes). A bare
name that is an ``int`` in the kernel's globals is a fixed size. Symbolic
sizes are names inside the kernel (``if i < n``) whose value is the size of
the argument's dim at the call. Annotations are read from the AST, so
``f32[n]`` never needs ``n`` to exist in Python (use ``from __future__
import annotations`` or string annotations so that Python does not evaluate
them either).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import Any

from xdsl.dialects.builtin import IndexType, i1
from xdsl.ir import Attribute

from tessera.frontend.annotations import TensorAnnotation
from tessera.frontend.kernel_source import KernelSource, rewrite_mut_syntax
from tessera.ir.dtypes import DType, fp32
from tessera.ir.policy import NumericPolicy


class MutMarker:
    """``mut``: marks a tensor parameter as writable (``mut[f32[n]]`` or ``"mut f32[n]"``)."""

    def __getitem__(self, inner: Any) -> MutAnnotation:
        return MutAnnotation(inner)

    def __repr__(self) -> str:
        return "mut"


@dataclass(frozen=True)
class MutAnnotation:
    """A writable tensor annotation, the value of ``mut[f32[n]]`` in Python."""

    inner: Any


mut = MutMarker()


@dataclass(frozen=True)
class TensorParam:
    """A tensor parameter: dims (int or symbolic name), dtype, and whether it is writable."""

    name: str
    dims: tuple[int | str, ...]
    dtype: DType | None
    mutable: bool
    spelling: str

    @property
    def rank(self) -> int:
        return len(self.dims)


@dataclass(frozen=True)
class ScalarParam:
    """A scalar parameter of an IR type (``f32``, ``index``, ``i32``...)."""

    name: str
    ir_type: Attribute
    dtype: DType | None


KernelParam = TensorParam | ScalarParam

_PY_SCALARS: dict[Any, tuple[Attribute, DType | None]] = {
    int: (IndexType(), None),
    float: (fp32.ir_type, fp32),
    bool: (i1, None),
}


class _AnnotationReader:
    """Evaluates an annotation's AST with symbolic names left symbolic."""

    def __init__(self, source: KernelSource, node: ast.AST):
        self.source = source
        self.node = node

    def fail(self, message: str) -> Exception:
        return self.source.error(self.node, message)

    def lookup(self, name: str) -> Any:
        if name == "mut":
            return self.source.globals.get("mut", mut)
        if name in self.source.globals:
            return self.source.globals[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        return _Symbol(name)

    def value(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return self.string(node.value)
            return node.value
        if isinstance(node, ast.Name):
            return self.lookup(node.id)
        if isinstance(node, ast.Attribute):
            base = self.value(node.value)
            if isinstance(base, _Symbol):
                raise self.fail(f"unknown name '{base.name}' in annotation")
            try:
                return getattr(base, node.attr)
            except AttributeError:
                raise self.fail(f"'{ast.unparse(node)}' does not exist") from None
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            left, right = self.value(node.left), self.value(node.right)
            return left @ right
        if isinstance(node, ast.Call):
            fn = self.value(node.func)
            args = [self.value(a) for a in node.args]
            return fn(*args)
        raise self.fail(f"unsupported annotation '{ast.unparse(node)}'")

    def string(self, text: str) -> Any:
        try:
            expr = ast.parse(rewrite_mut_syntax(": " + text.strip())[2:], mode="eval").body
        except SyntaxError:
            raise self.fail(f"cannot parse annotation string {text!r}") from None
        return self.value(expr)

    def subscript(self, node: ast.Subscript) -> Any:
        base = self.value(node.value)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if isinstance(base, MutMarker):
            if len(items) != 1:
                raise self.fail("mut[...] takes one tensor annotation, e.g. mut[f32[n]]")
            return MutAnnotation(self.value(items[0]))
        if isinstance(base, DType):
            return TensorAnnotation(tuple(self.dim(i) for i in items), base)
        if getattr(base, "__name__", "") == "Tensor" and hasattr(base, "__class_getitem__"):
            vals = [self.value(i) if not isinstance(i, ast.Name) else self.dim(i) for i in items]
            dtype = None
            if vals and isinstance(vals[-1], DType | NumericPolicy):
                dtype = vals.pop()
            dims = tuple(v.name if isinstance(v, _Symbol) else v for v in vals)
            return TensorAnnotation(dims, dtype)
        raise self.fail(f"unsupported annotation '{ast.unparse(node)}'")

    def dim(self, node: ast.AST) -> int | str:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | str):
            return node.value
        if isinstance(node, ast.Name):
            v = self.lookup(node.id)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
            return node.id
        raise self.fail(f"a dim must be an int or a name, not '{ast.unparse(node)}'")


@dataclass(frozen=True)
class _Symbol:
    name: str


def _param_from_value(
    reader: _AnnotationReader, name: str, value: Any, spelling: str
) -> KernelParam:
    mutable = False
    if isinstance(value, MutAnnotation):
        mutable, value = True, value.inner
        if not isinstance(value, TensorAnnotation):
            raise reader.fail(f"mut applies to tensor annotations, not to '{spelling}'")
    if isinstance(value, TensorAnnotation):
        dims = tuple(d.name if isinstance(d, _Symbol) else d for d in value.dims)
        dtype = value.dtype
        if isinstance(dtype, NumericPolicy):
            dtype = dtype.storage
        writable = mutable or spelling.lstrip().startswith(("ts.Tensor", "Tensor"))
        return TensorParam(name, dims, dtype, writable, spelling)
    if isinstance(value, NumericPolicy):
        value = value.storage
    if isinstance(value, DType):
        return ScalarParam(name, value.ir_type, value)
    if value in _PY_SCALARS:
        ir_type, dtype = _PY_SCALARS[value]
        return ScalarParam(name, ir_type, dtype)
    if isinstance(value, _Symbol):
        raise reader.fail(f"unknown name '{value.name}' in the annotation of '{name}'")
    raise reader.fail(f"unsupported annotation '{spelling}' for parameter '{name}'")


def read_params(source: KernelSource) -> list[KernelParam]:
    """The kernel's parameters from its annotations; every parameter needs one."""
    fn = source.fn_def
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        raise source.error(fn, "kernels take plain positional parameters only")
    params: list[KernelParam] = []
    for arg in a.args:
        if arg.annotation is None:
            raise source.error(
                arg, f"parameter '{arg.arg}' needs an annotation, e.g. '{arg.arg}: f32[n]'"
            )
        reader = _AnnotationReader(source, arg)
        spelling = ast.unparse(arg.annotation)
        if isinstance(arg.annotation, ast.Constant) and isinstance(arg.annotation.value, str):
            spelling = arg.annotation.value
        params.append(_param_from_value(reader, arg.arg, reader.value(arg.annotation), spelling))
    return params


def read_return(source: KernelSource) -> ScalarParam | None:
    """The kernel's scalar return type (``-> ts.f32``), or None."""
    node = source.fn_def.returns
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return None
    reader = _AnnotationReader(source, source.fn_def)
    p = _param_from_value(reader, "return", reader.value(node), ast.unparse(node))
    if not isinstance(p, ScalarParam):
        raise source.error(source.fn_def, "a kernel returns a scalar (e.g. '-> ts.f32')")
    return p
