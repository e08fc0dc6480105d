"""Facts about PTX itself: register classes, types, modifiers, special registers,
``.target`` names, and the PTX ISA version and SM architecture that each
instruction form needs.

Nothing here depends on the IR: the ops (:mod:`.base` and the instruction
modules) and the printer read these tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

REG_CLASSES: dict[str, int] = {"pred": 1, "b16": 16, "b32": 32, "b64": 64, "f32": 32, "f64": 64}
"""PTX register classes and their widths in bits."""

REG_PREFIX: dict[str, str] = {
    "pred": "%p", "b16": "%rs", "b32": "%r", "b64": "%rd", "f32": "%f", "f64": "%fd",
}
"""The name prefix of each register class's virtual registers (``%f0``, ``%rd3``)."""

TYPE_BITS: dict[str, int] = {
    "pred": 1,
    "b8": 8, "u8": 8, "s8": 8,
    "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16, "e4m3x2": 16, "e5m2x2": 16,
    "b32": 32, "u32": 32, "s32": 32, "f32": 32, "f16x2": 32, "bf16x2": 32,
    "b64": 64, "u64": 64, "s64": 64, "f64": 64,
}
"""PTX fundamental (and packed) types and their widths in bits."""

FLOAT_TYPES = frozenset({"f16", "bf16", "f32", "f64", "f16x2", "bf16x2"})
INT_TYPES = frozenset({"u8", "s8", "u16", "s16", "u32", "s32", "u64", "s64"})
BIT_TYPES = frozenset({"b8", "b16", "b32", "b64"})
FP8_PAIR_TYPES = frozenset({"e4m3x2", "e5m2x2"})
"""Two fp8 codes packed in 16 bits (the operand types of the fp8 ``cvt`` forms)."""

ROUNDING_F = frozenset({"rn", "rz", "rm", "rp"})
ROUNDING_I = frozenset({"rni", "rzi", "rmi", "rpi"})

CMP_INT = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs"})
CMP_FLOAT = frozenset(
    {"eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"}
)
"""The comparisons of ``setp`` on integer and on float operands."""

MEM_SPACES = frozenset({"global", "shared", "local", "const"})
"""The state spaces ``ld`` and ``st`` address."""

SPECIAL_REGISTERS = frozenset(
    {f"{r}.{d}" for r in ("tid", "ntid", "ctaid", "nctaid") for d in "xyz"}
    | {"laneid", "warpid"}
    | {f"{r}.{d}" for r in ("clusterid", "nclusterid", "cluster_ctaid", "cluster_nctaid") for d in "xyz"}
    | {"cluster_ctarank", "cluster_nctarank"}
)
CLUSTER_REGISTERS = frozenset(r for r in SPECIAL_REGISTERS if "cluster" in r)
"""The special registers of thread-block clusters (sm_90, PTX 7.8)."""

TARGETS: dict[str, tuple[int, tuple[int, int]]] = {
    "sm_80": (80, (7, 0)),
    "sm_86": (86, (7, 1)),
    "sm_89": (89, (7, 8)),
    "sm_90": (90, (7, 8)),
    "sm_90a": (90, (8, 0)),
}
"""Supported ``.target`` names: (SM number, lowest PTX ISA that knows the target)."""

MAX_PTX_VERSION = (9, 0)

MAX_SHARED_BYTES = 227 * 1024
"""Shared memory one CTA may use on sm_90 (static plus dynamic)."""
"""The newest PTX ISA the deployed driver (CUDA 13.0) loads."""


def parse_mods(mods: str) -> list[str]:
    """The dot-separated parts of a modifier chain (``"rn.f32"`` -> ``["rn", "f32"]``)."""
    return [m for m in mods.split(".") if m] if mods else []


def compatible(cls: str, ty: str) -> bool:
    """Whether a register of class ``cls`` may hold an operand of PTX type ``ty``."""
    if ty == "pred" or cls == "pred":
        return ty == cls
    if ty not in TYPE_BITS or cls not in REG_CLASSES:
        return False
    bits = TYPE_BITS[ty]
    if bits == 8:
        return cls in ("b16", "b32")
    if REG_CLASSES[cls] != bits:
        return False
    if cls.startswith("b"):
        return True
    return cls == ty or ty in BIT_TYPES


# --------------------------------------------------------------------------- requirements


@dataclass(frozen=True, order=True)
class Requirement:
    """The lowest PTX ISA version and SM architecture that know an instruction form."""

    ptx: tuple[int, int] = (6, 0)
    sm: int = 30


BASELINE = Requirement()
"""What every instruction without a stated requirement needs (PTX 6.0, any SM)."""

CLUSTER_SREG = Requirement((7, 8), 90)
"""Reading a cluster special register (``%cluster_ctarank`` ...)."""


@dataclass(frozen=True)
class CvtForm:
    """A family of ``cvt`` conversions: any destination type of ``dst`` (None: any
    type) from any source type of ``src`` (None: any type)."""

    dst: frozenset[str] | None
    src: frozenset[str] | None
    needs: Requirement

    def matches(self, dty: str, sty: str) -> bool:
        return (self.dst is None or dty in self.dst) and (self.src is None or sty in self.src)


CVT_REQUIREMENTS: tuple[CvtForm, ...] = (
    CvtForm(FP8_PAIR_TYPES, None, Requirement((7, 8), 89)),  # cvt.rn.satfinite.e4m3x2.f32
    CvtForm(None, FP8_PAIR_TYPES, Requirement((7, 8), 89)),  # cvt.rn.f16x2.e4m3x2
    CvtForm(None, frozenset({"bf16"}), Requirement((7, 8), 90)),  # cvt.f32.bf16
    CvtForm(frozenset({"bf16", "bf16x2"}), None, Requirement((7, 0), 80)),  # cvt.rn.bf16.f32
)
"""What each ``cvt`` form needs, first match wins; other conversions need :data:`BASELINE`."""


def cvt_requirement(dty: str, sty: str) -> Requirement:
    """The requirement of ``cvt.*.{dty}.{sty}`` (:data:`CVT_REQUIREMENTS`)."""
    return next((f.needs for f in CVT_REQUIREMENTS if f.matches(dty, sty)), BASELINE)


@dataclass(frozen=True)
class FenceForm:
    """One operand-less ordering instruction of ``ttarget.fence``: its PTX text
    (without the ``;``) and what it needs."""

    text: str
    needs: Requirement


_SM90 = Requirement((8, 0), 90)

FENCES: Mapping[str, FenceForm] = {
    "proxy_async": FenceForm("fence.proxy.async.shared::cta", _SM90),
    "mbarrier_init": FenceForm("fence.mbarrier_init.release.cluster", _SM90),
    "wgmma": FenceForm("wgmma.fence.sync.aligned", _SM90),
    "wgmma_commit": FenceForm("wgmma.commit_group.sync.aligned", _SM90),
    "bulk_commit": FenceForm("cp.async.bulk.commit_group", _SM90),
    "cluster_arrive": FenceForm("barrier.cluster.arrive.release", _SM90),
    "cluster_wait": FenceForm("barrier.cluster.wait.acquire", _SM90),
}
"""The ``ttarget.fence`` kinds: keyword -> PTX instruction and requirement."""

UNKNOWN_FENCE = _SM90
"""The requirement reported for a fence kind not in :data:`FENCES` (the op's verifier
rejects it; the kernel's requirement scan may run first)."""
