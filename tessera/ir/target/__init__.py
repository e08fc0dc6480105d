"""Target IR (``ttarget``): PTX instructions on virtual registers.

A kernel is one ``ttarget.func`` whose body is a single flat block of
instructions, read top to bottom like a PTX listing; control flow is
``ttarget.label`` plus (predicated) ``ttarget.bra``. Every op prints as exactly
one PTX line (see :mod:`tessera.passes.emit_ptx`).

Registers are not SSA: ``%r = ttarget.reg "f32"`` declares a virtual register of
a PTX register class (``pred``, ``b16``, ``b32``, ``b64``, ``f32``, ``f64``) and
instructions name it as a destination or a source, any number of times.
Immediate operands are values made by ``ttarget.imm`` (printed inline). Both are
values of type ``!ttarget.reg``, so instructions need no type lists.

Each instruction carries its PTX modifier chain as a string, exactly as it
follows the opcode in PTX (``"rn.f32"`` for ``add.rn.f32``,
``"global.v4.f32"`` for ``ld.global.v4.f32``); verifiers check every modifier
and that registers have a class compatible with the instruction type::

    ttarget.func @scale(%x: !ttarget.param<u64>, %n: !ttarget.param<u32>) maxntid = 128 {
      %rd0 = ttarget.reg "b64"
      %f0 = ttarget.reg "f32"
      %two = ttarget.imm 2.000000e+00 : f32
      ttarget.ld_param "u64" %rd0, %x
      ttarget.cvta "to.global.u64" %rd0, %rd0
      ttarget.ld "global.f32" (%f0), [%rd0 + 0]
      ttarget.mul "rn.f32" %f0, %f0, %two
      ttarget.st "global.f32" [%rd0 + 0], (%f0)
      ttarget.ret
    }

The package follows xDSL's dialect packages: :mod:`.facts` (PTX types, register
classes, the PTX ISA version and SM each instruction form needs), :mod:`.types`,
:mod:`.base` (the instruction base class, registers and immediates, and the one PTX
formatter), the instructions by family (:mod:`.memory`, :mod:`.arith`,
:mod:`.control`, :mod:`.tensor_core`, :mod:`.tma`), the kernel (:mod:`.kernel`), host
launches (:mod:`.host`), host collectives (:mod:`.collectives`) and the dialect
object (:mod:`.dialect`). Every public name is re-exported here.
"""

from __future__ import annotations

from tessera.ir.target.arith import (
    AbsOp,
    AddOp,
    AndOp,
    ArithOp,
    BinaryArithOp,
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
    UnaryArithOp,
    XorOp,
)
from tessera.ir.target.base import (
    GUARD_FORMAT,
    ImmOp,
    PtxNames,
    PtxOp,
    RegOp,
    i64_attr,
    reg_class,
)
from tessera.ir.target.collectives import (
    HOST_COLLECTIVE_OPS,
    AllGatherOp,
    AllReduceOp,
    AllToAllOp,
    MeshCoordOp,
    RecvOp,
    ReduceScatterOp,
    SendOp,
)
from tessera.ir.target.control import (
    BarArriveOp,
    BarSyncOp,
    BraOp,
    LabelOp,
    RetOp,
    ShflOp,
)
from tessera.ir.target.dialect import (
    KERNEL_OPS,
    SM90_OPS,
    Target,
    is_instruction,
)
from tessera.ir.target.facts import (
    BIT_TYPES,
    CLUSTER_REGISTERS,
    CMP_FLOAT,
    CMP_INT,
    CVT_REQUIREMENTS,
    FENCES,
    FLOAT_TYPES,
    FP8_PAIR_TYPES,
    INT_TYPES,
    MAX_PTX_VERSION,
    MEM_SPACES,
    REG_CLASSES,
    REG_PREFIX,
    ROUNDING_F,
    ROUNDING_I,
    SPECIAL_REGISTERS,
    TARGETS,
    TYPE_BITS,
    CvtForm,
    FenceForm,
    Requirement,
    compatible,
    cvt_requirement,
    parse_mods,
)
from tessera.ir.target.host import (
    LaunchExOp,
    LaunchOp,
    host_param_type,
)
from tessera.ir.target.kernel import (
    FuncOp,
)
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
    MemOp,
    MovOp,
    PackOp,
    ParamAddrOp,
    SharedAddrOp,
    SharedOp,
    SregOp,
    StOp,
    UnpackOp,
)
from tessera.ir.target.tensor_core import (
    MmaOp,
    SetmaxnregOp,
    WgmmaOp,
    WgmmaRsOp,
    WgmmaWaitOp,
)
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
from tessera.ir.target.types import (
    ParamType,
    RegisterType,
)

__all__ = [
    "AbsOp",
    "AddOp",
    "AllGatherOp",
    "AllReduceOp",
    "AllToAllOp",
    "AndOp",
    "ArithOp",
    "BIT_TYPES",
    "BarArriveOp",
    "BarSyncOp",
    "BinaryArithOp",
    "BraOp",
    "BulkWaitOp",
    "CLUSTER_REGISTERS",
    "CMP_FLOAT",
    "CMP_INT",
    "CVT_REQUIREMENTS",
    "CopysignOp",
    "CosOp",
    "CpAsyncBulkTensorOp",
    "CpAsyncBulkTensorStoreOp",
    "CpAsyncCommitOp",
    "CpAsyncMbarrierArriveOp",
    "CpAsyncOp",
    "CpAsyncWaitOp",
    "CvtForm",
    "CvtOp",
    "CvtaOp",
    "DivOp",
    "Ex2Op",
    "ExternSharedAddrOp",
    "ExternSharedOp",
    "FENCES",
    "FLOAT_TYPES",
    "FP8_PAIR_TYPES",
    "FenceForm",
    "FenceOp",
    "FmaOp",
    "FuncOp",
    "GUARD_FORMAT",
    "HOST_COLLECTIVE_OPS",
    "INT_TYPES",
    "ImmOp",
    "KERNEL_OPS",
    "LabelOp",
    "LaunchExOp",
    "LaunchOp",
    "LdOp",
    "LdParamOp",
    "Lg2Op",
    "MAX_PTX_VERSION",
    "MEM_SPACES",
    "MadOp",
    "MapaOp",
    "MaxOp",
    "MbarrierArriveOp",
    "MbarrierInitOp",
    "MbarrierTryWaitOp",
    "MemOp",
    "MeshCoordOp",
    "MinOp",
    "MmaOp",
    "MovOp",
    "MulOp",
    "NegOp",
    "NotOp",
    "OrOp",
    "PackOp",
    "ParamAddrOp",
    "ParamType",
    "PtxNames",
    "PtxOp",
    "REG_CLASSES",
    "REG_PREFIX",
    "ROUNDING_F",
    "ROUNDING_I",
    "RcpOp",
    "RecvOp",
    "ReduceScatterOp",
    "RegOp",
    "RegisterType",
    "RemOp",
    "Requirement",
    "RetOp",
    "RsqrtOp",
    "SM90_OPS",
    "SPECIAL_REGISTERS",
    "SelpOp",
    "SendOp",
    "SetmaxnregOp",
    "SetpOp",
    "SharedAddrOp",
    "SharedOp",
    "ShflOp",
    "ShlOp",
    "ShrOp",
    "SinOp",
    "SqrtOp",
    "SregOp",
    "StOp",
    "SubOp",
    "TARGETS",
    "TYPE_BITS",
    "TanhOp",
    "Target",
    "UnaryArithOp",
    "UnpackOp",
    "WgmmaOp",
    "WgmmaRsOp",
    "WgmmaWaitOp",
    "XorOp",
    "compatible",
    "cvt_requirement",
    "host_param_type",
    "i64_attr",
    "is_instruction",
    "parse_mods",
    "reg_class",
]
