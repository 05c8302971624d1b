"""Address bookkeeping for the fake: a free-extent allocator and a block index.

Both stay fast with 100 000 live blocks and holes, and both survive an exception
(Ctrl-C, a signal handler's exception) raised between any two of their lines: every
change is a sequence of idempotent steps, and a change interrupted half-way is put back
before the exception propagates.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from operator import itemgetter

__all__ = ["Block", "BlockIndex", "ExtentAllocator", "SortedInts"]

_first = itemgetter(0)
#: Size of the sublists of :class:`SortedInts`: inserting moves at most this many items.
_LOAD = 256
#: Free extents tried per size class before the allocator looks in the next class up.
_PROBES = 8


class SortedInts:
    """A sorted set of ints with O(log n) insert, remove and floor lookup.

    The values live in sublists of at most ``2 * _LOAD`` items, so an insert in the
    middle of 100 000 values moves a few hundred of them, not 50 000.
    """

    __slots__ = ("_lists",)

    def __init__(self) -> None:
        self._lists: list[list[int]] = []

    def __len__(self) -> int:
        return sum(len(sub) for sub in self._lists)

    def __iter__(self) -> Iterator[int]:
        return (value for sub in list(self._lists) for value in list(sub))

    def add(self, value: int) -> None:
        lists = self._lists
        if not lists:
            lists.append([value])
            return
        i = max(bisect.bisect_right(lists, value, key=_first) - 1, 0)
        sub = lists[i]
        j = bisect.bisect_left(sub, value)
        if j < len(sub) and sub[j] == value:
            return
        sub.insert(j, value)
        if len(sub) > 2 * _LOAD:
            # One slice assignment: an interrupt sees either the old or the new split.
            lists[i:i + 1] = [sub[:_LOAD], sub[_LOAD:]]

    def discard(self, value: int) -> None:
        lists = self._lists
        i = bisect.bisect_right(lists, value, key=_first) - 1
        if i < 0:
            return
        sub = lists[i]
        j = bisect.bisect_left(sub, value)
        if j == len(sub) or sub[j] != value:
            return
        if len(sub) == 1:
            del lists[i]
        else:
            del sub[j]

    def floor(self, value: int) -> int | None:
        """The largest member <= ``value``, or None."""
        lists = self._lists
        if len(lists) == 1:  # a small set (e.g. a few pinned blocks): one plain bisect
            sub = lists[0]
            return sub[bisect.bisect_right(sub, value) - 1] if sub[0] <= value else None
        i = bisect.bisect_right(lists, value, key=_first) - 1
        if i < 0:
            return None
        sub = lists[i]
        return sub[bisect.bisect_right(sub, value) - 1]

    def ceiling(self, value: int) -> int | None:
        """The smallest member >= ``value``, or None."""
        lists = self._lists
        i = max(bisect.bisect_right(lists, value, key=_first) - 1, 0)
        while i < len(lists):
            sub = lists[i]
            j = bisect.bisect_left(sub, value)
            if j < len(sub):
                return sub[j]
            i += 1
        return None

    def clear(self) -> None:
        self._lists = []


class ExtentAllocator:
    """Aligned extents inside ``[base, base + size)`` from segregated free lists.

    Free extents are filed by size class (the bit length of their size) and indexed by
    start and by end, so finding room costs a few probes whatever the number of holes,
    and a freed extent merges with free neighbours in O(1). Within a class the oldest
    free extent that fits is used: a block freed and allocated again at the same size
    gets its address back. ``exact=True`` also keeps the free starts sorted, for
    :meth:`take` (fixed-address reservations).
    """

    __slots__ = ("_by_end", "_by_start", "_classes", "_mask", "_sorted", "base", "size")

    def __init__(self, base: int, size: int, *, exact: bool = False) -> None:
        self.base = base
        self.size = size
        self._sorted: SortedInts | None = SortedInts() if exact else None
        self._by_start: dict[int, int] = {}
        self._by_end: dict[int, int] = {}
        self._classes: list[dict[int, None]] = [{} for _ in range(66)]
        #: Bit c set when class c may be non-empty (a hint: cleared lazily).
        self._mask = 0
        self._put(base, size)

    # -- idempotent steps --------------------------------------------------------------------------
    def _put(self, start: int, length: int) -> None:
        cls = length.bit_length()
        self._mask |= 1 << cls
        self._classes[cls][start] = None
        self._by_start[start] = length
        self._by_end[start + length] = start
        if self._sorted is not None:
            self._sorted.add(start)

    def _drop(self, start: int, length: int) -> None:
        self._classes[length.bit_length()].pop(start, None)
        self._by_start.pop(start, None)
        self._by_end.pop(start + length, None)
        if self._sorted is not None:
            self._sorted.discard(start)

    def _replace(self, old: list[tuple[int, int]], new: list[tuple[int, int]]) -> None:
        """Swap free extents ``old`` for ``new``; all or nothing under an interrupt."""
        try:
            for start, length in old:
                self._drop(start, length)
            for start, length in new:
                self._put(start, length)
        except BaseException:
            for start, length in new:
                self._drop(start, length)
            for start, length in old:
                self._put(start, length)
            raise

    # -- allocation --------------------------------------------------------------------------------
    def allocate(self, size: int, alignment: int) -> int | None:
        """Start of a free ``size``-byte extent aligned to ``alignment``, or None."""
        found = self._find(size, alignment)
        if found is None:
            return None
        start, aligned = found
        length = self._by_start[start]
        head = aligned - start
        tail = length - head - size
        if self._sorted is not None:
            new = [(start, head)] if head else []
            if tail:
                new.append((aligned + size, tail))
            self._replace([(start, length)], new)
            return aligned
        # The common case spelled out (it is most of an aclrtMalloc); same steps as
        # _replace, with the same undo.
        classes, by_start, by_end = self._classes, self._by_start, self._by_end
        try:
            classes[length.bit_length()].pop(start, None)
            del by_start[start]
            del by_end[start + length]
            if head:
                self._put(start, head)
            if tail:
                rest = aligned + size
                cls = tail.bit_length()
                self._mask |= 1 << cls
                classes[cls][rest] = None
                by_start[rest] = tail
                by_end[rest + tail] = rest
            return aligned
        except BaseException:
            if tail:
                self._drop(aligned + size, tail)
            if head:
                self._drop(start, head)
            self._put(start, length)
            raise

    def _find(self, size: int, alignment: int) -> tuple[int, int] | None:
        classes = self._classes
        lengths = self._by_start
        cls = size.bit_length()
        mask = self._mask >> cls
        while mask:
            # Straight to the next class that may hold extents.
            skip = (mask & -mask).bit_length() - 1
            cls += skip
            mask >>= skip
            entries = classes[cls]
            if not entries:
                self._mask &= ~(1 << cls)
            else:
                for probe, start in enumerate(entries):
                    aligned = -(-start // alignment) * alignment
                    if aligned + size <= start + lengths[start]:
                        return start, aligned
                    if probe == _PROBES:
                        break
            cls += 1
            mask >>= 1
        return self._find_slowly(size, alignment)

    def _find_slowly(self, size: int, alignment: int) -> tuple[int, int] | None:
        """Every free extent, in case the probes of a crowded class missed the fit."""
        for start, length in self._by_start.items():
            aligned = -(-start // alignment) * alignment
            if aligned + size <= start + length:
                return start, aligned
        return None

    def take(self, start: int, size: int) -> bool:
        """Carve exactly ``[start, start+size)``; False when any of it is not free.

        Needs ``exact=True``.
        """
        assert self._sorted is not None, "take() needs ExtentAllocator(exact=True)"
        free_start = self._sorted.floor(start)
        if free_start is None:
            return False
        free_end = free_start + self._by_start[free_start]
        if start + size > free_end:
            return False
        new = [(free_start, start - free_start)] if start > free_start else []
        if free_end > start + size:
            new.append((start + size, free_end - start - size))
        self._replace([(free_start, free_end - free_start)], new)
        return True

    def release(self, start: int, size: int) -> None:
        """Give ``[start, start+size)`` back, merged with the free extents around it."""
        by_start, by_end = self._by_start, self._by_end
        end = start + size
        after = by_start.get(end)
        before = by_end.get(start)
        if self._sorted is not None or (after is not None and before is not None):
            old: list[tuple[int, int]] = []
            merged_start, merged_end = start, end
            if after is not None:
                old.append((end, after))
                merged_end += after
            if before is not None:
                old.append((before, start - before))
                merged_start = before
            self._replace(old, [(merged_start, merged_end - merged_start)])
            return
        # At most one free neighbour (the common case), spelled out like allocate().
        classes = self._classes
        if after is not None:
            merged_start, length, old_start, old_length = start, size + after, end, after
        elif before is not None:
            merged_start, length = before, end - before
            old_start, old_length = before, start - before
        else:
            try:
                self._put(start, size)
            except BaseException:
                # Half filed (a class entry without its length) would fail a later
                # allocation with KeyError: all or nothing, as everywhere here.
                self._drop(start, size)
                raise
            return
        try:
            classes[old_length.bit_length()].pop(old_start, None)
            del by_start[old_start]
            del by_end[old_start + old_length]
            cls = length.bit_length()
            self._mask |= 1 << cls
            classes[cls][merged_start] = None
            by_start[merged_start] = length
            by_end[merged_start + length] = merged_start
        except BaseException:
            self._drop(merged_start, length)
            self._put(old_start, old_length)
            raise

    def reset(self) -> None:
        self._by_start = {}
        self._by_end = {}
        self._classes = [{} for _ in range(66)]
        self._mask = 0
        if self._sorted is not None:
            self._sorted = SortedInts()
        self._put(self.base, self.size)


class Block:
    """One live allocation as the fake's driver sees it."""

    __slots__ = ("api", "device", "end", "extent", "padded", "page_size", "requested",
                 "stack", "start")

    def __init__(self, start: int, padded: int, extent: int, page_size: int, api: str,
                 device: int | None, requested: int = 0) -> None:
        self.start = start
        #: Bytes the ACL layer reserved (after the +32 / padding rule).
        self.padded = padded
        #: Bytes of whole pages behind the block (what aclrtMemGetAddressRange reports).
        self.extent = extent
        self.end = start + extent
        self.page_size = page_size
        self.api = api
        #: Device id, or None for host memory.
        self.device = device
        #: Bytes the caller asked for (the memory checker's canary starts here).
        self.requested = requested
        #: Where it was allocated (recorded only while the memory checker is on).
        self.stack: Iterable[str] | None = None

    def __repr__(self) -> str:
        return (f"Block({self.api} {self.start:#x}+{self.extent:#x}, page {self.page_size}, "
                f"device {self.device})")


_MISSING: object = object()


class BlockIndex:
    """Live blocks by start, for "which block holds this address".

    Starts added since the last interior lookup wait in an unsorted dict: a block
    allocated and freed without anyone asking for an address inside it never touches
    the sorted index.
    """

    __slots__ = ("_blocks", "_recent", "_starts", "by_start")

    def __init__(self) -> None:
        self._starts = SortedInts()
        self._recent: dict[int, None] = {}
        self._blocks: dict[int, Block] = {}
        #: Live blocks by start (read only: what at() answers, for hot paths to read
        #: without a call).
        self.by_start = self._blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def __iter__(self) -> Iterator[Block]:
        return iter(list(self._blocks.values()))

    def add(self, block: Block) -> None:
        # The dict first: a block that is only half indexed is still found by at() and
        # removed by discard().
        self._blocks[block.start] = block
        self._recent[block.start] = None

    def discard(self, block: Block) -> None:
        """Forget ``block`` (idempotent, so an interrupted add or remove can be undone)."""
        start = block.start
        if self._recent.pop(start, _MISSING) is _MISSING:
            self._starts.discard(start)
        if self._blocks.get(start) is block:
            del self._blocks[start]

    def _sorted(self) -> SortedInts:
        recent = self._recent
        if recent:
            # Sorted first, then forgotten all at once: interrupted in between, starts are
            # in both, which lookups allow. (Taking them one by one from the front of the
            # dict would cost O(n) each: a dict skips its deleted slots when iterated.)
            for start in list(recent):
                self._starts.add(start)
            recent.clear()
        return self._starts

    def at(self, start: int) -> Block | None:
        return self._blocks.get(start)

    def containing(self, address: int) -> Block | None:
        block = self._blocks.get(address)
        if block is not None:
            return block
        # Copies of pageable memory ask this of the pinned index: no call when sorted.
        starts = self._sorted() if self._recent else self._starts
        while True:
            start = starts.floor(address)
            if start is None:
                return None
            block = self._blocks.get(start)
            if block is not None:
                return block if address < block.end else None
            starts.discard(start)  # left behind by an interrupted discard()

    def overlapping(self, start: int, end: int) -> Iterator[Block]:
        """Live blocks that overlap ``[start, end)``, in address order."""
        first = self.containing(start)
        starts = self._sorted()
        cursor = start
        if first is not None:
            yield first
            cursor = first.end
        while True:
            nxt = starts.ceiling(cursor)
            if nxt is None or nxt >= end:
                return
            block = self._blocks.get(nxt)
            if block is not None:
                yield block
                cursor = block.end
            else:
                cursor = nxt + 1
