"""The kernel: ``ttarget.func``, one flat block of instructions printed as a PTX ``.entry``."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntAttr, StringAttr
from xdsl.ir import Block, Region
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    region_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import IsolatedFromAbove, NoTerminator, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

from tessera.ir.target.base import ImmOp, PtxOp, RegOp
from tessera.ir.target.control import BraOp, LabelOp, RetOp
from tessera.ir.target.facts import MAX_PTX_VERSION, TARGETS
from tessera.ir.target.memory import SharedOp
from tessera.ir.target.tensor_core import SetmaxnregOp
from tessera.ir.target.types import ParamType


@irdl_op_definition
class FuncOp(IRDLOperation):
    """A PTX kernel (``.visible .entry``)::

        ttarget.func @name(%a: !ttarget.param<u64>, %n: !ttarget.param<u32>) maxntid = 128 {
          ...flat list of ttarget instructions, ending in ttarget.ret or ttarget.bra...
        }

    An optional ``target = "sm_90a"`` names the ``.target`` (default sm_90a).
    An optional ``cluster = N`` (sm_90 and later) makes every launch group the CTAs
    into thread-block clusters of ``N x 1 x 1`` (``.reqnctapercluster N, 1, 1``); the
    grid's x size must then be a multiple of N.
    An optional ``minnctapersm = N`` (``.minnctapersm N``) asks for room for ``N`` CTAs
    per SM. A kernel that moves registers between warpgroups (``ttarget.setmaxnreg``)
    must give it: only with it can ptxas fix the register count at entry, and without
    that it ignores every ``setmaxnreg`` (C7508) and the kernel runs, and may spill,
    within ``65536 / maxntid`` registers per thread.
    The PTX version printed is the lowest that the target and every instruction
    in the body need (:meth:`required_ptx`), never above 9.0.
    """

    name = "ttarget.func"

    sym_name = prop_def(StringAttr)
    maxntid = prop_def(IntAttr)
    target = prop_def(StringAttr, default_value=StringAttr("sm_90a"))
    cluster = opt_prop_def(IntAttr)
    minnctapersm = opt_prop_def(IntAttr)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), SymbolOpInterface(), NoTerminator())

    def __init__(
        self, name: str, params: Sequence[str], maxntid: int, target: str = "sm_90a",
        cluster: int | None = None, minnctapersm: int | None = None,
    ):
        block = Block(arg_types=[ParamType(p) for p in params])
        super().__init__(
            properties={
                "sym_name": StringAttr(name), "maxntid": IntAttr(maxntid),
                "target": StringAttr(target),
                "cluster": IntAttr(cluster) if cluster is not None else None,
                "minnctapersm": IntAttr(minnctapersm) if minnctapersm is not None else None,
            },
            regions=[Region(block)],
        )

    @property
    def cluster_size(self) -> int:
        """CTAs per cluster (1 when the kernel does not ask for clusters)."""
        return self.cluster.data if self.cluster is not None else 1

    @property
    def block(self) -> Block:
        return self.body.block

    def labels(self) -> set[str]:
        return {op.label.data for op in self.block.ops if isinstance(op, LabelOp)}

    def shared_arrays(self) -> set[str]:
        return {op.sym.data for op in self.block.ops if isinstance(op, SharedOp)}

    def required_ptx(self) -> tuple[int, int]:
        v = TARGETS[self.target.data][1]
        for op in self.block.ops:
            if isinstance(op, PtxOp):
                v = max(v, op.required_ptx())
        return v

    def verify_(self) -> None:
        name = self.sym_name.data
        where = f"ttarget.func @{name}"
        if not name.isidentifier():
            raise VerifyException(f"{where}: '{name}' is not a valid PTX identifier")
        if self.target.data not in TARGETS:
            raise VerifyException(
                f"{where}: unknown target '{self.target.data}'; valid: {', '.join(TARGETS)}"
            )
        if not 1 <= self.maxntid.data <= 1024:
            raise VerifyException(f"{where}: maxntid must be in [1, 1024], got {self.maxntid.data}")
        if self.cluster is not None:
            if not 1 <= self.cluster.data <= 8:
                raise VerifyException(
                    f"{where}: cluster must be in [1, 8] CTAs, got {self.cluster.data}"
                )
            if TARGETS[self.target.data][0] < 90:
                raise VerifyException(
                    f"{where}: clusters need sm_90 or later, target is {self.target.data}"
                )
        if self.minnctapersm is not None and not 1 <= self.minnctapersm.data <= 32:
            raise VerifyException(
                f"{where}: minnctapersm must be in [1, 32], got {self.minnctapersm.data}"
            )
        for a in self.block.args:
            if not isinstance(a.type, ParamType):
                raise VerifyException(f"{where}: parameters must be !ttarget.param, got {a.type}")
        sm = TARGETS[self.target.data][0]
        labels: set[str] = set()
        shared: set[str] = set()
        for op in self.block.ops:
            if isinstance(op, LabelOp):
                if op.label.data in labels:
                    raise VerifyException(f"{where}: label \"{op.label.data}\" defined twice")
                labels.add(op.label.data)
            elif isinstance(op, SharedOp):
                if op.sym.data in shared:
                    raise VerifyException(f"{where}: shared array \"{op.sym.data}\" defined twice")
                shared.add(op.sym.data)
            elif not isinstance(op, PtxOp | RegOp | ImmOp):
                raise VerifyException(f"{where}: '{op.name}' is not a Target IR instruction")
            if isinstance(op, PtxOp) and op.required_sm() > sm:
                raise VerifyException(
                    f"{where}: {op.name} needs sm_{op.required_sm()}, target is {self.target.data}"
                )
            if isinstance(op, SetmaxnregOp) and self.minnctapersm is None:
                raise VerifyException(
                    f"{where}: ttarget.setmaxnreg needs minnctapersm on the kernel (without "
                    "it ptxas cannot fix the register count at entry and ignores setmaxnreg)"
                )
        last = self.block.last_op
        if not (isinstance(last, RetOp) or (isinstance(last, BraOp) and last.guard is None)):
            raise VerifyException(f"{where}: body must end with ttarget.ret or an unpredicated ttarget.bra")
        if self.required_ptx() > MAX_PTX_VERSION:
            v = self.required_ptx()
            raise VerifyException(f"{where}: needs PTX {v[0]}.{v[1]}, above the supported 9.0")

    @classmethod
    def parse(cls, parser: Parser) -> FuncOp:
        name = parser.parse_symbol_name().data
        args = parser.parse_comma_separated_list(
            parser.Delimiter.PAREN, lambda: parser.parse_argument()
        )
        parser.parse_keyword("maxntid")
        parser.parse_punctuation("=")
        maxntid = parser.parse_integer()
        target = "sm_90a"
        if parser.parse_optional_keyword("target") is not None:
            parser.parse_punctuation("=")
            target = parser.parse_str_literal()
        cluster: IntAttr | None = None
        if parser.parse_optional_keyword("cluster") is not None:
            parser.parse_punctuation("=")
            cluster = IntAttr(parser.parse_integer())
        min_ctas: IntAttr | None = None
        if parser.parse_optional_keyword("minnctapersm") is not None:
            parser.parse_punctuation("=")
            min_ctas = IntAttr(parser.parse_integer())
        attrs = parser.parse_optional_attr_dict_with_keyword()
        region = parser.parse_region(args)
        op = cls.__new__(cls)
        IRDLOperation.__init__(
            op,
            properties={
                "sym_name": StringAttr(name), "maxntid": IntAttr(maxntid),
                "target": StringAttr(target), "cluster": cluster, "minnctapersm": min_ctas,
            },
            attributes=attrs.data if attrs else {},
            regions=[region],
        )
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.sym_name.data}(")
        for i, a in enumerate(self.block.args):
            if i:
                printer.print_string(", ")
            printer.print_block_argument(a)
        printer.print_string(f") maxntid = {self.maxntid.data}")
        if self.target.data != "sm_90a":
            printer.print_string(f' target = "{self.target.data}"')
        if self.cluster is not None:
            printer.print_string(f" cluster = {self.cluster.data}")
        if self.minnctapersm is not None:
            printer.print_string(f" minnctapersm = {self.minnctapersm.data}")
        if self.attributes:
            printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)
