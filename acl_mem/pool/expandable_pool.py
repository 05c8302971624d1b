"""ExpandablePool: segments inside one virtual range that grows and shrinks."""

from __future__ import annotations

import contextlib

from .._args import c_uint
from ..device import Device
from ..enums import MallocPolicy, MemAttr
from ..errors import MemoryAllocationError
from ..sizes import (
    AllocApi,
    align_up,
)
from ..vmm import ExpandableSegment
from ._base import _PoolBase
from .segments import Segment


class ExpandablePool(_PoolBase[Segment]):
    """Segments in one contiguous virtual range that grows and shrinks (docs/runtime-model.md §4,
    §3.14).

    Up to ``max_size`` bytes of addresses are reserved at once; physical memory is
    mapped in granularity chunks at the end when no free extent fits, and
    :meth:`release_unused` unmaps the free chunks at the end. Segments follow the
    aclrtMalloc rules (``api``), or 128-byte starts with ``mixed_media=True``.
    """

    def __init__(self, device: Device | int, max_size: int, *,
                 api: AllocApi | str = AllocApi.MALLOC, mixed_media: bool = False,
                 attr: int = MemAttr.HBM_MEM_HUGE) -> None:
        super().__init__(device, api, mixed_media, MallocPolicy.HUGE_FIRST)
        if self._host:
            raise ValueError("ExpandablePool: virtual memory is device memory; "
                             "use SegmentPool(api='aclrtMallocHost') for host memory")
        size = c_uint(max_size, "ExpandablePool", "max_size")
        self._segment = ExpandableSegment(size, device=self._device.id, attr=attr)
        # Kept here too: they stay readable once the pool (and the segment) is closed.
        self._max_size, self._chunk = self._segment.max_size, self._segment.chunk
        self._base = self._segment.address
        if self._base % self._align:  # pragma: no cover - reservations are page aligned
            self._segment.close()
            raise ValueError("ExpandablePool: the runtime gave an unaligned range")
        self._bounds.add(self._base)

    @property
    def max_size(self) -> int:
        """Bytes of the virtual range reserved up front: the most the pool can map."""
        return self._max_size

    @property
    def chunk(self) -> int:
        """The mapping granularity: the pool grows and shrinks by this many bytes."""
        return self._chunk

    @property
    def address(self) -> int:
        """The first address of the pool's virtual range."""
        return self._base

    @property
    def mapped(self) -> int:
        """Bytes mapped now (0 once closed)."""
        return 0 if self._closed else self._segment.size

    def _grow(self, footprint: int, nbytes: int) -> None:
        segment = self._segment
        old = segment.size
        end = self._base + old
        tail = self._ends.get(end)
        have = 0 if tail is None else end - tail
        wanted = old + footprint - have
        if wanted > segment.max_size:
            raise self._out_of_memory(nbytes, footprint,
                                      "the pool's max_size would be exceeded", segment.max_size)
        try:
            segment.grow(wanted)
        except MemoryAllocationError as exc:
            raise self._out_of_memory(nbytes, footprint, "the runtime is out of memory",
                                      segment.max_size) from exc
        added = segment.size - old
        self._reserved += added
        self._blocks_allocated += added // segment.chunk
        if self._reserved > self._peak_reserved:
            self._peak_reserved = self._reserved
        self._insert(end, self._base + segment.size)

    def _release_unused(self) -> int:
        segment = self._segment
        end = self._base + segment.size
        tail = self._ends.get(end)
        if tail is None:
            return 0
        keep = align_up(tail - self._base, segment.chunk)
        if keep >= segment.size:
            return 0
        self._remove_free(tail)
        if tail < self._base + keep:
            self._add_free(tail, self._base + keep)
        released = segment.size - keep
        segment.shrink(keep)
        self._reserved -= released
        self._blocks_freed += released // segment.chunk
        return released

    def _spans(self, growing: bool) -> list[tuple[int, int]]:
        mapped = self._segment.size
        self._bounds = {self._base}
        self._reserved = mapped
        # Only the counter of the interrupted direction can be behind.
        if growing:
            self._blocks_allocated = self._blocks_freed + mapped // self._chunk
        else:
            self._blocks_freed = self._blocks_allocated - mapped // self._chunk
        return [(self._base, self._base + mapped)] if mapped else []

    def _close_memory(self) -> None:
        self._blocks_freed += self._segment.size // self._segment.chunk
        self._reserved = 0
        # Virtual memory outlives the device's context (docs/runtime-model.md §4.1): the segment
        # knows whether the runtime still holds it, so it is always asked to close. If the
        # runtime refuses, nothing more can be done for these addresses.
        with contextlib.suppress(Exception):
            self._segment.close()

    def _parent_of(self, start: int) -> int:
        return self._base
