"""The ``@ts.kernel`` compiler: a Python AST walk that emits one ``ttile.kernel``.

Python variables become SSA values: a name assigned inside ``if`` / ``for`` /
``while`` and live before it is carried through ``scf.if`` results,
``scf.for`` iter_args or ``scf.while`` arguments; names first assigned inside
a loop are local to the loop. Conditions and bounds that are compile-time
constants (``if BM > 64``, ``range(4)`` of literals still loops) are folded.

Every error names the kernel's file and line and quotes the line.
"""

from __future__ import annotations

import ast
import builtins
import math as pymath
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from xdsl.dialects import scf
from xdsl.dialects.builtin import DYNAMIC_INDEX, MemRefType, ModuleOp, f32
from xdsl.ir import Attribute, Block, Region
from xdsl.utils.exceptions import VerifyException

from tessera.frontend import kernel_memory as mem
from tessera.frontend import kernel_worksharing as ws
from tessera.frontend.kernel_builtins import call_intrinsic, cast_to
from tessera.frontend.kernel_emit import Emitter, prefetch_attr
from tessera.frontend.kernel_intrinsics import Intrinsic
from tessera.frontend.kernel_memory import MmaProduct, Ref, SliceSpec
from tessera.frontend.kernel_shared_infer import infer_bare_allocs
from tessera.frontend.kernel_signature import KernelParam, ScalarParam, TensorParam
from tessera.frontend.kernel_source import KernelCompileError, KernelSource
from tessera.frontend.kernel_values import (
    INDEX,
    KernelTypeError,
    Scalar,
    VectorValue,
    fold_binary,
    is_int,
    is_py_number,
    join_types,
    type_name,
)
from tessera.ir import tile as ttile
from tessera.ir.dtypes import DType

_BINOPS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
    ast.Mod: "%", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
    ast.LShift: "<<", ast.RShift: ">>",
}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_PY_MATH = {
    pymath.exp: "exp", pymath.log: "log", pymath.sqrt: "sqrt", pymath.tanh: "tanh",
    pymath.sin: "sin", pymath.cos: "cos", pymath.erf: "erf", pymath.floor: "floor",
    pymath.ceil: "ceil", pymath.fabs: "abs",
}
_MAX_INLINE_DEPTH = 16


class _Undefined:
    """A name assigned on only some paths through an ``if``."""

    def __init__(self, reason: str):
        self.reason = reason


@dataclass
class ArgLayout:
    """The ``ttile.kernel`` arguments: ('param', name) | ('dim', symbol) | ('ret', '')."""

    entries: list[tuple[str, str]]
    types: list[Attribute]

    def sizes(self, params: Sequence[KernelParam]) -> list[int]:
        """The ``ttile.kernel`` ``sizes``: for each ``?`` dim of a memref argument, the
        position of the ``dim`` argument of its symbol (-1 for the return buffer)."""
        dims = {name: k for k, (kind, name) in enumerate(self.entries) if kind == "dim"}
        by_name = {p.name: p for p in params}
        out: list[int] = []
        for (kind, name), t in zip(self.entries, self.types):
            if not isinstance(t, MemRefType):
                continue
            p = by_name.get(name) if kind == "param" else None
            for d, n in enumerate(t.get_shape()):
                if n == DYNAMIC_INDEX:
                    sym = p.dims[d] if isinstance(p, TensorParam) else None
                    out.append(dims[sym] if isinstance(sym, str) else -1)
        return out


@dataclass
class _ReturnState:
    ref: Ref | None


def assigned_names(stmts: Sequence[ast.stmt]) -> list[str]:
    """Names stored to anywhere in ``stmts`` (in first-store order)."""
    seen: dict[str, None] = {}
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                seen.setdefault(n.id, None)
    return list(seen)


def _calls_named(fn: ast.AST, name: str) -> bool:
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            f = n.func
            last = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if last == name:
                return True
    return False


def _uses_async_copy(fn: ast.AST) -> bool:
    for n in ast.walk(fn):
        if isinstance(n, ast.Attribute) and n.attr == "cp_async":
            return True
        if isinstance(n, ast.Name) and n.id == "cp_async":
            return True
    return False


class KernelCodegen:
    """Compiles one kernel source, for one set of compile-time constants, to a module."""

    def __init__(
        self,
        source: KernelSource,
        params: list[KernelParam],
        ret: ScalarParam | None,
        *,
        group_size: int,
        constexprs: dict[str, Any] | None = None,
        arg_dtypes: dict[str, DType] | None = None,
        static_sizes: dict[str, int] | None = None,
        ret_len: int | None = None,
        name: str | None = None,
    ):
        self.source = source
        self.params = params
        self.ret = ret
        self.group_size = group_size
        self.constexprs = dict(constexprs or {})
        self.arg_dtypes = dict(arg_dtypes or {})
        self.static_sizes = dict(static_sizes or {})
        self.ret_len = ret_len
        self.name = name or source.fn_def.name
        self.explicit_commit = _calls_named(source.fn_def, "cp_commit_group")
        self.uses_async_copy = _uses_async_copy(source.fn_def)
        self.current_target: str | None = None
        self._inline_depth = 0
        self._sources: list[KernelSource] = [source]
        self.ws_context = "top"
        """Where a ``ts.tile.range`` being compiled sits (kernel_worksharing): ``top``,
        ``tile`` (directly in a tile-shared loop) or ``seq`` (in control flow whose
        lanes may diverge, or a per-lane loop)."""
        self.prefetch_depth = 0
        """The ``prefetch=`` of the innermost pipelined loop being compiled (0: none)."""
        self.uniform_ivs: set[Any] = set()
        """Induction variables of loops whose every iteration runs on every lane of a tile."""

    # ---------------------------------------------------------------- errors

    @property
    def src(self) -> KernelSource:
        return self._sources[-1]

    def error(self, node: ast.AST, message: str) -> KernelCompileError:
        return self.src.error(node, message)

    # ---------------------------------------------------------------- entry

    def layout(self) -> ArgLayout:
        entries: list[tuple[str, str]] = []
        types: list[Attribute] = []
        symbols: list[str] = []
        for p in self.params:
            entries.append(("param", p.name))
            if isinstance(p, TensorParam):
                dtype = p.dtype or self.arg_dtypes.get(p.name)
                if dtype is None:
                    raise self.error(
                        self.source.fn_def,
                        f"parameter '{p.name}' ({p.spelling}) has no dtype; write it in the "
                        f"annotation (ts.Tensor[..., ts.f32]) or call the kernel once",
                    )
                shape = [
                    d if isinstance(d, int) else self.static_sizes.get(d, DYNAMIC_INDEX)
                    for d in p.dims
                ]
                types.append(MemRefType(dtype.ir_type, shape))
                symbols += [d for d in p.dims if isinstance(d, str) and d not in symbols]
            elif p.dtype is not None and p.dtype.is_float and p.dtype.bits < 32:
                types.append(f32)  # 16-bit scalars travel as f32 (exact) and narrow on entry
            else:
                types.append(p.ir_type)
        names = {p.name for p in self.params}
        for s in symbols:
            if s in names:
                raise self.error(
                    self.source.fn_def, f"'{s}' is both a parameter and a symbolic dim"
                )
            entries.append(("dim", s))
            types.append(INDEX)
        if self.ret is not None:
            entries.append(("ret", ""))
            types.append(MemRefType(self.ret.ir_type, [self.ret_len or DYNAMIC_INDEX]))
        return ArgLayout(entries, types)

    def compile(self) -> tuple[ModuleOp, ArgLayout, set[str]]:
        """Build the module; returns it, the argument layout and the lane ops used."""
        lay = self.layout()
        sizes = lay.sizes(self.params)
        kernel = ttile.KernelOp(
            self.name, lay.types, self.group_size, sizes=sizes if sizes else None
        )
        block = kernel.body.block
        self.em = Emitter(block, self.group_size)
        env: dict[str, Any] = dict(self.constexprs)
        dim_values: dict[str, Scalar] = {}
        ret_ref: Ref | None = None
        for (kind, nm), arg in zip(lay.entries, block.args):
            if kind == "dim":
                dim_values[nm] = Scalar(arg)
                arg.name_hint = nm
        for (kind, nm), arg in zip(lay.entries, block.args):
            if kind == "param":
                arg.name_hint = nm
                p = next(p for p in self.params if p.name == nm)
                if isinstance(p, TensorParam):
                    sizes = tuple(
                        d if isinstance(d, int) else self.static_sizes.get(d, dim_values[d])
                        for d in p.dims
                    )
                    env[nm] = Ref.whole(arg, sizes, nm, p.mutable)
                else:
                    env[nm] = self.em.cast(Scalar(arg), p.ir_type)
            elif kind == "dim":
                env[nm] = dim_values[nm]
            else:
                arg.name_hint = "result"
                ret_ref = Ref.whole(arg, (self.ret_len or 1,), "return value", True)
        self._ret = _ReturnState(ret_ref)
        body = self.source.fn_def.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # docstring
        body = infer_bare_allocs(
            self.source, self.params, body, lambda p: p.dtype or self.arg_dtypes.get(p.name)
        )
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Return):
                if i != len(body) - 1:
                    raise self.error(stmt, "return must be the last statement of a kernel")
                self.kernel_return(stmt, env)
            else:
                self.stmt(stmt, env)
        if self.ret is not None and not (body and isinstance(body[-1], ast.Return)):
            raise self.error(
                self.source.fn_def, f"kernel '{self.name}' declares a return type but ends "
                "without a return statement"
            )
        self.em.emit(ttile.ReturnOp())
        module = ModuleOp([kernel])
        try:
            module.verify()
        except VerifyException as e:
            raise self.error(self.source.fn_def, f"generated Tile IR does not verify: {e}") from None
        return module, lay, set(self.em.used_lane_ops)

    def kernel_return(self, stmt: ast.Return, env: dict[str, Any]) -> None:
        if self.ret is None:
            if stmt.value is None:
                return
            raise self.error(stmt, "the kernel returns a value but declares no return type "
                             "(add e.g. '-> ts.f32')")
        if stmt.value is None:
            raise self.error(stmt, "return needs a value")
        v = self.expr(stmt.value, env)
        try:
            s = self.em.materialize(v, self.ret.ir_type)
            ref = self._ret.ref
            assert ref is not None
            first = self.em.compare("==", self.em.lane("local_id"), 0)
            target = mem.subscript(self.em, replace(ref, writable=True), [self.em.lane("tile_id")])
            mem.store(self.em, target, s, first)
        except KernelTypeError as e:
            raise self.error(stmt, str(e)) from None

    # ---------------------------------------------------------------- statements

    def block(self, stmts: Sequence[ast.stmt], env: dict[str, Any]) -> None:
        for s in stmts:
            self.stmt(s, env)

    def stmt(self, node: ast.stmt, env: dict[str, Any]) -> None:
        try:
            method: Callable[[Any, dict[str, Any]], None] | None = getattr(
                self, f"stmt_{type(node).__name__}", None
            )
            if method is None:
                raise self.error(
                    node, f"'{type(node).__name__}' statements are not supported in kernels"
                )
            method(node, env)
        except KernelTypeError as e:
            raise self.error(node, str(e)) from None

    def stmt_Pass(self, node: ast.Pass, env: dict[str, Any]) -> None:
        pass

    def stmt_Expr(self, node: ast.Expr, env: dict[str, Any]) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a string used as a comment
        self.expr(node.value, env)

    def stmt_Return(self, node: ast.Return, env: dict[str, Any]) -> None:
        raise self.error(node, "return is only allowed as the last statement of a kernel")

    def stmt_Break(self, node: ast.Break, env: dict[str, Any]) -> None:
        raise self.error(node, "break is not supported in kernels; use a while condition")

    def stmt_Continue(self, node: ast.Continue, env: dict[str, Any]) -> None:
        raise self.error(node, "continue is not supported in kernels; use if")

    def stmt_Assign(self, node: ast.Assign, env: dict[str, Any]) -> None:
        value = self.expr(node.value, env, target=node.targets[0])
        for t in node.targets:
            self.assign(t, value, env)

    def stmt_AnnAssign(self, node: ast.AnnAssign, env: dict[str, Any]) -> None:
        if node.value is None:
            return
        ann = self.expr(node.annotation, env)
        value = self.expr(node.value, env)
        if isinstance(ann, DType):
            value = cast_to(self, value, ann)
        self.assign(node.target, value, env)

    def stmt_AugAssign(self, node: ast.AugAssign, env: dict[str, Any]) -> None:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported")
        value = self.expr(node.value, env)
        target = node.target
        if isinstance(target, ast.Name):
            cur = self.lookup(target, env)
            if isinstance(cur, Ref):
                if isinstance(value, MmaProduct) and op == "+":
                    mem.mma_accumulate(self.em, cur, value, accumulate=True)
                    return
                raise self.error(node, f"'{target.id}' is a tensor; update elements, "
                                 f"e.g. {target.id}[i] {op}= ...")
            env[target.id] = self.binary(op, cur, value)
            return
        if isinstance(target, ast.Subscript):
            ref = self.subscript_ref(target, env)
            if isinstance(value, MmaProduct):
                if op != "+":
                    raise self.error(node, "only += accumulates a tile.mma product")
                mem.mma_accumulate(self.em, ref, value, accumulate=True)
                return
            old = mem.load(self.em, ref)
            mem.store(self.em, ref, self.binary(op, old, value))
            return
        raise self.error(node, "unsupported target of an augmented assignment")

    def assign(self, target: ast.expr, value: Any, env: dict[str, Any]) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
            if isinstance(value, Scalar | VectorValue):
                _hint(value.ssa, target.id)
            elif isinstance(value, Ref | StackedRef):
                base = value.ref.base if isinstance(value, StackedRef) else value.base
                _hint(base, target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            if not isinstance(value, tuple | list) or len(value) != len(target.elts):
                raise self.error(
                    target, f"cannot unpack {type_name(value)} into {len(target.elts)} names"
                )
            for t, v in zip(target.elts, value):
                self.assign(t, v, env)
        elif isinstance(target, ast.Subscript):
            base = self.expr(target.value, env)
            if isinstance(base, list):
                raise self.error(target, "lists of values are read-only in kernels")
            ref = self.subscript_ref(target, env)
            if isinstance(value, MmaProduct):
                mem.mma_accumulate(self.em, ref, value, accumulate=False)
            elif isinstance(value, Ref | VectorValue):
                raise self.error(target, f"cannot store {type_name(value)} into an element")
            else:
                mem.store(self.em, ref, value)
        else:
            raise self.error(target, f"cannot assign to '{ast.unparse(target)}'")

    # ---------------------------------------------------------------- control flow

    def stmt_If(self, node: ast.If, env: dict[str, Any]) -> None:
        cond = self.expr(node.test, env)
        if is_py_number(cond) or cond is None:
            self.block(node.body if cond else node.orelse, env)
            return
        if not isinstance(cond, Scalar):
            raise self.error(node.test, f"an if condition must be a scalar, got {type_name(cond)}")
        c = self.em.to_bool(cond)
        before = dict(env)
        branches: list[tuple[Block, dict[str, Any]]] = []
        for stmts in (node.body, node.orelse):
            b = Block()
            benv = dict(env)
            with self.em.at(b), self._ws("seq"):
                self.block(stmts, benv)
            branches.append((b, benv))
        (tb, tenv), (eb, eenv) = branches
        changed = [
            n for n in dict.fromkeys([*tenv, *eenv])
            if tenv.get(n, _MISSING) is not before.get(n, _MISSING)
            or eenv.get(n, _MISSING) is not before.get(n, _MISSING)
        ]
        results: list[str] = []
        tvals: list[Any] = []
        evals: list[Any] = []
        for n in changed:
            tv, ev = tenv.get(n, _MISSING), eenv.get(n, _MISSING)
            if tv is _MISSING or ev is _MISSING or isinstance(tv, _Undefined) or isinstance(
                ev, _Undefined
            ):
                env[n] = _Undefined(f"'{n}' is assigned on only one branch of the if at line "
                                    f"{self.src.line_of(node)}")
                continue
            if is_py_number(tv) and is_py_number(ev) and tv == ev and type(tv) is type(ev):
                env[n] = tv
                continue
            results.append(n)
            tvals.append(tv)
            evals.append(ev)
        types, tyield, eyield = self._merge(node, results, tvals, evals, tb, eb)
        with self.em.at(tb):
            self.em.emit(scf.YieldOp(*tyield))
        with self.em.at(eb):
            self.em.emit(scf.YieldOp(*eyield))
        if not types and eb.first_op is not None and isinstance(eb.first_op, scf.YieldOp):
            op = self.em.emit(scf.IfOp(c.ssa, [], Region(tb)))
        else:
            op = self.em.emit(scf.IfOp(c.ssa, types, Region(tb), Region(eb)))
        for n, r, tv in zip(results, op.results, tvals):
            env[n] = self._rewrap(tv, r)
            _hint(r, n)

    def _merge(
        self, node: ast.AST, names: list[str], a: list[Any], b: list[Any], ba: Block, bb: Block
    ) -> tuple[list[Attribute], list[Any], list[Any]]:
        types: list[Attribute] = []
        ya: list[Any] = []
        yb: list[Any] = []
        for n, x, y in zip(names, a, b):
            t = self._join(node, n, x, y)
            types.append(t)
            with self.em.at(ba):
                ya.append(self._carry(node, n, x, t))
            with self.em.at(bb):
                yb.append(self._carry(node, n, y, t))
        return types, ya, yb

    def _type_of(self, node: ast.AST, name: str, v: Any) -> Attribute:
        if isinstance(v, _Typed):
            return v.t
        if isinstance(v, Scalar | VectorValue):
            return v.type
        if isinstance(v, Ref):
            if mem.is_slot_view(v):
                return INDEX
            self._check_whole(node, name, v)
            return v.base.type
        if is_py_number(v):
            from tessera.frontend.kernel_values import default_type

            return default_type(v)
        raise self.error(
            node, f"'{name}' holds {type_name(v)}, which cannot change inside control flow"
        )

    def _join(self, node: ast.AST, name: str, x: Any, y: Any) -> Attribute:
        self._same_buffers(node, name, x, y)
        tx, ty = self._type_of(node, name, x), self._type_of(node, name, y)
        if tx == ty:
            return tx
        if isinstance(x, Ref | VectorValue) or isinstance(y, Ref | VectorValue):
            raise self.error(node, f"'{name}' has type {tx} on one path and {ty} on another")
        if is_py_number(x):
            return ty
        if is_py_number(y):
            return tx
        return join_types(tx, ty)

    def _same_buffers(self, node: ast.AST, name: str, x: Any, y: Any) -> None:
        """Stage views carried through control flow must stay in one stacked buffer."""
        xs = isinstance(x, Ref) and mem.is_slot_view(x)
        ys = isinstance(y, Ref) and mem.is_slot_view(y)
        if (xs or ys) and not (xs and ys and x.base is y.base):
            raise self.error(
                node, f"'{name}' refers to different buffers on different paths; only buffers "
                "swapped among themselves can change inside control flow"
            )

    def _restack(self, node: ast.AST, carried: list[str], env: dict[str, Any]) -> None:
        """Carried names holding distinct equal shared buffers (``s0, s1 = s1, s0``) become
        stage views of one stacked buffer, so the loop carries an index, not a memref."""
        groups: dict[Any, list[Any]] = {}
        for n in carried:
            v = env[n]
            if not isinstance(v, Ref) or mem.is_slot_view(v):
                continue
            owner = v.base.owner
            if isinstance(owner, ttile.AllocSharedOp) and owner.parent_block() is self.em.block:
                key = (owner.result.type, str(owner.properties))
                if owner not in groups.setdefault(key, []):
                    groups[key].append(owner)
        for allocs in groups.values():
            if len(allocs) < 2:
                continue
            bases = {a.results[0] for a in allocs}
            held = [v for v in env.values() if isinstance(v, tuple | list | StackedRef)]
            if any(isinstance(x, Ref) and x.base in bases for h in held
                   for x in (h if isinstance(h, tuple | list) else [h.ref])):
                continue
            stacked = mem.restack_shared(self.em, allocs)
            if stacked is None:
                continue
            for n, v in list(env.items()):
                if isinstance(v, Ref) and v.base in bases:
                    slot = next(j for j, a in enumerate(allocs) if a.results[0] is v.base)
                    env[n] = Ref(
                        stacked, (len(allocs), *v.sizes), (slot, *v.offsets),
                        (None, *v.extents), v.name, v.writable,
                    )
            for a in allocs:
                a.detach()
                a.erase()

    def _check_whole(self, node: ast.AST, name: str, r: Ref) -> None:
        if any(not (isinstance(o, int) and o == 0) for o in r.offsets) or tuple(
            r.extents
        ) != tuple(r.sizes):
            raise self.error(
                node, f"'{name}' is a window of a buffer; only whole buffers can be "
                "reassigned inside control flow"
            )

    def _carry(self, node: ast.AST, name: str, v: Any, t: Attribute) -> Any:
        if isinstance(v, Ref):
            return self.em.index(v.offsets[0]).ssa if mem.is_slot_view(v) else v.base
        if isinstance(v, VectorValue):
            return v.ssa
        try:
            return self.em.materialize(v, t).ssa
        except KernelTypeError as e:
            raise self.error(node, f"'{name}': {e}") from None

    def _rewrap(self, like: Any, ssa: Any) -> Any:
        if isinstance(like, Ref):
            if mem.is_slot_view(like):
                return replace(like, offsets=(Scalar(ssa), *like.offsets[1:]))
            return replace(like, base=ssa)
        if isinstance(like, VectorValue):
            return VectorValue(ssa)
        return Scalar(ssa)

    def _carried(self, stmts: Sequence[ast.stmt], env: dict[str, Any], extra: Sequence[str] = ()
                 ) -> list[str]:
        return [
            n for n in assigned_names(stmts)
            if n in env and n not in extra and not isinstance(env[n], _Undefined)
        ]

    def stmt_For(self, node: ast.For, env: dict[str, Any]) -> None:
        if node.orelse:
            raise self.error(node, "for ... else is not supported in kernels")
        it = node.iter
        if isinstance(it, ast.Call):
            fn = self.expr(it.func, env)
            if fn is builtins.range or (isinstance(fn, Intrinsic) and fn.name == "range"):
                self._range_loop(node, it, env, fn is not builtins.range)
                return
        seq = self.expr(it, env)
        if isinstance(seq, tuple | list):  # unrolled at compile time
            for v in seq:
                self.assign(node.target, v, env)
                self.block(node.body, env)
            return
        raise self.error(
            it, "a kernel for loop iterates over range(...), tile.range(...) or a tuple of "
            "compile-time values"
        )

    def _range_loop(self, node: ast.For, call: ast.Call, env: dict[str, Any], tile: bool) -> None:
        args = [self.expr(a, env) for a in call.args]
        kw = {k.arg: self.expr(k.value, env) for k in call.keywords if k.arg}
        prefetch = kw.pop("prefetch", None)
        if "step" in kw:
            step = kw.pop("step")
            if len(args) == 1:
                args = [0, args[0], step]
            elif len(args) == 2:
                args = [args[0], args[1], step]
            else:
                raise self.error(call, "step given twice")
        if "start" in kw or "stop" in kw:
            start, stop = kw.pop("start", 0), kw.pop("stop", None)
            args = [start, stop, *args[2:]] if stop is not None else args
        if kw:
            raise self.error(call, f"unexpected keywords {sorted(kw)} for range")
        if not 1 <= len(args) <= 3:
            raise self.error(call, "range takes 1 to 3 arguments")
        lo, hi, st = ([0, args[0], 1] if len(args) == 1 else
                      [args[0], args[1], 1] if len(args) == 2 else args)
        for v, what in ((lo, "start"), (hi, "stop"), (st, "step")):
            ok = (isinstance(v, int) and not isinstance(v, bool)) or (
                isinstance(v, Scalar) and is_int(v.type)
            )
            if not ok:
                raise self.error(call, f"range {what} must be an integer, got {type_name(v)}")
        if isinstance(st, int) and st <= 0:
            raise self.error(call, f"range step must be positive, got {st}")
        attrs = None
        if prefetch is not None:
            if not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 0:
                raise self.error(call, "prefetch must be a compile-time int >= 0")
            attrs = prefetch_attr(prefetch)
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "the loop variable must be a single name")
        var = node.target.id
        carried = self._carried(node.body, env, extra=[var])
        self._restack(node, carried, env)
        level = None
        uniform = not any(isinstance(v, Scalar) and ws.lane_dependent(v.ssa, self.uniform_ivs)
                          for v in (lo, hi, st))
        if (tile and prefetch is None and not carried and self.ws_context in ("top", "tile")
                and not ws.has_break(node.body) and uniform):
            level = ("lane" if self.ws_context == "tile" else
                     "tile" if ws.has_nested_tile_range(node.body) else "grid")
        inner = "tile" if level == "tile" else "seq"
        depth = prefetch if prefetch is not None else self.prefetch_depth

        def build(types: list[Attribute]) -> list[Attribute]:
            out: dict[str, Any] = {}

            def body(iv: Scalar, vals: list[Scalar]) -> list[Scalar]:
                benv = dict(env)
                benv[var] = iv
                if uniform and level in (None, "tile"):
                    self.uniform_ivs.add(iv.ssa)  # the same on every lane of a tile
                for n, v in zip(carried, vals):
                    benv[n] = self._rewrap(env[n], v.ssa)
                entry = [benv[n] for n in carried]
                saved = self.prefetch_depth
                self.prefetch_depth = depth
                try:
                    with self._ws(inner):
                        self.block(node.body, benv)
                finally:
                    self.prefetch_depth = saved
                nxt = [self._final(node, n, benv) for n in carried]
                self._unchanged = [n for n, a, b in zip(carried, entry, nxt) if a is b]
                for n, a, b in zip(carried, entry, nxt):
                    self._same_buffers(node, n, a, b) if isinstance(a, Ref) else None
                out["types"] = [self._type_of(node, n, v) for n, v in zip(carried, nxt)]
                if out["types"] != types:
                    return []
                return [Scalar(self._carry(node, n, v, t)) for n, v, t in zip(carried, nxt, types)]

            scratch = Block()
            with self.em.at(scratch):
                inits = [Scalar(self._carry(node, n, env[n], t)) for n, t in zip(carried, types)]
                split = ws.SplitLoop(self.em, lo, st, level) if level else None
                blo, bst = (Scalar(split.new_lo), Scalar(split.new_st)) if split else (lo, st)
                self.em.for_loop(blo, hi, bst, inits, body, attrs)
                if prefetch is not None and prefetch >= 2 and self.uses_async_copy and (
                        not self.explicit_commit):
                    self.em.emit(ttile.CommitGroupOp())  # drain the pipeline
                    self.em.emit(ttile.WaitGroupOp(0))
            loop = next(o for o in reversed(list(scratch.ops)) if isinstance(o, scf.ForOp))
            if split is not None:
                split.keep_or_drop(loop)
            self._scratch = scratch if out["types"] == types else None
            return out["types"]

        types = [self._type_of(node, n, env[n]) for n in carried]
        self._run_loop(node, carried, types, build, env)

    @contextmanager
    def _ws(self, context: str) -> Iterator[None]:
        """Compile nested statements in work-sharing ``context`` (kernel_worksharing)."""
        saved = self.ws_context
        self.ws_context = context
        try:
            yield
        finally:
            self.ws_context = saved

    def _final(self, node: ast.AST, name: str, benv: dict[str, Any]) -> Any:
        v = benv[name]
        if isinstance(v, _Undefined):
            raise self.error(node, v.reason)
        return v

    def _adopt(self, scratch: Block) -> None:
        """Move a loop built in ``scratch`` (with its setup ops) to the current block."""
        last = None
        for op in list(scratch.ops):
            op.detach()
            self.em.emit(op)
            last = op
        assert last is not None
        self._loop_results = list(last.results)

    def _run_loop(
        self, node: ast.AST, carried: list[str], types: list[Attribute],
        build: Callable[[list[Attribute]], list[Attribute]],
        env: dict[str, Any],
    ) -> None:
        got = types
        for _ in range(8):
            self._loop_results: list[Any] | None = None
            self._unchanged: list[str] = []
            got = build(types)
            if self._unchanged and len(got) == len(types):
                # values the body never reassigns need not be carried: build again without
                keep = [i for i, n in enumerate(carried) if n not in self._unchanged]
                carried[:] = [carried[i] for i in keep]
                types = [types[i] for i in keep]
                continue
            if got == types:
                assert self._scratch is not None
                self._adopt(self._scratch)
                for n, r in zip(carried, self._loop_results or []):
                    env[n] = self._rewrap(env[n], r)
                    _hint(r, n)
                return
            new = [self._join(node, n, _Typed(t), _Typed(g)) if t != g else t
                   for n, t, g in zip(carried, types, got)]
            if new == types:
                break
            types = new
        bad = [f"'{n}' ({t} before, {g} after)" for n, t, g in zip(carried, types, got) if t != g]
        raise self.error(node, f"loop-carried values change type: {', '.join(bad)}")

    def stmt_While(self, node: ast.While, env: dict[str, Any]) -> None:
        if node.orelse:
            raise self.error(node, "while ... else is not supported in kernels")
        carried = self._carried(node.body, env)
        self._restack(node, carried, env)

        def build(types: list[Attribute]) -> list[Attribute]:
            scratch = Block()
            with self.em.at(scratch):
                inits = [self._carry(node, n, env[n], t) for n, t in zip(carried, types)]
            before = Block(arg_types=types)
            after = Block(arg_types=types)
            with self.em.at(before):
                benv = dict(env)
                for n, a in zip(carried, before.args):
                    benv[n] = self._rewrap(env[n], a)
                cond = self.expr(node.test, benv)
                if not isinstance(cond, Scalar):
                    raise self.error(
                        node.test, "a while condition must change with the loop (a scalar value)"
                    )
                c = self.em.to_bool(cond)
                self.em.emit(scf.ConditionOp(c.ssa, *before.args))
            with self.em.at(after):
                aenv = dict(env)
                for n, a in zip(carried, after.args):
                    aenv[n] = self._rewrap(env[n], a)
                entry = [aenv[n] for n in carried]
                with self._ws("seq"):
                    self.block(node.body, aenv)
                nxt = [self._final(node, n, aenv) for n in carried]
                self._unchanged = [n for n, a, b in zip(carried, entry, nxt) if a is b]
                for n, a, b in zip(carried, entry, nxt):
                    self._same_buffers(node, n, a, b) if isinstance(a, Ref) else None
                got = [self._type_of(node, n, v) for n, v in zip(carried, nxt)]
                if got == types:
                    self.em.emit(scf.YieldOp(*[
                        self._carry(node, n, v, t) for n, v, t in zip(carried, nxt, types)
                    ]))
            self._scratch = None
            if got == types:
                with self.em.at(scratch):
                    self.em.emit(scf.WhileOp(inits, types, Region(before), Region(after)))
                self._scratch = scratch
            return got

        types = [self._type_of(node, n, env[n]) for n in carried]
        self._run_loop(node, carried, types, build, env)

    # ---------------------------------------------------------------- expressions

    def lookup(self, node: ast.Name, env: dict[str, Any]) -> Any:
        n = node.id
        if n in env:
            v = env[n]
            if isinstance(v, _Undefined):
                raise self.error(node, f"name '{n}' may be undefined here: {v.reason}")
            return v
        g = self.src.globals
        if n in g:
            return g[n]
        if hasattr(builtins, n):
            return getattr(builtins, n)
        hint = ""
        if n.isupper() or (len(n) <= 3 and n[:1].isupper()):
            hint = f"; pass it as a compile-time constant, e.g. kernel(..., {n}=64)"
        else:
            hint = "; define it before use, or pass it as an argument"
        raise self.error(node, f"name '{n}' is not defined{hint}")

    def expr(self, node: ast.expr, env: dict[str, Any], target: ast.expr | None = None) -> Any:
        method = getattr(self, f"expr_{type(node).__name__}", None)
        if method is None:
            raise self.error(node, f"'{type(node).__name__}' expressions are not supported "
                             f"in kernels: {ast.unparse(node)}")
        saved = self.current_target
        if target is not None and isinstance(target, ast.Name):
            self.current_target = target.id
        try:
            return method(node, env)
        except KernelTypeError as e:
            raise self.error(node, str(e)) from None
        finally:
            self.current_target = saved

    def expr_Constant(self, node: ast.Constant, env: dict[str, Any]) -> Any:
        return node.value

    def expr_Name(self, node: ast.Name, env: dict[str, Any]) -> Any:
        return self.lookup(node, env)

    def expr_Tuple(self, node: ast.Tuple, env: dict[str, Any]) -> Any:
        return tuple(self.expr(e, env) for e in node.elts)

    def expr_List(self, node: ast.List, env: dict[str, Any]) -> Any:
        vals = [self.expr(e, env) for e in node.elts]
        stacked = self._stack_shared(vals)
        return stacked if stacked is not None else vals

    def _stack_shared(self, vals: list[Any]) -> Any:
        """``[alloc_shared(s, t), alloc_shared(s, t)]``: one buffer with a leading dim."""
        if len(vals) < 2 or not all(isinstance(v, Ref) for v in vals):
            return None
        ops = [v.base.owner for v in vals]
        if not all(isinstance(o, ttile.AllocSharedOp) and not o.results[0].uses for o in ops):
            return None
        first = ops[0]
        assert isinstance(first, ttile.AllocSharedOp)
        if any(o.result.type != first.result.type or o.properties != first.properties
               for o in ops):
            return None
        t = first.result.type
        assert isinstance(t, MemRefType)
        shape = (len(vals), *t.get_shape())
        sw = first.swizzle.data if first.swizzle else None
        al = first.alignment.value.data if first.alignment else None
        new = ttile.AllocSharedOp(shape, t.element_type, sw, al)
        first.parent_block().insert_op_before(new, first)  # type: ignore[union-attr]
        for o in ops:
            o.detach()
            o.erase()
        return StackedRef(Ref.whole(new.results[0], shape, self.current_target or "buffers", True))

    def expr_Attribute(self, node: ast.Attribute, env: dict[str, Any]) -> Any:
        base = self.expr(node.value, env)
        if isinstance(base, Ref):
            if node.attr == "shape":
                return base.shape
            raise self.error(node, f"tensor '{base.name}' has no attribute '{node.attr}'")
        if isinstance(base, Scalar | VectorValue | MmaProduct):
            raise self.error(node, f"{type_name(base)} has no attribute '{node.attr}'")
        try:
            return getattr(base, node.attr)
        except AttributeError:
            raise self.error(node, f"'{ast.unparse(node)}' does not exist") from None

    def binary(self, op: str, a: Any, b: Any) -> Any:
        if is_py_number(a) and is_py_number(b):
            try:
                return fold_binary(op, a, b)
            except ZeroDivisionError:
                raise KernelTypeError("division by zero") from None
        for v in (a, b):
            if not (isinstance(v, Scalar) or is_py_number(v)):
                raise KernelTypeError(f"operator {op} is not defined on {type_name(v)}")
        return self.em.binary(op, a, b)

    def expr_BinOp(self, node: ast.BinOp, env: dict[str, Any]) -> Any:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported")
        return self.binary(op, self.expr(node.left, env), self.expr(node.right, env))

    def expr_UnaryOp(self, node: ast.UnaryOp, env: dict[str, Any]) -> Any:
        v = self.expr(node.operand, env)
        if is_py_number(v):
            return {ast.USub: lambda x: -x, ast.UAdd: lambda x: +x, ast.Not: lambda x: not x,
                    ast.Invert: lambda x: ~x}[type(node.op)](v)
        if not isinstance(v, Scalar):
            raise self.error(node, f"unary operator on {type_name(v)}")
        if isinstance(node.op, ast.USub):
            return self.em.negate(v)
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Not):
            return self.em.logical_not(v)
        return self.em.binary("^", v, -1)

    def expr_BoolOp(self, node: ast.BoolOp, env: dict[str, Any]) -> Any:
        is_and = isinstance(node.op, ast.And)
        acc: Any = None
        for e in node.values:
            v = self.expr(e, env)
            if is_py_number(v):
                if is_and and not v:
                    return False if acc is None else self.em.const(False)
                if not is_and and v:
                    return True
                continue
            b = self.em.to_bool(v)
            acc = b if acc is None else self.em.binary("&" if is_and else "|", acc, b)
        return (True if is_and else False) if acc is None else acc

    def expr_Compare(self, node: ast.Compare, env: dict[str, Any]) -> Any:
        left = self.expr(node.left, env)
        result: Any = True
        for op, right_node in zip(node.ops, node.comparators):
            right = self.expr(right_node, env)
            sym = _CMPOPS.get(type(op))
            if sym is None:
                raise self.error(node, f"comparison {type(op).__name__} is not supported")
            if is_py_number(left) and is_py_number(right):
                c: Any = fold_binary(sym, left, right)
            else:
                for v in (left, right):
                    if not (isinstance(v, Scalar) or is_py_number(v)):
                        raise self.error(node, f"cannot compare {type_name(v)}")
                c = self.em.compare(sym, left, right)
            if result is True:
                result = c
            elif is_py_number(c):
                result = result if c else False
            elif is_py_number(result):
                result = c if result else False
            else:
                result = self.em.binary("&", result, c)
            left = right
        return result

    def expr_IfExp(self, node: ast.IfExp, env: dict[str, Any]) -> Any:
        c = self.expr(node.test, env)
        if is_py_number(c):
            return self.expr(node.body if c else node.orelse, env)
        return self.em.select(c, self.expr(node.body, env), self.expr(node.orelse, env))

    # ---------------------------------------------------------------- subscripts

    def _slice(self, node: ast.Slice, env: dict[str, Any]) -> SliceSpec:
        if node.step is not None:
            raise self.error(node, "slices with a step are not supported")
        start = self.expr(node.lower, env) if node.lower is not None else None
        if node.upper is None:
            return SliceSpec(start, None)
        stop = self.expr(node.upper, env)
        if is_py_number(start if start is not None else 0) and is_py_number(stop):
            s0 = 0 if start is None else start
            if stop < s0:
                raise self.error(node, f"empty slice {s0}:{stop}")
            return SliceSpec(s0, stop - s0)
        # start:start+C with the same expression on both sides
        up = node.upper
        if (
            node.lower is not None and isinstance(up, ast.BinOp) and isinstance(up.op, ast.Add)
            and ast.dump(up.left) == ast.dump(node.lower)
        ):
            extent = self.expr(up.right, env)
            if isinstance(extent, int):
                return SliceSpec(start, extent)
        lo = 0 if start is None else start
        return SliceSpec(start, self.em.binary("-", self.em.index(stop), self.em.index(lo)))

    def _items(self, node: ast.Subscript, env: dict[str, Any]) -> list[Any]:
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        out: list[Any] = []
        for e in elts:
            if isinstance(e, ast.Slice):
                out.append(self._slice(e, env))
            else:
                v = self.expr(e, env)
                if isinstance(v, Scalar) and not is_int(v.type):
                    raise self.error(e, f"an index must be an integer, got {v.type}")
                if not isinstance(v, Scalar) and not (isinstance(v, int) and not isinstance(
                    v, bool
                )):
                    raise self.error(e, f"an index must be an integer, got {type_name(v)}")
                out.append(v)
        return out

    def subscript_ref(self, node: ast.Subscript, env: dict[str, Any]) -> Ref:
        """The window named by ``node`` (``A[i, j]``, ``A[0:BM, k:k+BK]``, ``smem[stage]``)."""
        base = self.expr(node.value, env)
        if isinstance(base, StackedRef):
            base = base.ref
        if not isinstance(base, Ref):
            raise self.error(node, f"'{ast.unparse(node.value)}' is {type_name(base)}, not a "
                             "tensor or shared buffer")
        return mem.subscript(self.em, base, self._items(node, env))

    def expr_Subscript(self, node: ast.Subscript, env: dict[str, Any]) -> Any:
        base = self.expr(node.value, env)
        if isinstance(base, Intrinsic):
            item = self.expr(node.slice, env)
            return base[item]
        if isinstance(base, tuple | list):
            idx = self.expr(node.slice, env)
            if isinstance(idx, int):
                return base[idx]
            raise self.error(node, "a list in a kernel is indexed by compile-time ints "
                             "(a list of equal alloc_shared buffers may use any index)")
        if isinstance(base, DType):
            raise self.error(node, "tensor annotations are only allowed in signatures")
        ref = self.subscript_ref(node, env)
        if ref.view_dims:
            return ref
        return mem.load(self.em, ref)

    # ---------------------------------------------------------------- calls

    def expr_Call(self, node: ast.Call, env: dict[str, Any]) -> Any:
        fn = self.expr(node.func, env)
        args: list[Any] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                v = self.expr(a.value, env)
                if not isinstance(v, tuple | list):
                    raise self.error(a, "only compile-time tuples can be unpacked with *")
                args.extend(v)
            else:
                args.append(self.expr(a, env))
        kwargs: dict[str, Any] = {}
        for k in node.keywords:
            if k.arg is None:
                raise self.error(node, "**kwargs is not supported in kernels")
            kwargs[k.arg] = self.expr(k.value, env)
        try:
            return self.call(node, fn, args, kwargs)
        except KernelTypeError as e:
            raise self.error(node, str(e)) from None

    def call(self, node: ast.Call, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if isinstance(fn, Intrinsic):
            return call_intrinsic(self, fn, args, kwargs)
        if isinstance(fn, DType):
            if len(args) != 1 or kwargs:
                raise KernelTypeError(f"{fn!r}(x) takes one value")
            return cast_to(self, args[0], fn)
        if fn in (builtins.min, builtins.max):
            if kwargs or len(args) < 1:
                raise KernelTypeError(f"{fn.__name__}() takes values only")
            vals = list(args[0]) if len(args) == 1 and isinstance(args[0], tuple | list) else args
            acc = vals[0]
            for v in vals[1:]:
                if is_py_number(acc) and is_py_number(v):
                    acc = fn(acc, v)
                else:
                    acc = self.em.minmax(fn.__name__, acc, v)
            return acc
        if fn is builtins.abs:
            (x,) = args
            return abs(x) if is_py_number(x) else self.em.unary_math("abs", x)
        if fn in (builtins.int, builtins.float, builtins.bool):
            (x,) = args
            if is_py_number(x):
                return fn(x)
            from xdsl.dialects.builtin import f32, i1

            t = {builtins.int: INDEX, builtins.float: f32, builtins.bool: i1}[fn]
            return self.em.materialize(x, t)
        if fn is builtins.len:
            (x,) = args
            if isinstance(x, Ref):
                return x.shape[0]
            if isinstance(x, tuple | list):
                return len(x)
            raise KernelTypeError(f"len() of {type_name(x)}")
        if fn is builtins.range:
            raise KernelTypeError("range(...) can only be the iterable of a for loop")
        if fn in _PY_MATH:
            (x,) = args
            if is_py_number(x):
                return fn(x)
            return self.em.unary_math(_PY_MATH[fn], x)
        inner = getattr(fn, "__tessera_kernel_func__", None)
        if inner is not None:
            fn = inner
        from tessera.frontend.kernel import Kernel

        if isinstance(fn, Kernel):
            fn = fn.fn
        import inspect

        if inspect.isfunction(fn):
            return self.inline(node, fn, args, kwargs)
        raise KernelTypeError(f"cannot call {type_name(fn)} ({ast.unparse(node.func)}) in a "
                              "kernel")

    def inline(self, node: ast.Call, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Compile a plain Python helper in place, its parameters bound to the arguments."""
        if self._inline_depth >= _MAX_INLINE_DEPTH:
            raise self.error(node, "helper calls nest too deeply (recursion is not supported)")
        src = KernelSource.from_function(fn)
        fdef = src.fn_def
        a = fdef.args
        names = [x.arg for x in a.args]
        if len(args) > len(names):
            raise self.error(node, f"{fdef.name}() takes {len(names)} arguments, got {len(args)}")
        env: dict[str, Any] = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names or k in env:
                raise self.error(node, f"{fdef.name}() got an unexpected or repeated '{k}'")
            env[k] = v
        defaults = dict(zip(names[len(names) - len(a.defaults):], fn.__defaults__ or ()))
        for n in names:
            if n not in env:
                if n not in defaults:
                    raise self.error(node, f"{fdef.name}() is missing the argument '{n}'")
                env[n] = defaults[n]
        body = fdef.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        self._sources.append(src)
        self._inline_depth += 1
        try:
            for i, s in enumerate(body):
                if isinstance(s, ast.Return):
                    if i != len(body) - 1:
                        raise self.error(s, "a helper's return must be its last statement")
                    return None if s.value is None else self.expr(s.value, env)
                self.stmt(s, env)
            return None
        finally:
            self._inline_depth -= 1
            self._sources.pop()


def _hint(ssa: Any, name: str) -> None:
    """Name an op result after the Python variable it is first bound to."""
    if ssa.name_hint is None and not isinstance(ssa.owner, Block) and name.isidentifier():
        ssa.name_hint = name


class _Missing:
    pass


_MISSING = _Missing()


@dataclass(frozen=True)
class _Typed:
    """A stand-in carrying only a type, for re-joining loop types."""

    t: Attribute


@dataclass(frozen=True)
class StackedRef:
    """A list of equal shared buffers stored as one buffer with a leading dim."""

    ref: Ref

    def __len__(self) -> int:
        return int(self.ref.sizes[0])  # type: ignore[arg-type]
