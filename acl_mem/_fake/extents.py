"""Address bookkeeping for the fake: a free-extent allocator and a block index."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["Block", "BlockIndex", "ExtentAllocator"]


class ExtentAllocator:
    """First-fit allocation of aligned extents inside ``[base, base + size)``.

    Free extents are kept sorted and coalesced, so a block freed next to free space
    merges with it and the space is found again at the lowest address.
    """

    def __init__(self, base: int, size: int) -> None:
        self.base = base
        self.size = size
        self._starts: list[int] = [base]
        self._lengths: dict[int, int] = {base: size}

    def allocate(self, size: int, alignment: int) -> int | None:
        for i, start in enumerate(self._starts):
            length = self._lengths[start]
            aligned = -(-start // alignment) * alignment
            if aligned + size > start + length:
                continue
            del self._starts[i]
            del self._lengths[start]
            if aligned > start:
                self._insert(start, aligned - start)
            tail = start + length - (aligned + size)
            if tail:
                self._insert(aligned + size, tail)
            return aligned
        return None

    def take(self, start: int, size: int) -> bool:
        """Carve exactly ``[start, start+size)``; False when any of it is not free."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0:
            return False
        free_start = self._starts[i]
        free_end = free_start + self._lengths[free_start]
        if start + size > free_end:
            return False
        del self._starts[i]
        del self._lengths[free_start]
        if start > free_start:
            self._insert(free_start, start - free_start)
        if free_end > start + size:
            self._insert(start + size, free_end - start - size)
        return True

    def release(self, start: int, size: int) -> None:
        i = bisect.bisect_left(self._starts, start)
        if i < len(self._starts) and self._starts[i] == start + size:
            size += self._lengths.pop(self._starts.pop(i))
        if i > 0:
            before = self._starts[i - 1]
            if before + self._lengths[before] == start:
                self._lengths[before] += size
                return
        self._insert(start, size)

    def reset(self) -> None:
        self._starts = [self.base]
        self._lengths = {self.base: self.size}

    def _insert(self, start: int, size: int) -> None:
        bisect.insort(self._starts, start)
        self._lengths[start] = size


@dataclass(eq=False)
class Block:
    """One live allocation as the fake's driver sees it."""

    start: int
    #: Bytes the ACL layer reserved (after the +32 / padding rule).
    padded: int
    #: Bytes of whole pages behind the block (what aclrtMemGetAddressRange reports).
    extent: int
    page_size: int
    api: str
    #: Device id, or None for host memory.
    device: int | None
    #: Bytes the caller asked for (the memory checker's canary starts here).
    requested: int = 0
    #: Where it was allocated (recorded only while the memory checker is on).
    stack: tuple[str, ...] | None = field(default=None, repr=False)

    @property
    def end(self) -> int:
        return self.start + self.extent


class BlockIndex:
    """Live blocks sorted by address, for "which block holds this address"."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._blocks: dict[int, Block] = {}

    def __len__(self) -> int:
        return len(self._blocks)

    def __iter__(self) -> Iterator[Block]:
        return iter(list(self._blocks.values()))

    def add(self, block: Block) -> None:
        bisect.insort(self._starts, block.start)
        self._blocks[block.start] = block

    def remove(self, block: Block) -> None:
        del self._blocks[block.start]
        del self._starts[bisect.bisect_left(self._starts, block.start)]

    def at(self, start: int) -> Block | None:
        return self._blocks.get(start)

    def containing(self, address: int) -> Block | None:
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0:
            return None
        block = self._blocks[self._starts[i]]
        return block if address < block.end else None

    def covers(self, address: int, size: int) -> Block | None:
        """The first block if ``[address, address+size)`` lies in back-to-back live blocks."""
        first = block = self.containing(address)
        end = address + size
        while block is not None and block.end < end:
            nxt = self._blocks.get(block.end)
            if nxt is None or nxt.device != block.device:
                return None
            block = nxt
        return first
