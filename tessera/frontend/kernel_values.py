"""Values of the kernel front end and the scalar arithmetic that builds their IR.

While a kernel body is compiled, a Python name is bound to one of:

* a Python constant (``int``, ``float``, ``bool``): folded at compile time
  until it meets an IR value (then it takes that value's type: a *weak* type);
* :class:`Scalar`: an SSA value of a builtin scalar type (``index``, ``i32``,
  ``f32``, ``bf16``, ``i1``...);
* :class:`VectorValue`: an SSA ``vector<WxT>`` (``load_vector``);
* a memory reference (:mod:`tessera.frontend.kernel_memory`);
* any other Python object from the kernel's globals (modules, dtypes, helper
  functions), used at compile time only.

Scalar typing rules (documented in docs/KERNELS.md): integers and ids are
``index``; float literals are ``f32`` unless they meet another float; mixing
int and float converts the int; two floats give the wider one (``bf16`` with
``f16`` gives ``f32``); two integers give the wider one (``index`` counts as
64 bits and wins ties); ``/`` is true division (ints become ``f32``); ``//``
and ``%`` follow Python's floor semantics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    VectorType,
    f32,
    i1,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from tessera.errors import TesseraError

INDEX = IndexType()


@dataclass(frozen=True)
class Scalar:
    """A lane-local scalar SSA value."""

    ssa: SSAValue

    @property
    def type(self) -> Attribute:
        return self.ssa.type


@dataclass(frozen=True)
class VectorValue:
    """A ``vector<WxT>`` SSA value (W consecutive elements)."""

    ssa: SSAValue

    @property
    def type(self) -> VectorType:
        t = self.ssa.type
        assert isinstance(t, VectorType)
        return t


class KernelTypeError(TesseraError):
    """A type error while emitting scalar code; the caller adds the source line."""


def is_float(t: Attribute) -> bool:
    return isinstance(t, AnyFloat)


def is_int(t: Attribute) -> bool:
    return isinstance(t, IntegerType | IndexType)


def is_bool(t: Attribute) -> bool:
    return isinstance(t, IntegerType) and t.width.data == 1


def int_width(t: Attribute) -> int:
    return 64 if isinstance(t, IndexType) else t.width.data  # type: ignore[union-attr]


def float_width(t: Attribute) -> int:
    return t.bitwidth  # type: ignore[union-attr]


def is_py_number(v: Any) -> bool:
    return isinstance(v, int | float | bool)


def type_name(v: Any) -> str:
    """A short description of a value for error messages."""
    if isinstance(v, Scalar | VectorValue):
        return str(v.type)
    if isinstance(v, bool):
        return "a Python bool"
    if isinstance(v, int):
        return "a Python int"
    if isinstance(v, float):
        return "a Python float"
    return type(v).__name__


def join_types(a: Attribute, b: Attribute) -> Attribute:
    """The type two scalar operands are converted to before a binary op."""
    if a == b:
        return a
    fa, fb = is_float(a), is_float(b)
    if fa and fb:
        wa, wb = float_width(a), float_width(b)
        if wa == wb:  # bf16 with f16
            return f32
        return a if wa > wb else b
    if fa:
        return a
    if fb:
        return b
    if is_bool(a) and not is_bool(b):
        return b
    if is_bool(b) and not is_bool(a):
        return a
    wa, wb = int_width(a), int_width(b)
    if wa == wb:
        return INDEX if isinstance(a, IndexType) or isinstance(b, IndexType) else a
    return a if wa > wb else b


def default_type(v: Any) -> Attribute:
    """The IR type a Python constant gets when it stands alone."""
    if isinstance(v, bool):
        return i1
    if isinstance(v, int):
        return INDEX
    if isinstance(v, float):
        return f32
    raise KernelTypeError(f"{type_name(v)} is not a scalar")


class ScalarBuilder:
    """Appends scalar ``arith`` / ``math`` ops to the current block."""

    def __init__(self, block: Block):
        self.block = block

    def emit(self, op: Operation) -> Operation:
        """Append ``op``; ``ttile`` ops are verified at once so errors point at the line."""
        if op.name.startswith("ttile."):
            try:
                op.verify(verify_nested_ops=False)
            except VerifyException as e:
                raise KernelTypeError(str(e).splitlines()[0]) from None
        self.block.add_op(op)
        return op

    # ---------------------------------------------------------------- constants, casts

    def const(self, v: int | float | bool, t: Attribute | None = None) -> Scalar:
        t = default_type(v) if t is None else t
        if is_float(t):
            attr: Attribute = FloatAttr(float(v), t)  # type: ignore[arg-type]
        else:
            if is_float(default_type(v)) and float(v) != int(v):
                raise KernelTypeError(f"cannot use {v!r} as an integer of type {t}")
            attr = IntegerAttr(int(v), t)  # type: ignore[arg-type]
        return Scalar(self.emit(arith.ConstantOp(attr, t)).results[0])

    def materialize(self, v: Any, t: Attribute | None = None) -> Scalar:
        """``v`` as a Scalar, converted to ``t`` when given."""
        if isinstance(v, Scalar):
            return v if t is None else self.cast(v, t)
        if is_py_number(v):
            return self.const(v, t)
        raise KernelTypeError(f"expected a scalar, got {type_name(v)}")

    def cast(self, v: Scalar, t: Attribute) -> Scalar:
        """Convert ``v`` to type ``t`` (Python-like: float->int truncates toward zero)."""
        s = v.type
        if s == t:
            return v
        x = v.ssa
        if is_float(s) and is_float(t):
            op: Operation = (
                arith.ExtFOp(x, t) if float_width(t) > float_width(s) else arith.TruncFOp(x, t)
            )
            if float_width(t) == float_width(s):  # bf16 <-> f16 through f32
                return self.cast(self.cast(v, f32), t)
            return Scalar(self.emit(op).results[0])
        if is_int(s) and is_float(t):
            if isinstance(s, IndexType):
                v = self.cast(v, i64)
            elif is_bool(s):
                v = self.cast(v, IntegerType(32))
            return Scalar(self.emit(arith.SIToFPOp(v.ssa, t)).results[0])
        if is_float(s) and is_int(t):
            if is_bool(t):
                return self.compare("!=", v, self.const(0.0, s))
            target = i64 if isinstance(t, IndexType) else t
            r = Scalar(self.emit(arith.FPToSIOp(x, target)).results[0])
            return self.cast(r, t)
        if is_int(s) and is_int(t):
            if is_bool(t):
                return self.compare("!=", v, self.const(0, s))
            if isinstance(s, IndexType) or isinstance(t, IndexType):
                if is_bool(s):
                    v = self.cast(v, i64)
                return Scalar(self.emit(arith.IndexCastOp(v.ssa, t)).results[0])
            if is_bool(s):
                return Scalar(self.emit(arith.ExtUIOp(x, t)).results[0])
            if int_width(t) > int_width(s):
                return Scalar(self.emit(arith.ExtSIOp(x, t)).results[0])
            return Scalar(self.emit(arith.TruncIOp(x, t)).results[0])
        raise KernelTypeError(f"cannot convert {s} to {t}")

    def unify(self, a: Any, b: Any) -> tuple[Scalar, Scalar]:
        """Both operands as Scalars of one type (constants take the other's type)."""
        if isinstance(a, Scalar) and isinstance(b, Scalar):
            t = join_types(a.type, b.type)
            return self.cast(a, t), self.cast(b, t)
        if isinstance(a, Scalar):
            t = a.type
            if is_py_number(b) and isinstance(b, float) and not is_float(t):
                t = f32
            return self.cast(a, t), self.const(b, t)
        if isinstance(b, Scalar):
            bb, aa = self.unify(b, a)
            return aa, bb
        t = join_types(default_type(a), default_type(b))
        return self.const(a, t), self.const(b, t)

    def to_bool(self, v: Any) -> Scalar:
        s = self.materialize(v)
        if is_bool(s.type):
            return s
        zero = self.const(0.0 if is_float(s.type) else 0, s.type)
        return self.compare("!=", s, zero)

    # ---------------------------------------------------------------- arithmetic

    def binary(self, op: str, a: Any, b: Any) -> Scalar:
        """``a op b`` for op in + - * / // % ** & | ^ << >>."""
        if op == "/":
            x, y = self.unify(a, b)
            t = x.type
            if not is_float(t) or float_width(t) < 32:
                x, y = self.cast(x, f32), self.cast(y, f32)
            q = Scalar(self.emit(arith.DivfOp(x.ssa, y.ssa)).results[0])
            return self.cast(q, t) if is_float(t) else q
        if op == "**":
            return self.power(a, b)
        if (
            op in ("//", "%") and isinstance(a, Scalar) and is_int(a.type)
            and isinstance(b, int) and not isinstance(b, bool) and b > 0 and b & (b - 1) == 0
        ):
            return self.floor_divmod(op, a, a, b)
        x, y = self.unify(a, b)
        t = x.type
        if is_float(t) and float_width(t) < 32:
            # 16-bit floats compute in f32 and round once per op (as the interpreter does)
            return self.cast(self.binary(op, self.cast(x, f32), self.cast(y, f32)), t)
        if is_float(t):
            simple = {"+": arith.AddfOp, "-": arith.SubfOp, "*": arith.MulfOp}
            if op in simple:
                return Scalar(self.emit(simple[op](x.ssa, y.ssa)).results[0])
            if op == "//":
                q = Scalar(self.emit(arith.DivfOp(x.ssa, y.ssa)).results[0])
                return Scalar(self.emit(math.FloorOp(q.ssa)).results[0])
            if op == "%":
                q = self.binary("//", x, y)
                return self.binary("-", x, self.binary("*", q, y))
            raise KernelTypeError(f"operator {op} is not defined on {t}")
        ops = {
            "+": arith.AddiOp, "-": arith.SubiOp, "*": arith.MuliOp,
            "&": arith.AndIOp, "|": arith.OrIOp, "^": arith.XOrIOp,
            "<<": arith.ShLIOp, ">>": arith.ShRSIOp,
        }
        if op in ops:
            return Scalar(self.emit(ops[op](x.ssa, y.ssa)).results[0])
        if op in ("//", "%"):
            return self.floor_divmod(op, x, y, b)
        raise KernelTypeError(f"operator {op} is not defined on {t}")

    def floor_divmod(self, op: str, x: Scalar, y: Scalar, divisor: Any) -> Scalar:
        """Python's ``//`` / ``%`` on integers (rounding toward minus infinity).

        A positive power-of-two constant divisor is a shift / mask; otherwise the
        truncating ``divsi`` / ``remsi`` are corrected when the remainder's sign
        differs from the divisor's.
        """
        if isinstance(divisor, int) and divisor > 0 and divisor & (divisor - 1) == 0:
            k = divisor.bit_length() - 1
            if op == "//":
                return self.binary(">>", x, self.const(k, x.type))
            return self.binary("&", x, self.const(divisor - 1, x.type))
        q = Scalar(self.emit(arith.DivSIOp(x.ssa, y.ssa)).results[0])
        r = Scalar(self.emit(arith.RemSIOp(x.ssa, y.ssa)).results[0])
        zero = self.const(0, x.type)
        if isinstance(divisor, int) and divisor > 0:
            fix = self.compare("<", r, zero)
        else:
            nonzero = self.compare("!=", r, zero)
            signs = self.binary("^", self.compare("<", r, zero), self.compare("<", y, zero))
            fix = self.binary("&", nonzero, signs)
        if op == "//":
            return self.select(fix, self.binary("-", q, self.const(1, x.type)), q)
        return self.select(fix, self.binary("+", r, y), r)

    def div_nonneg(self, op: str, a: Any, b: int) -> Scalar:
        """``a // b`` or ``a % b`` for a non-negative index ``a`` and a constant ``b > 0``."""
        x = self.materialize(a, INDEX)
        if b & (b - 1) == 0:
            return self.floor_divmod(op, x, x, b)
        cls = arith.DivSIOp if op == "//" else arith.RemSIOp
        return Scalar(self.emit(cls(x.ssa, self.const(b, INDEX).ssa)).results[0])

    def power(self, a: Any, b: Any) -> Scalar:
        if isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 8:
            base = self.materialize(a)
            result = self.const(1.0 if is_float(base.type) else 1, base.type)
            for _ in range(b):
                result = self.binary("*", result, base)
            return result
        x, y = self.unify(a, b)
        if not is_float(x.type):
            x, y = self.cast(x, f32), self.cast(y, f32)
        return Scalar(self.emit(math.PowFOp(x.ssa, y.ssa)).results[0])

    def negate(self, a: Any) -> Scalar:
        x = self.materialize(a)
        if is_float(x.type) and float_width(x.type) < 32:
            return self.cast(self.negate(self.cast(x, f32)), x.type)
        if is_float(x.type):
            return Scalar(self.emit(arith.NegfOp(x.ssa)).results[0])
        return self.binary("-", self.const(0, x.type), x)

    def logical_not(self, a: Any) -> Scalar:
        return self.binary("^", self.to_bool(a), self.const(True, i1))

    _CMPF = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}
    _CMPI = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}

    def compare(self, op: str, a: Any, b: Any) -> Scalar:
        x, y = self.unify(a, b)
        if is_float(x.type) and float_width(x.type) < 32:
            x, y = self.cast(x, f32), self.cast(y, f32)
        if is_float(x.type):
            return Scalar(self.emit(arith.CmpfOp(x.ssa, y.ssa, self._CMPF[op])).results[0])
        return Scalar(self.emit(arith.CmpiOp(x.ssa, y.ssa, self._CMPI[op])).results[0])

    def select(self, cond: Any, a: Any, b: Any) -> Scalar:
        c = self.to_bool(cond)
        x, y = self.unify(a, b)
        return Scalar(self.emit(arith.SelectOp(c.ssa, x.ssa, y.ssa)).results[0])

    def minmax(self, kind: str, a: Any, b: Any) -> Scalar:
        """Python's ``min(a, b)`` / ``max(a, b)``: ``b if b < a else a`` (resp. ``>``)."""
        x, y = self.unify(a, b)
        better = self.compare("<" if kind == "min" else ">", y, x)
        return Scalar(self.emit(arith.SelectOp(better.ssa, y.ssa, x.ssa)).results[0])

    def unary_math(self, name: str, a: Any) -> Scalar:
        x = self.materialize(a)
        if name == "abs" and not is_float(x.type):
            neg = self.negate(x)
            return self.select(self.compare("<", x, self.const(0, x.type)), neg, x)
        narrow = x.type if is_float(x.type) and float_width(x.type) < 32 else None
        if not is_float(x.type) or narrow is not None:
            x = self.cast(x, f32)
        ops = {
            "exp": math.ExpOp, "log": math.LogOp, "sqrt": math.SqrtOp, "tanh": math.TanhOp,
            "sin": math.SinOp, "cos": math.CosOp, "abs": math.AbsFOp, "floor": math.FloorOp,
            "ceil": math.CeilOp, "rsqrt": math.RsqrtOp, "erf": math.ErfOp,
        }
        r = Scalar(self.emit(ops[name](x.ssa)).results[0])
        return self.cast(r, narrow) if narrow is not None else r


FLOAT_TYPES = (Float16Type, BFloat16Type, Float32Type, Float64Type)


def fold_binary(op: str, a: Any, b: Any) -> Any:
    """``a op b`` on Python constants, with Python semantics."""
    import operator

    table = {
        "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
        "//": operator.floordiv, "%": operator.mod, "**": operator.pow,
        "&": operator.and_, "|": operator.or_, "^": operator.xor,
        "<<": operator.lshift, ">>": operator.rshift,
        "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
        "==": operator.eq, "!=": operator.ne,
    }
    return table[op](a, b)
