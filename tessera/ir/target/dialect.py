"""The ``ttarget`` dialect object: every Target IR op and type."""

from __future__ import annotations

from xdsl.ir import Dialect, Operation
from xdsl.irdl import IRDLOperation

from tessera.ir.target.arith import (
    AbsOp,
    AddOp,
    AndOp,
    CopysignOp,
    CosOp,
    CvtOp,
    DivOp,
    Ex2Op,
    FmaOp,
    Lg2Op,
    MadOp,
    MaxOp,
    MinOp,
    MulOp,
    NegOp,
    NotOp,
    OrOp,
    RcpOp,
    RemOp,
    RsqrtOp,
    SelpOp,
    SetpOp,
    ShlOp,
    ShrOp,
    SinOp,
    SqrtOp,
    SubOp,
    TanhOp,
    XorOp,
)
from tessera.ir.target.base import ImmOp, PtxOp, RegOp
from tessera.ir.target.collectives import HOST_COLLECTIVE_OPS
from tessera.ir.target.control import BarArriveOp, BarSyncOp, BraOp, LabelOp, RetOp, ShflOp
from tessera.ir.target.host import LaunchExOp, LaunchOp
from tessera.ir.target.kernel import FuncOp
from tessera.ir.target.memory import (
    CpAsyncCommitOp,
    CpAsyncMbarrierArriveOp,
    CpAsyncOp,
    CpAsyncWaitOp,
    CvtaOp,
    ExternSharedAddrOp,
    ExternSharedOp,
    LdOp,
    LdParamOp,
    MovOp,
    PackOp,
    ParamAddrOp,
    SharedAddrOp,
    SharedOp,
    SregOp,
    StOp,
    UnpackOp,
)
from tessera.ir.target.tensor_core import MmaOp, SetmaxnregOp, WgmmaOp, WgmmaRsOp, WgmmaWaitOp
from tessera.ir.target.tma import (
    BulkWaitOp,
    CpAsyncBulkTensorOp,
    CpAsyncBulkTensorStoreOp,
    FenceOp,
    MapaOp,
    MbarrierArriveOp,
    MbarrierInitOp,
    MbarrierTryWaitOp,
)
from tessera.ir.target.types import ParamType, RegisterType

SM90_OPS: tuple[type[IRDLOperation], ...] = (
    ExternSharedOp, ExternSharedAddrOp, ParamAddrOp, MbarrierInitOp, MbarrierArriveOp,
    MbarrierTryWaitOp, CpAsyncBulkTensorOp, CpAsyncBulkTensorStoreOp, BulkWaitOp, MapaOp,
    FenceOp, WgmmaWaitOp, SetmaxnregOp, WgmmaOp,
    WgmmaRsOp, LaunchExOp,
)
"""The Hopper instructions (TMA, mbarrier, wgmma, setmaxnreg) and the extended launch."""

KERNEL_OPS: tuple[type[IRDLOperation], ...] = (
    FuncOp, RegOp, ImmOp, SharedOp, SregOp, MovOp, PackOp, UnpackOp, SharedAddrOp, LdParamOp,
    CvtaOp, LdOp, StOp, CpAsyncOp, CpAsyncCommitOp, CpAsyncMbarrierArriveOp, CpAsyncWaitOp,
    BarArriveOp,
    BarSyncOp,
    AddOp, SubOp, MulOp, DivOp, RemOp, MinOp, MaxOp, AndOp, OrOp, XorOp, CopysignOp,
    ShlOp, ShrOp, NegOp, AbsOp, NotOp, RcpOp, SqrtOp, RsqrtOp, Ex2Op, Lg2Op, SinOp, CosOp,
    TanhOp, FmaOp, MadOp, SelpOp, SetpOp, CvtOp, ShflOp, MmaOp, LabelOp, BraOp, RetOp,
    LaunchOp,
)
"""The kernel, its declarations and the sm_80 instructions, and the plain launch."""

Target = Dialect(
    "ttarget",
    [*KERNEL_OPS, *SM90_OPS, *HOST_COLLECTIVE_OPS],
    [RegisterType, ParamType],
)


def is_instruction(op: Operation) -> bool:
    """Whether ``op`` is a PTX instruction (prints as one PTX line)."""
    return isinstance(op, PtxOp)
