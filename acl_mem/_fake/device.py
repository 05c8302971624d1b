"""One simulated device: its address ranges, sparse backing and page pools.

Device memory lives at addresses no host mapping can take (see ``layout``); its
bytes live in an anonymous ``MAP_NORESERVE`` mapping per range, so host RAM grows
with the pages written, not with the bytes allocated, and freed pages are given
back with ``MADV_DONTNEED``.
"""

from __future__ import annotations

import mmap
import sys
from dataclasses import dataclass

from ..sizes import GIANT_PAGE, HUGE_PAGE, PageKind, align_up
from .extents import Block, BlockIndex, ExtentAllocator
from .hostmem import address_of
from .profiles import Profile

__all__ = ["DVPP_WINDOW", "FakeDevice", "PagePools", "Region", "layout"]

TiB = 1 << 40
GiB = 1 << 30
#: Start of the fake's device address space; [16 TiB, 24 TiB) stays free for the
#: VMM fixed-address window (spec §4.2).
DEVICE_SPACE_BASE = 24 * TiB
DEVICE_SLOT = 1 * TiB
MAX_DEVICES = 32
#: Per-process DVPP address space on A2/A3/Atlas inference (spec §3.8).
DVPP_WINDOW = 16 * GiB
# Python exposes MAP_NORESERVE only from 3.12; its value is fixed by the Linux ABI.
_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)


def layout(device: int, capacity: int) -> tuple[int, int, int]:
    """``(heap base, heap span, dvpp base)`` of ``device``: heap span is twice the capacity."""
    slot = DEVICE_SPACE_BASE + device * DEVICE_SLOT
    span = min(align_up(2 * capacity, GiB), DEVICE_SLOT - 2 * DVPP_WINDOW)
    return slot, span, slot + DEVICE_SLOT - DVPP_WINDOW


#: Host bytes sit this far from page alignment. Device blocks are page-aligned and
#: malloc'ed host buffers start 16 bytes into a page; a memcpy between addresses whose
#: difference is a small multiple of 4 KiB stalls on 4K aliasing (measured 3.6x slower
#: for 256 MiB), so the backing is skewed by half a page.
_SKEW = 2048


class Region:
    """A device address range and the sparse host mapping behind it (made on first use)."""

    def __init__(self, base: int, size: int) -> None:
        self.base = base
        self.size = size
        self._map: mmap.mmap | None = None
        self._host_base = 0

    def host_address(self, device_address: int) -> int:
        if self._map is None:
            self._map = mmap.mmap(
                -1, self.size + mmap.PAGESIZE,
                flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE,
            )
            self._host_base = address_of(self._map)
        return self._host_base + _SKEW + (device_address - self.base)

    def discard(self, device_address: int, size: int) -> None:
        """Give the whole host pages of a freed range back (their contents become zero)."""
        if self._map is None or size <= 0:
            return
        offset = _SKEW + device_address - self.base
        first = align_up(offset, mmap.PAGESIZE)
        last = (offset + size) // mmap.PAGESIZE * mmap.PAGESIZE
        if last > first:
            self._map.madvise(mmap.MADV_DONTNEED, first, last - first)

    def contains(self, address: int) -> bool:
        return self.base <= address < self.base + self.size


@dataclass
class PagePools:
    """Normal-page and huge-page pools; 1 GiB pages are whole GiBs of the huge pool."""

    normal_total: int
    huge_total: int
    normal_used: int = 0
    huge_used: int = 0

    @classmethod
    def for_profile(cls, profile: Profile) -> PagePools:
        normal = align_up(int(profile.capacity * profile.normal_fraction), HUGE_PAGE)
        normal = min(normal, profile.capacity)
        return cls(normal_total=normal, huge_total=profile.capacity - normal)

    def free_of(self, kind: PageKind) -> int:
        if kind is PageKind.NORMAL:
            return self.normal_total - self.normal_used
        huge_free = self.huge_total - self.huge_used
        return huge_free if kind is PageKind.HUGE else huge_free // GIANT_PAGE * GIANT_PAGE

    def total_of(self, kind: PageKind) -> int:
        if kind is PageKind.NORMAL:
            return self.normal_total
        if kind is PageKind.HUGE:
            return self.huge_total
        return self.huge_total // GIANT_PAGE * GIANT_PAGE

    def take(self, kind: PageKind, size: int) -> bool:
        if size > self.free_of(kind):
            return False
        if kind is PageKind.NORMAL:
            self.normal_used += size
        else:
            self.huge_used += size
        return True

    def give_back(self, kind: PageKind, size: int) -> None:
        if kind is PageKind.NORMAL:
            self.normal_used -= size
        else:
            self.huge_used -= size

    def reset(self) -> None:
        self.normal_used = self.huge_used = 0


class FakeDevice:
    """Address ranges, pools and the live blocks of one device."""

    def __init__(self, device_id: int, profile: Profile) -> None:
        self.id = device_id
        self.profile = profile
        heap_base, heap_span, dvpp_base = layout(device_id, profile.capacity)
        self.heap = Region(heap_base, heap_span)
        self.dvpp = Region(dvpp_base, DVPP_WINDOW)
        self._heap_space = ExtentAllocator(heap_base, heap_span)
        self._dvpp_space = ExtentAllocator(dvpp_base, DVPP_WINDOW)
        self.pools = PagePools.for_profile(profile)
        self.blocks = BlockIndex()

    def allocate(
        self, api: str, padded: int, kinds: tuple[PageKind, ...], *, dvpp: bool = False
    ) -> Block | None:
        """Take pages of the first kind in ``kinds`` that has room; None when none has."""
        space = self._dvpp_space if dvpp else self._heap_space
        for kind in kinds:
            extent = align_up(padded, int(kind))
            if extent > self.pools.free_of(kind):
                continue
            start = space.allocate(extent, int(kind))
            if start is None:
                continue
            self.pools.take(kind, extent)
            block = Block(start, padded, extent, int(kind), api, self.id)
            self.blocks.add(block)
            return block
        return None

    def release(self, block: Block, *, keep_address: bool = False) -> None:
        """Give the block's pages back; its addresses too unless ``keep_address``
        (the memory checker's quarantine returns them later with release_address)."""
        self.blocks.remove(block)
        self.pools.give_back(PageKind(block.page_size), block.extent)
        region = self.region_of(block.start)
        region.discard(block.start, block.extent)
        if not keep_address:
            self.release_address(block.start, block.extent)

    def release_address(self, start: int, extent: int) -> None:
        space = self._dvpp_space if self.dvpp.contains(start) else self._heap_space
        space.release(start, extent)

    def release_all(self) -> None:
        for block in self.blocks:
            self.release(block)

    def region_of(self, address: int) -> Region:
        return self.dvpp if self.dvpp.contains(address) else self.heap

    def owns(self, address: int) -> bool:
        return self.heap.contains(address) or self.dvpp.contains(address)


