"""Sub-allocation that cannot break the rules: segments carved from big blocks
(docs/runtime-model.md §3.14).

Device malloc and free are expensive, so Huawei tells users to take one big block and
carve it up, and warns that carving without honouring §3.14 overwrites memory silently.
:class:`SegmentPool` does the carving: every segment takes ``ALIGN_UP(len, 32) + 32``
bytes (no +32 on SoCs without padding, e.g. Ascend950) and starts on a 64-byte
boundary (128 for DVPP memory, or for every kind with ``mixed_media=True``).
:class:`ExpandablePool` does the same inside one contiguous virtual range that grows
and shrinks by mapping granularity chunks (docs/runtime-model.md §4,
:class:`~acl_mem.ExpandableSegment`).

Segments are :class:`~acl_mem.DeviceBuffer` objects (:class:`~acl_mem.HostBuffer`
for an aclrtMallocHost pool): copies, memset, async calls on streams all work, and
``free()``, ``with`` and the finalizer give the range back to the pool, never to the
runtime.

Design
------
* The pool works in *granules* of the start alignment ``A`` (64 or 128 bytes). Every
  free extent starts on an absolute multiple of ``A`` and is a multiple of ``A`` long,
  so any extent can hold any segment that fits, and alignment needs no per-segment
  arithmetic. A segment of ``m`` bytes occupies ``ALIGN_UP(m, A)`` bytes: the spacing
  Huawei's secondary-allocation table asks for (``ALIGN_UP(m, 64)``); that footprint is what
  :attr:`PoolStats.in_use` counts. Parent addresses are aligned up (start) and down
  (end) to ``A`` before use, so alignment holds for absolute addresses whatever
  alignment the runtime gives (both backends give at least page alignment).
* Best fit: free extents are binned by exact length in granules; the set of non-empty
  lengths is a 64-ary bitmap tree (:class:`_SizeIndex`), so "smallest length >= n" is
  a handful of dict look-ups and bit operations: O(log64 U) for lengths below U,
  4 steps at most for extents below 1 GiB. Among extents of the chosen length any
  one is taken. The segment is cut from the front of the extent.
* Coalescing: free extents are indexed by start and by end (dicts), so a freed
  segment merges with both neighbours in O(1); extents never merge across two parent
  blocks, even when the runtime placed the blocks back to back.
  Allocate and free are therefore O(log U) (effectively constant) plus dict and set
  operations, with no dependency beyond the standard library.
* One lock per pool. A finalizer never takes it (a collection can run inside the
  locked section of the same thread): it queues the address, and the next pool
  operation returns queued addresses first.
* Interrupts (KeyboardInterrupt between any two lines). The parent blocks and the live
  segments are the truth; each changes in one statement (with its counter), and the
  free extents and figures derive from them. An operation stopped half way rebuilds
  the derived state from the truth (``_rebuild``, only on that path). Every allocation
  has a serial number that its segment carries: a return queued twice, or queued by a
  segment whose allocation was rolled back, finds no matching live entry and does
  nothing, so returns can be queued whenever in doubt.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import sys
import threading
from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from typing_extensions import Self

from . import _backend, raw
from ._args import c_uint
from ._hostbuf import ffi
from ._lifecycle import close_on_exit, state
from .buffers import Buffer, DeviceBuffer, HostBuffer
from .device import Device
from .enums import MallocPolicy, MemAttr
from .errors import FreedBufferError, MemoryAllocationError
from .sizes import (
    HUGE_FIRST_THRESHOLD,
    HUGE_PAGE,
    NORMAL_PAGE,
    AllocApi,
    MiB,
    align_up,
    allocation_size,
    segment_alignment,
    soc_padding,
)
from .vmm import ExpandableSegment

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "ExpandablePool",
    "HostSegment",
    "PoolOutOfMemoryError",
    "PoolStats",
    "Segment",
    "SegmentPool",
]

#: Bytes the runtime reserves for one ordinary parent block (the padding included).
DEFAULT_BLOCK_SIZE = 32 * MiB
_OOM = 207001
_SIZE_LIMIT = 1 << 64


class PoolOutOfMemoryError(MemoryAllocationError):
    """207001: the pool cannot serve a request within its limit or the device's memory.

    ``requested`` (bytes asked), ``free`` (largest free extent), ``cached`` (free bytes
    in the pool's blocks), ``reserved`` (bytes of the pool's blocks) and ``limit`` are
    attributes as well as part of the message. When the runtime ran out of memory, its
    :class:`~acl_mem.MemoryAllocationError` is chained as ``__cause__``.
    """

    # Not registered for 207001: the runtime's own out-of-memory error stays
    # MemoryAllocationError (AclError.__init_subclass__ registers non-None codes).
    CODE = None  # type: ignore[assignment]
    requested: int = 0
    free: int = 0
    cached: int = 0
    reserved: int = 0
    limit: int | None = None

    def __new__(cls, code: int = _OOM, what: str = "") -> PoolOutOfMemoryError:
        # AclError.__new__ would reach MemoryError.__new__ for a MemoryAllocationError
        # subclass, which CPython refuses ("not safe"); Exception.__new__ is the right one.
        return Exception.__new__(cls)

    def __init__(self, code: int = _OOM, what: str = "") -> None:
        super().__init__(code, what)


@dataclass(frozen=True)
class PoolStats:
    """A pool's figures, kept apart like torch_npu's and CuPy's allocator statistics.

    ``in_use + cached == reserved`` always holds.
    """

    #: Bytes of live segments: each segment's §3.14 size rounded up to the start alignment.
    in_use: int
    #: Bytes the live segments were asked for.
    requested: int
    #: Free bytes inside the pool's blocks (ready for reuse without a runtime call).
    cached: int
    #: Bytes of the parent blocks (mapped bytes for an ExpandablePool) usable for segments.
    reserved: int
    peak_in_use: int
    peak_reserved: int
    #: Live segments.
    segments: int
    allocations: int
    frees: int
    #: Parent blocks taken from / given back to the runtime (mapped / unmapped chunks).
    blocks_allocated: int
    blocks_freed: int
    largest_free_extent: int
    #: ``1 - largest_free_extent / cached``; 0 when nothing is cached.
    fragmentation: float


class _SizeIndex:
    """A set of non-negative ints with "smallest member >= n" in O(log64 of the largest).

    A 64-ary tree of bitmaps: level 0 has one bit per member, each higher level one
    bit per non-empty word of the level below, and the top level is one word. Levels
    are added as larger members arrive (4 levels cover lengths below 2**24 granules,
    1 GiB at 64 bytes). Words are dict entries, so memory follows the number of
    members, not the size of the universe.
    """

    __slots__ = ("_levels",)

    def __init__(self) -> None:
        self._levels: list[dict[int, int]] = [{}]

    def add(self, key: int) -> None:
        levels = self._levels
        while key >> (6 * len(levels)):
            # One level more; its single word has bit 0 set iff the old top word exists.
            levels.append({0: 1} if levels[-1] else {})
        for level in levels:
            word = key >> 6
            old = level.get(word, 0)
            level[word] = old | (1 << (key & 63))
            if old:
                return
            key = word

    def discard(self, key: int) -> None:
        for level in self._levels:
            word = key >> 6
            bits = level.get(word, 0) & ~(1 << (key & 63))
            if bits:
                level[word] = bits
                return
            level.pop(word, None)
            key = word

    def ceiling(self, key: int) -> int | None:
        """The smallest member >= ``key``, or None."""
        levels = self._levels
        depth, top = 0, len(levels)
        while depth < top:
            word = key >> 6
            shift = key & 63
            bits = levels[depth].get(word, 0) >> shift << shift
            if bits:
                key = (word << 6) | ((bits & -bits).bit_length() - 1)
                while depth:
                    depth -= 1
                    bits = levels[depth][key]
                    key = (key << 6) | ((bits & -bits).bit_length() - 1)
                return key
            key = word + 1
            depth += 1
        return None

    def max(self) -> int:
        """The largest member (0 when empty)."""
        key = 0
        for level in reversed(self._levels):
            bits = level.get(key)
            if bits is None:
                return 0
            key = (key << 6) | (bits.bit_length() - 1)
        return key


class _Block:
    __slots__ = ("end", "parent", "start")

    def __init__(self, parent: Buffer, start: int, end: int) -> None:
        self.parent = parent
        self.start = start
        self.end = end


class _PoolBase:
    """Free extents, live segments, statistics and the lock; subclasses supply memory."""

    def __init__(self, device: Device | int, api: AllocApi | str, mixed_media: bool,
                 policy: int) -> None:
        self._device = device if isinstance(device, Device) else Device(device)
        self._api = AllocApi(api)
        self._policy = policy
        self._align = align = segment_alignment(self._api, mixed_media=mixed_media)
        self._shift = align.bit_length() - 1
        self._padding = soc_padding(raw.aclrtGetSocName())
        #: §3.14: ALIGN_UP(len, 32) + 32; no +32 where the SoC pads nothing (Ascend950).
        self._extra = 32 if self._padding else 0
        self._host = self._api is AllocApi.MALLOC_HOST
        self._owner = None if self._host else self._device.id
        self._token = state.token(self._owner)
        self._lock = threading.Lock()
        #: Segment returns queued by finalizers (and by interrupted frees): (start, serial).
        self._pending: deque[tuple[int, int]] = deque()
        self._serials = itertools.count(1)
        self._closed = False
        # Free extents: start -> end, end -> start, length in granules -> starts.
        self._starts: dict[int, int] = {}
        self._ends: dict[int, int] = {}
        self._bins: dict[int, set[int]] = {}
        self._index = _SizeIndex()
        #: Extent starts that begin a parent block: nothing merges across them.
        self._bounds: set[int] = set()
        #: Live segments: start -> (footprint, requested bytes, serial).
        self._live: dict[int, tuple[int, int, int]] = {}
        self._in_use = self._requested = self._reserved = 0
        self._peak_in_use = self._peak_reserved = 0
        self._allocations = self._frees = self._blocks_allocated = self._blocks_freed = 0
        backend = _backend.get()
        # The fake's memory checker watches segments; the native backend's hooks do nothing.
        self._on_allocated = backend.checker_segment_allocated
        self._on_freed = backend.checker_segment_freed

    # -- public ------------------------------------------------------------------------------------
    @property
    def device(self) -> Device:
        return self._device

    @property
    def api(self) -> AllocApi:
        """The allocation call whose §3.14 rules the segments follow."""
        return self._api

    @property
    def alignment(self) -> int:
        """Start alignment of every segment (64 or 128 bytes)."""
        return self._align

    @property
    def closed(self) -> bool:
        return self._closed

    def segment_size(self, size: int) -> int:
        """The §3.14 size of a segment of ``size`` bytes in this pool."""
        return -(-size // 32) * 32 + self._extra

    def allocate(self, size: int) -> Segment | HostSegment:
        """A segment of ``size`` bytes (> 0); PoolOutOfMemoryError if it cannot be served.

        A :class:`HostSegment` for an aclrtMallocHost pool, else a :class:`Segment`.
        """
        if type(size) is int and 0 < size < _SIZE_LIMIT:
            nbytes = size
        else:
            nbytes = c_uint(size, f"{type(self).__name__}.allocate", "size")
            if nbytes == 0:
                raise ValueError(f"{type(self).__name__}.allocate: size must be > 0")
        extent = -(-nbytes // 32) * 32 + self._extra
        need = (extent + self._align - 1) >> self._shift
        footprint = need << self._shift
        with self._lock:
            if self._pending:
                self._drain()
            if self._closed or state.token(self._owner) != self._token:
                self._check_open()
            start = serial = 0
            try:
                carved = self._carve(need)
                if carved is None:
                    self._grow(footprint, nbytes)
                    carved = self._carve(need)
                    if carved is None:  # pragma: no cover - _grow guarantees room
                        raise AssertionError("pool grew but no extent fits")
                start = carved
                serial = next(self._serials)
                # Made before the commit: once committed, nothing can stop the segment
                # from reaching the caller except the return itself (then its finalizer
                # gives the range back).
                segment = (HostSegment if self._host else Segment)(self, start, nbytes, extent,
                                                                   serial)
                count = self._allocations + 1
                self._live[start], self._allocations = (footprint, nbytes, serial), count
                self._in_use += footprint
                self._requested += nbytes
                if self._in_use > self._peak_in_use:
                    self._peak_in_use = self._in_use
            except PoolOutOfMemoryError:
                raise  # raised where nothing was left half done
            except BaseException:
                # Not handed out: a committed entry goes (the segment, if made, then finds
                # no match for its serial), and the rest is rebuilt from the truth.
                if serial and self._live.get(start, (0, 0, 0))[2] == serial:
                    del self._live[start]
                    self._allocations -= 1
                self._rebuild(growing=True)
                raise
            self._on_allocated(self._parent_of(start), start, nbytes, extent)
        return segment

    def release_unused(self) -> int:
        """Give memory no segment uses back to the runtime; returns the bytes released."""
        with self._lock:
            if self._pending:
                self._drain()
            if self._closed:
                return 0
            try:
                return self._release_unused()
            except BaseException:
                self._rebuild(growing=False)
                raise

    def stats(self) -> PoolStats:
        """The figures now (queued finalizer returns counted first)."""
        with self._lock:
            if self._pending:
                self._drain()
            cached = self._reserved - self._in_use
            largest = self._index.max() << self._shift
            return PoolStats(
                in_use=self._in_use, requested=self._requested, cached=cached,
                reserved=self._reserved, peak_in_use=self._peak_in_use,
                peak_reserved=self._peak_reserved, segments=len(self._live),
                allocations=self._allocations, frees=self._frees,
                blocks_allocated=self._blocks_allocated, blocks_freed=self._blocks_freed,
                largest_free_extent=largest,
                fragmentation=1.0 - largest / cached if cached else 0.0,
            )

    def reset_peaks(self) -> None:
        """Set the peaks to the current figures."""
        with self._lock:
            self._peak_in_use = self._in_use
            self._peak_reserved = self._reserved

    def close(self) -> None:
        """Give every block back; live segments become freed. A second call does nothing."""
        with self._lock:
            if not self._closed:
                self._shutdown()

    def _shutdown(self) -> None:
        self._closed = True
        self._pending.clear()
        self._live.clear()
        self._in_use = self._requested = 0
        self._starts.clear()
        self._ends.clear()
        self._bins.clear()
        self._index = _SizeIndex()
        self._bounds.clear()
        self._close_memory()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        close_on_exit(self.close, exc)

    def __repr__(self) -> str:
        state_text = "closed" if self._closed else (
            f"in_use={self._in_use} reserved={self._reserved} segments={len(self._live)}")
        return (f"<{type(self).__name__} {self._api.value} align={self._align} "
                f"{state_text} device={self._device.id}>")

    # -- subclass hooks ----------------------------------------------------------------------------
    def _grow(self, footprint: int, nbytes: int) -> None:
        raise NotImplementedError

    def _release_unused(self) -> int:
        raise NotImplementedError

    def _close_memory(self) -> None:
        raise NotImplementedError

    def _spans(self, growing: bool) -> list[tuple[int, int]]:
        """The usable ``(start, end)`` of each parent, sorted, after an interrupted
        operation; also brings the subclass's own records and block counters in line."""
        raise NotImplementedError

    def _parent_of(self, start: int) -> int:
        raise NotImplementedError

    def _parent_handle(self, start: int) -> Any:
        return None

    # -- extents (call with the lock held) ---------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise FreedBufferError(f"{type(self).__name__}.allocate: the pool is closed; "
                                   f"create a new {type(self).__name__}")
        if not state.is_live(self._owner, self._token):
            # Forget everything; the parents see the stale token and skip the runtime.
            self._shutdown()
            raise FreedBufferError(
                f"{type(self).__name__}: the runtime released the pool's memory (device "
                f"{self._device.id} reset, aclFinalize, fork or fake reconfigured)")

    def _add_free(self, start: int, end: int) -> None:
        self._starts[start] = end
        self._ends[end] = start
        length = (end - start) >> self._shift
        bin_ = self._bins.get(length)
        if bin_ is None:
            self._bins[length] = {start}
            self._index.add(length)
        else:
            bin_.add(start)

    def _unbin(self, start: int, end: int) -> None:
        length = (end - start) >> self._shift
        bin_ = self._bins[length]
        bin_.discard(start)
        if not bin_:
            del self._bins[length]
            self._index.discard(length)

    def _remove_free(self, start: int) -> int:
        end = self._starts.pop(start)
        del self._ends[end]
        self._unbin(start, end)
        return end

    def _insert(self, start: int, end: int) -> None:
        """Add a free extent, merged with free neighbours in the same block."""
        # The merged extent is indexed before the neighbours leave the index: their
        # lengths are usually close to the new one, so the bitmap words they share stay
        # non-empty and neither update walks up the tree.
        left = right = None
        if start not in self._bounds:
            left = self._ends.pop(start, None)
        if end not in self._bounds:
            right = self._starts.pop(end, None)
        new_start = start if left is None else left
        new_end = end if right is None else right
        if left is not None:
            del self._starts[left]
        if right is not None:
            del self._ends[right]
        self._add_free(new_start, new_end)
        if left is not None:
            self._unbin(left, start)
        if right is not None:
            self._unbin(end, right)

    def _carve(self, need: int) -> int | None:
        """Best fit: cut ``need`` granules from the front of the smallest extent that fits."""
        length = self._index.ceiling(need)
        if length is None:
            return None
        bin_ = self._bins[length]
        start = bin_.pop()
        end = self._starts.pop(start)
        del self._ends[end]
        cut = start + (need << self._shift)
        if cut < end:
            self._add_free(cut, end)  # first, for the reason given in _insert
        if not bin_:
            del self._bins[length]
            self._index.discard(length)
        return start

    def _give_back(self, start: int, serial: int) -> None:
        with self._lock:
            if self._pending:
                self._drain()
            self._free(start, serial)

    def _drain(self) -> None:
        pending = self._pending
        while pending:
            # Freed before it leaves the queue: an interrupt in between leaves a return
            # queued twice, which the serial makes harmless, never one lost.
            self._free(*pending[0])
            pending.popleft()

    def _free(self, start: int, serial: int) -> None:
        if self._closed:
            return
        entry = self._live.get(start)
        if entry is None or entry[2] != serial:
            return
        footprint, nbytes, _ = entry
        try:
            del self._live[start]
            self._in_use -= footprint
            self._requested -= nbytes
            self._frees += 1
            self._insert(start, start + footprint)
        except BaseException:
            self._rebuild(growing=False)
            raise
        # Last: in strict mode the checker raises, and the range must be back by then.
        # Not after the runtime released the parent (reset): that memory is someone
        # else's now.
        if state.is_live(self._owner, self._token):
            self._on_freed(start)

    def _rebuild(self, growing: bool) -> None:
        """Recompute the free extents and the figures from the parents and the live
        segments, after an operation stopped half way (O(n log n), that path only)."""
        spans = self._spans(growing)
        live = self._live
        self._in_use = sum(entry[0] for entry in live.values())
        self._requested = sum(entry[1] for entry in live.values())
        self._frees = self._allocations - len(live)
        self._peak_in_use = max(self._peak_in_use, self._in_use)
        self._peak_reserved = max(self._peak_reserved, self._reserved)
        self._starts, self._ends, self._bins, self._index = {}, {}, {}, _SizeIndex()
        starts = sorted(live)
        for low, high in spans:
            cursor = low
            at = bisect.bisect_left(starts, low)
            while at < len(starts) and starts[at] < high:
                if starts[at] > cursor:
                    self._add_free(cursor, starts[at])
                cursor = starts[at] + live[starts[at]][0]
                at += 1
            if cursor < high:
                self._add_free(cursor, high)

    def _out_of_memory(self, nbytes: int, footprint: int, why: str,
                       limit: int | None) -> PoolOutOfMemoryError:
        largest = self._index.max() << self._shift
        cached = self._reserved - self._in_use
        text = (f"{type(self).__name__}: cannot allocate {nbytes} bytes (a {footprint}-byte "
                f"segment): {why}; largest free extent {largest} bytes, cached {cached} "
                f"bytes, reserved {self._reserved} bytes, "
                f"limit {'none' if limit is None else f'{limit} bytes'}")
        error = PoolOutOfMemoryError(_OOM, text)
        error.requested, error.free, error.cached = nbytes, largest, cached
        error.reserved, error.limit = self._reserved, limit
        return error


class SegmentPool(_PoolBase):
    """Segments carved from parent blocks taken with ``api`` (docs/runtime-model.md §3.14).

    ``api`` is any allocation call: aclrtMalloc (default), aclrtMallocAlign32,
    aclrtMallocCached, acldvppMalloc, hi_mpi_dvpp_malloc or aclrtMallocHost; ``policy``
    is the page policy of the aclrtMalloc family. ``block_size`` is what the runtime
    reserves for one ordinary block (its padding included, so that a 32 MiB block costs
    exactly 32 MiB of huge pages); a request too big for one gets a block of its own.
    ``limit`` caps :attr:`PoolStats.reserved`. ``mixed_media=True`` starts every
    segment on 128 bytes, Huawei's advice when media and inference buffers share
    memory. The calling thread must have the device current when the pool grows.
    """

    def __init__(self, device: Device | int, *, api: AllocApi | str = AllocApi.MALLOC,
                 block_size: int = DEFAULT_BLOCK_SIZE, limit: int | None = None,
                 mixed_media: bool = False,
                 policy: int = MallocPolicy.HUGE_FIRST) -> None:
        super().__init__(device, api, mixed_media, policy)
        self._block_size = c_uint(block_size, "SegmentPool", "block_size")
        self._limit = None if limit is None else c_uint(limit, "SegmentPool", "limit")
        # Bytes the runtime adds to a request of this api (aclrtMalloc: +32 +padding).
        self._overhead = allocation_size(self._api, self._block_size, policy,
                                         padding=self._padding) - self._block_size
        if self._block_size < self._overhead + 2 * self._align:
            raise ValueError(f"SegmentPool: block_size {block_size} is too small")
        self._blocks: dict[int, _Block] = {}
        self._block_starts: list[int] = []

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def limit(self) -> int | None:
        return self._limit

    def _allocate_parent(self, request: int) -> Buffer:
        device, api = self._device, self._api
        if api is AllocApi.MALLOC:
            return device.malloc(request, self._policy)
        if api is AllocApi.MALLOC_ALIGN32:
            return device.malloc_align32(request, self._policy)
        if api is AllocApi.MALLOC_CACHED:
            return device.malloc_cached(request, self._policy)
        if api is AllocApi.MALLOC_HOST:
            return device.malloc_host(request)
        return device.dvpp_malloc(request, api=api)

    def _target(self, footprint: int) -> int:
        """Bytes the runtime should reserve for a block that must hold ``footprint``."""
        need = footprint + self._overhead
        if need <= self._block_size:
            return self._block_size
        # A block of its own, rounded up to the pages the driver rounds to anyway.
        return align_up(need, HUGE_PAGE if need > HUGE_FIRST_THRESHOLD else NORMAL_PAGE)

    def _grow(self, footprint: int, nbytes: int) -> None:
        released = False
        slack = 0  # room for aligning an unaligned parent (never seen on either backend)
        parent: Buffer | None = None
        try:
            while True:
                request = self._target(footprint) - self._overhead + slack
                limit = self._limit
                if limit is not None and self._reserved + request > limit:
                    room = (limit - self._reserved) >> self._shift << self._shift
                    if room >= footprint + slack:
                        request = room
                    elif not released and self._release_unused():
                        released = True
                        continue
                    else:
                        raise self._out_of_memory(nbytes, footprint,
                                                  "the pool limit would be exceeded", limit)
                try:
                    parent = self._allocate_parent(request)
                except MemoryAllocationError as exc:
                    if not released and self._release_unused():
                        released = True
                        continue
                    raise self._out_of_memory(nbytes, footprint,
                                              "the runtime is out of memory", limit) from exc
                base = parent._ptr
                start = align_up(base, self._align)
                end = (base + request) >> self._shift << self._shift
                if end - start < footprint:
                    parent.free()
                    if slack:
                        raise self._out_of_memory(nbytes, footprint,
                                                  "the runtime's block is misaligned", limit)
                    slack = self._align
                    continue
                self._add_block(parent, start, end)
                return
        except BaseException:
            # A parent the pool did not record would only go back when collected.
            if parent is not None and all(block.parent is not parent
                                          for block in self._blocks.values()):
                with contextlib.suppress(Exception):
                    parent.free()
            raise

    def _add_block(self, parent: Buffer, start: int, end: int) -> None:
        count = self._blocks_allocated + 1
        # The commit, with its counter in the same statement; the rest derives from it.
        self._blocks[start], self._blocks_allocated = _Block(parent, start, end), count
        bisect.insort(self._block_starts, start)
        self._bounds.add(start)
        self._reserved += end - start
        if self._reserved > self._peak_reserved:
            self._peak_reserved = self._reserved
        self._insert(start, end)

    def _release_unused(self) -> int:
        released = 0
        for start, block in list(self._blocks.items()):
            if self._starts.get(start) != block.end:
                continue
            try:
                block.parent.free()
            except BufferError:  # a host block under a live view: keep it
                continue
            # A freed parent is dropped by _rebuild too, should an interrupt come first.
            self._remove_free(start)
            del self._blocks[start]
            self._block_starts.remove(start)
            self._bounds.discard(start)
            self._reserved -= block.end - start
            self._blocks_freed += 1
            released += block.end - start
        return released

    def _spans(self, growing: bool) -> list[tuple[int, int]]:
        blocks = self._blocks
        for start in [start for start, block in blocks.items() if block.parent.freed]:
            del blocks[start]
        self._block_starts = sorted(blocks)
        self._bounds = set(blocks)
        self._reserved = sum(block.end - block.start for block in blocks.values())
        # A block and its allocation count are recorded in one statement; frees follow.
        self._blocks_freed = self._blocks_allocated - len(blocks)
        return [(start, blocks[start].end) for start in self._block_starts]

    def _close_memory(self) -> None:
        first: Exception | None = None
        for block in self._blocks.values():
            try:
                block.parent.free()
                self._blocks_freed += 1
            except BufferError:
                # Host memory still viewed: its handle frees it when the last view dies.
                pass
            except Exception as exc:
                # The parent's finalizer tries again once the pool lets go of it.
                first = first or exc
        self._reserved = 0
        self._blocks.clear()
        self._block_starts.clear()
        if first is not None:
            raise first

    def _block_of(self, start: int) -> _Block:
        block = self._blocks.get(self._block_starts[bisect.bisect_right(self._block_starts,
                                                                        start) - 1])
        if block is None:
            # The sorted starts lag the blocks after an interrupt hit _add_block or
            # _release_unused between their two updates: the blocks are the truth.
            self._block_starts = sorted(self._blocks)
            block = self._blocks[self._block_starts[bisect.bisect_right(self._block_starts,
                                                                        start) - 1]]
        return block

    def _parent_of(self, start: int) -> int:
        return self._block_of(start).parent._ptr

    def _parent_handle(self, start: int) -> Any:
        return getattr(self._block_of(start).parent, "_handle", None)


class ExpandablePool(_PoolBase):
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
        return self._max_size

    @property
    def chunk(self) -> int:
        """The mapping granularity: the pool grows and shrinks by this many bytes."""
        return self._chunk

    @property
    def address(self) -> int:
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


# -- segments --------------------------------------------------------------------------------------
class _SegmentBase(Buffer):
    """What a segment changes in a buffer: its memory goes back to its pool."""

    __slots__ = ()
    _pool: _PoolBase
    _extent: int
    _serial: int

    def free(self) -> None:
        """Give the range back to the pool now; a second call does nothing."""
        ptr = 0
        try:
            ptr, self._ptr = self._ptr, 0
            if ptr:
                self._release(ptr)
        except BaseException:
            if ptr and not self._ptr:
                # Stopped after the segment let go of its range: finish the return now
                # (a second return of the same allocation does nothing, see _free), or
                # queue it for the next pool call.
                try:
                    self._release(ptr)
                except Exception:
                    self._pool._pending.append((ptr, self._serial))
            raise

    @property
    def pool(self) -> _PoolBase:
        """The pool this segment came from."""
        return self._pool

    @property
    def allocated_size(self) -> int:
        """The §3.14 segment size: ``ALIGN_UP(size, 32) + 32`` (no +32 on Ascend950)."""
        return self._extent

    @property
    def freed(self) -> bool:
        """True once freed, once the pool is closed, or once the runtime released it."""
        return (self._pool._closed or self._ptr == 0
                or not state.is_live(self._owner, self._token))

    def _check_live(self, what: str) -> None:
        super()._check_live(what)
        if self._pool._closed:
            raise FreedBufferError(f"{type(self).__name__}.{what}: its pool was closed")

    def _release(self, ptr: int) -> None:
        self._pool._give_back(ptr, self._serial)

    def __del__(self) -> None:
        # Never take the pool's lock here: queue the address for the next pool call.
        ptr = getattr(self, "_ptr", 0)
        pool = getattr(self, "_pool", None)  # None: the constructor was interrupted
        if ptr and pool is not None and not pool._closed:
            pool._pending.append((ptr, self._serial))


class Segment(_SegmentBase, DeviceBuffer):
    """A device-memory segment of a pool: a :class:`~acl_mem.DeviceBuffer` whose ``free()``
    and finalizer return the range to the pool.

    ``ptr`` and ``size`` are the segment's; :meth:`address_range` still reports the
    runtime's parent block (the runtime knows nothing of segments).
    """

    __slots__ = ("_extent", "_pool", "_serial")

    def __init__(self, pool: _PoolBase, ptr: int, size: int, extent: int, serial: int) -> None:
        # The pool first: the finalizer needs it as soon as there is a pointer to return.
        self._pool = pool
        self._extent = extent
        self._serial = serial
        Buffer.__init__(self, ptr, size, pool._api, pool._device, pool._policy)


class _GiveBack:
    """Destructor of a host segment's memory handle: runs after the segment and its last
    view are gone, and keeps the parent block's own handle alive until then."""

    __slots__ = ("parent", "pool", "ptr", "serial")

    def __init__(self, pool: _PoolBase, ptr: int, serial: int, parent: Any) -> None:
        self.pool, self.ptr, self.serial, self.parent = pool, ptr, serial, parent

    def __call__(self, _: Any) -> None:
        if not self.pool._closed:
            self.pool._pending.append((self.ptr, self.serial))


class HostSegment(_SegmentBase, HostBuffer):
    """A page-locked host segment of an aclrtMallocHost pool: :meth:`view` and
    :meth:`numpy` work as on :class:`~acl_mem.HostBuffer`; ``free()`` refuses while views
    are alive, and the parent block stays allocated until the last view is gone."""

    __slots__ = ("_extent", "_pool", "_serial")

    def __init__(self, pool: _PoolBase, ptr: int, size: int, extent: int, serial: int) -> None:
        self._pool = pool
        self._extent = extent
        self._serial = serial
        Buffer.__init__(self, ptr, size, pool._api, pool._device)
        release = _GiveBack(pool, ptr, serial, pool._parent_handle(ptr))
        self._handle = ffi.gc(ffi.cast("char *", ptr), release)

    def __del__(self) -> None:
        # The handle's destructor gives the memory back once every view is gone too.
        return None

    def _release(self, ptr: int) -> None:
        views = sys.getrefcount(self._handle) - 2
        if views > 0:
            self._ptr = ptr
            raise BufferError(
                f"HostSegment.free: {views} view(s) of this memory are still alive; "
                "delete them (or call memoryview.release()) before freeing")
        ffi.gc(self._handle, None)
        self._pool._give_back(ptr, self._serial)
