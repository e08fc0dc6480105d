"""One allocation per call for a host plan's intermediates.

A compiled program allocates a buffer for every intermediate result; through torch's
caching allocator each costs microseconds of host time, and a training step of a
convolutional network allocates about two thousand. :func:`plan_arena` instead gives
every intermediate (a buffer that is not a result and that only kernels read) an
offset in one arena, sized once when the plan is built: the run allocates the arena
(one ``torch.empty``) and passes ``base + offset`` to the kernels.

Offsets are assigned first-fit over the buffers' lifetimes, in launch order: a buffer
may take the bytes of one whose last kernel was launched before its first. That is the
reuse torch's caching allocator makes after a ``del``: kernels run in launch order on
the one stream, so the earlier kernel has finished reading when the later one writes.

Kernels receive the intermediates as :class:`DeviceBuffer` objects: an address with
the shape and dtype the launch path reads (``data_ptr()``, and for a TMA tensor map
``shape``, ``stride()``, ``dtype``, ``element_size()``), never torch tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

ARENA_ALIGNMENT = 256
"""Byte alignment of every buffer in the arena (TMA needs 16, vector accesses 16)."""


class DeviceBuffer:
    """A contiguous device buffer known by address, shape and torch dtype: what a kernel
    launch reads of a tensor argument."""

    __slots__ = ("_ptr", "shape", "dtype", "_strides", "_esize")

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: Any, strides: tuple[int, ...],
                 esize: int) -> None:
        self._ptr = ptr
        self.shape = shape
        self.dtype = dtype
        self._strides = strides
        self._esize = esize

    def data_ptr(self) -> int:
        return self._ptr

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return prod(self.shape)

    def element_size(self) -> int:
        return self._esize

    def is_contiguous(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"DeviceBuffer(0x{self._ptr:x}, {list(self.shape)}, {self.dtype})"


@dataclass(frozen=True)
class BufferSpec:
    """Where one intermediate lives in the arena and how kernels see it."""

    offset: int
    shape: tuple[int, ...]
    dtype: Any
    strides: tuple[int, ...]
    esize: int

    def at(self, base: int) -> DeviceBuffer:
        return DeviceBuffer(base + self.offset, self.shape, self.dtype, self.strides,
                            self.esize)


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, n = [], 1
    for d in reversed(shape):
        strides.append(n)
        n *= d
    return tuple(reversed(strides))


def first_fit(
    buffers: Sequence[tuple[int, int, int]], alignment: int = ARENA_ALIGNMENT
) -> tuple[list[int], int]:
    """Offsets for ``buffers`` given as ``(bytes, first launch, last launch)`` in order of
    their first launch, and the arena's size: each takes the lowest aligned offset free
    of every earlier buffer still in use at its first launch (last launch at or after
    it)."""
    offsets: list[int] = []
    live: list[tuple[int, int, int]] = []  # (offset, end, last launch)
    total = 0
    for size, first, last in buffers:
        size = -(-max(size, 1) // alignment) * alignment
        live = [b for b in live if b[2] >= first]
        off = 0
        for b_off, b_end, _ in sorted(live):
            if off + size <= b_off:
                break
            off = max(off, b_end)
        offsets.append(off)
        live.append((off, off + size, last))
        total = max(total, off + size)
    return offsets, total
