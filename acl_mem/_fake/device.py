"""One simulated device: its address ranges, sparse backing and page pools.

Device memory lives at addresses no host mapping can take (see ``layout``); its
bytes live in an anonymous ``MAP_NORESERVE`` mapping per range, so host RAM grows
with the pages written, not with the bytes allocated, and freed pages are given
back with ``MADV_DONTNEED`` (in sweeps, see :class:`Region`).
"""

from __future__ import annotations

import mmap
import sys
from dataclasses import dataclass

from .._hints import host_address_space_hint
from ..errors import AclError
from ..sizes import GIANT_PAGE, HUGE_PAGE, NORMAL_PAGE, GiB, MiB, TiB, align_up
from .codes import MEMORY_ALLOCATION
from .extents import Block, BlockIndex, ExtentAllocator
from .hostmem import address_of
from .profiles import Profile

__all__ = ["DVPP_WINDOW", "RESIDENT_FREED_LIMIT", "FakeDevice", "PagePools", "Region", "layout"]

#: Start of the fake's device address space; [16 TiB, 24 TiB) stays free for the
#: VMM fixed-address window (docs/runtime-model.md §4.2).
DEVICE_SPACE_BASE = 24 * TiB
DEVICE_SLOT = 1 * TiB
MAX_DEVICES = 32
#: Per-process DVPP address space on A2/A3/Atlas inference (docs/runtime-model.md §3.8).
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


#: Freed device memory kept resident (not given back to the host) per range, so a block
#: freed and allocated again does not fault its pages in anew; past this the free
#: ranges are given back in one sweep ...
RESIDENT_FREED_LIMIT = 8 * MiB
#: ... except the range freed last when it is at most this big: the next allocation of
#: the same size gets it back, already resident.
RESIDENT_LAST_LIMIT = 32 * MiB
#: Device address space (not memory: pools count that) held for reuse by freed blocks'
#: sizes, per device.
RECYCLED_LIMIT = 256 * MiB


class Region:
    """A device address range and the sparse host mapping behind it (made on first use).

    Freed ranges are recorded, not discarded at once (a syscall per free, and the next
    allocation would fault every page again); once more than
    :data:`RESIDENT_FREED_LIMIT` bytes were freed, every recorded range that is still
    free is given back to the host.
    """

    def __init__(self, base: int, size: int) -> None:
        self.base = base
        self.size = size
        self.end = base + size
        self._map: mmap.mmap | None = None
        #: What to add to a device address for its host address, once the mapping exists
        #: (None before: host_address() makes it).
        self.host_offset: int | None = None
        self._freed: list[tuple[int, int]] = []
        self._freed_bytes = 0

    def host_address(self, device_address: int) -> int:
        offset = self.host_offset
        if offset is None:
            # Both steps idempotent: an interrupt between them leaves nothing half-made.
            if self._map is None:
                self._map = self._make_map()
            offset = self.host_offset = address_of(self._map) + _SKEW - self.base
        return offset + device_address

    def make_backing(self) -> bool:
        """Map the host side now; False when the host refuses that much address space
        (``ulimit -v``), so aclrtSetDevice can say so instead of a copy failing later."""
        try:
            self.host_address(self.base)
        except AclError:
            return False
        return True

    def _make_map(self) -> mmap.mmap:
        try:
            return mmap.mmap(-1, self.size + mmap.PAGESIZE,
                             flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE)
        except OSError as exc:
            # MAP_NORESERVE costs no RAM, but RLIMIT_AS counts every mapped byte. A
            # smaller window would change where blocks may go (docs/fidelity.md row 76).
            raise AclError(MEMORY_ALLOCATION, f"mapping {self.size} bytes of host address "
                           "space behind fake device memory", host_address_space_hint()) from exc

    def freed(self, device_address: int, size: int, live: BlockIndex) -> None:
        """``[device_address, +size)`` is free now; sweep when too much is resident."""
        if self._map is None:
            return
        self._freed.append((device_address, size))
        self._freed_bytes += size
        if self._freed_bytes > RESIDENT_FREED_LIMIT:
            keep = (device_address, size) if size <= RESIDENT_LAST_LIMIT else None
            self.sweep(live, keep=keep)

    def sweep(self, live: BlockIndex, keep: tuple[int, int] | None = None) -> None:
        """Give back the host pages of every recorded freed range no live block uses now
        (``keep``, the range just freed, stays resident for the next allocation)."""
        pending = sorted(self._freed)
        # Whatever happens below, the record is rebuilt from scratch: an interrupted
        # sweep only leaves pages resident.
        self._freed = [keep] if keep is not None else []
        self._freed_bytes = 0
        merged: list[list[int]] = []
        for start, size in pending:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], start + size)
            else:
                merged.append([start, start + size])
        for start, end in merged:
            cursor = start
            for block in live.overlapping(start, end):
                self._discard(cursor, block.start)
                cursor = max(cursor, block.end)
            if keep is not None and keep[0] < end and start < keep[0] + keep[1]:
                self._discard(cursor, keep[0])
                cursor = max(cursor, keep[0] + keep[1])
            self._discard(cursor, end)

    def _discard(self, start: int, end: int) -> None:
        """Give the whole host pages inside ``[start, end)`` back (they read as zero)."""
        if self._map is None or end <= start:
            return
        offset = _SKEW + start - self.base
        first = align_up(offset, mmap.PAGESIZE)
        last = (offset + end - start) // mmap.PAGESIZE * mmap.PAGESIZE
        if last > first:
            self._map.madvise(mmap.MADV_DONTNEED, first, last - first)

    def discard_all(self) -> None:
        if self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED, 0, len(self._map))
        self._freed = []
        self._freed_bytes = 0

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

    def free_of(self, kind: int) -> int:
        if kind == NORMAL_PAGE:
            return self.normal_total - self.normal_used
        huge_free = self.huge_total - self.huge_used
        return huge_free if kind == HUGE_PAGE else huge_free // GIANT_PAGE * GIANT_PAGE

    def total_of(self, kind: int) -> int:
        if kind == NORMAL_PAGE:
            return self.normal_total
        if kind == HUGE_PAGE:
            return self.huge_total
        return self.huge_total // GIANT_PAGE * GIANT_PAGE

    def take(self, kind: int, size: int) -> bool:
        if size > self.free_of(kind):
            return False
        if kind == NORMAL_PAGE:
            self.normal_used += size
        else:
            self.huge_used += size
        return True

    def give_back(self, kind: int, size: int) -> None:
        if kind == NORMAL_PAGE:
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
        #: Addresses of freed blocks by (extent, page size, dvpp?), handed out again before
        #: the free-extent allocator is asked (most programs free and allocate the same
        #: sizes over and over); flushed back to it when it runs out of room.
        self._recycled: dict[tuple[int, int, bool], list[int]] = {}
        self._recycled_bytes = 0

    def allocate(
        self, api: str, padded: int, kinds: tuple[int, ...], *, dvpp: bool = False,
        requested: int = 0,
    ) -> Block | None:
        """Take pages of the first kind in ``kinds`` that has room; None when none has.

        All or nothing: interrupted at any line, it leaves pools, addresses and the
        block index as they were.
        """
        space = self._dvpp_space if dvpp else self._heap_space
        pools = self.pools
        for kind in kinds:
            extent = -(-padded // kind) * kind
            if kind == NORMAL_PAGE:
                if extent > pools.normal_total - pools.normal_used:
                    continue
            elif extent > pools.free_of(kind):
                continue
            saved = pools.normal_used, pools.huge_used
            start: int | None = None
            block: Block | None = None
            try:
                recycled = self._recycled.get((extent, kind, dvpp))
                if recycled:
                    self._recycled_bytes -= extent
                    start = recycled.pop()
                else:
                    start = self._take_address(space, extent, kind)
                    if start is None:
                        continue
                block = Block(start, padded, extent, kind, api, self.id, requested)
                if kind == NORMAL_PAGE:
                    pools.normal_used += extent
                else:
                    pools.huge_used += extent
                self.blocks.add(block)
                return block
            except BaseException:
                if block is not None:
                    self.blocks.discard(block)
                pools.normal_used, pools.huge_used = saved
                if start is not None:
                    space.release(start, extent)
                raise
        return None

    def _take_address(self, space: ExtentAllocator, extent: int, kind: int) -> int | None:
        """Free addresses from the allocator (recycled ones of this size are used first,
        in :meth:`allocate`), flushing the recycled ones back when it is full."""
        found = space.allocate(extent, kind)
        if found is None and self._recycled:
            self._flush_recycled()
            found = space.allocate(extent, kind)
        return found

    def _flush_recycled(self) -> None:
        recycled, self._recycled = self._recycled, {}
        self._recycled_bytes = 0
        for (extent, _, dvpp), starts in recycled.items():
            space = self._dvpp_space if dvpp else self._heap_space
            for start in starts:
                space.release(start, extent)

    def release(self, block: Block, *, keep_address: bool = False) -> None:
        """Give the block's pages back; its addresses too unless ``keep_address``
        (the memory checker's quarantine returns them later with release_address).

        All or nothing under an interrupt, like :meth:`allocate`.
        """
        pools = self.pools
        saved = pools.normal_used, pools.huge_used
        start, extent = block.start, block.extent
        region = self.dvpp if self.dvpp.base <= start < self.dvpp.end else self.heap
        try:
            self.blocks.discard(block)
            if block.page_size == NORMAL_PAGE:
                pools.normal_used -= extent
            else:
                pools.huge_used -= extent
            # The address goes back last, in one call: an interrupt before it leaves the
            # address with the block (undone below), never in two places.
            if not keep_address:
                dvpp = region is self.dvpp
                if self._recycled_bytes < RECYCLED_LIMIT:
                    key = (extent, block.page_size, dvpp)
                    recycled = self._recycled.get(key)
                    if recycled is None:  # (setdefault would build a list on every free)
                        recycled = self._recycled[key] = []
                    self._recycled_bytes += extent
                    recycled.append(start)
                else:
                    (self._dvpp_space if dvpp else self._heap_space).release(start, extent)
        except BaseException:
            self.blocks.add(block)
            pools.normal_used, pools.huge_used = saved
            raise
        # Past the commit: at worst the range stays resident a little longer. (Until a byte
        # of the region is touched there is no mapping and nothing to record: no call.)
        if region._map is not None:
            region.freed(start, extent, self.blocks)

    def release_address(self, start: int, extent: int) -> None:
        space = self._dvpp_space if self.dvpp.contains(start) else self._heap_space
        space.release(start, extent)

    def release_all(self) -> None:
        """Every block at once (context destroyed): a fresh address space; the pools keep
        what virtual-memory handles hold (they outlive contexts, docs/runtime-model.md §4.1)."""
        blocks = list(self.blocks)
        normal = sum(b.extent for b in blocks if b.page_size == NORMAL_PAGE)
        huge = sum(b.extent for b in blocks) - normal
        pools = self.pools
        self.blocks = BlockIndex()
        pools.normal_used, pools.huge_used = pools.normal_used - normal, pools.huge_used - huge
        self._recycled = {}
        self._recycled_bytes = 0
        self._heap_space.reset()
        self._dvpp_space.reset()
        self.heap.discard_all()
        self.dvpp.discard_all()

    def region_of(self, address: int) -> Region:
        return self.dvpp if self.dvpp.contains(address) else self.heap

    def owns(self, address: int) -> bool:
        return self.heap.contains(address) or self.dvpp.contains(address)
