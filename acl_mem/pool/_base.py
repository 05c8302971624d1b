"""What every pool shares: free extents, live segments, statistics, the lock."""

from __future__ import annotations

import bisect
import itertools
import threading
from collections import deque
from types import TracebackType
from typing import Any, Generic, cast

from typing_extensions import Self, TypeVar

from .. import _backend
from .._args import c_uint
from .._context import ensure_context
from .._lifecycle import HOST, ClosableEpoch, close_on_exit, state
from .._runtime_facts import padding_of
from ..buffers import Buffer
from ..device import Device
from ..errors import FreedBufferError
from ..sizes import (
    AllocApi,
    segment_alignment,
)
from ._index import _SizeIndex
from .segments import HostSegment, Segment
from .stats import _OOM, _SIZE_LIMIT, PoolOutOfMemoryError, PoolStats

#: What ``allocate`` returns: Segment (a DeviceBuffer) for device memory, HostSegment (a
#: HostBuffer) for an aclrtMallocHost pool; the pool's type says which.
SegmentT = TypeVar("SegmentT", bound=Buffer, default=Segment)


class _PoolBase(Generic[SegmentT]):
    """Free extents, live segments, statistics and the lock; subclasses supply memory."""

    def __init__(self, device: Device | int, api: AllocApi | str, mixed_media: bool,
                 policy: int) -> None:
        self._device = device if isinstance(device, Device) else Device(device)
        self._api = AllocApi(api)
        self._policy = policy
        self._align = align = segment_alignment(self._api, mixed_media=mixed_media)
        self._shift = align.bit_length() - 1
        # The SoC's padding under the backend's CANN release (fixed 32 before 9.1.0, §3.5).
        self._padding = padding_of(_backend.get())
        #: §3.14: ALIGN_UP(len, 32) + 32; no +32 where the SoC pads nothing (Ascend950).
        self._extra = 32 if self._padding else 0
        self._host = self._api is AllocApi.MALLOC_HOST
        #: What a segment's free is called in a hazard report.
        self._free_call = f"{'HostSegment' if self._host else 'Segment'}.free()"
        self._owner = HOST if self._host else self._device.id
        self._token = state.token(self._owner)
        #: What the segments hold as their epoch: it also ends when the pool closes, so a
        #: segment of a closed pool is refused wherever a freed buffer is (its block may be
        #: another allocation's by then).
        self._segments_epoch = ClosableEpoch(self._token)
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
        # The fake's memory checker watches segments (the native backend's hooks do
        # nothing), and acl_mem.trace records them: looked up on the backend at each call,
        # so that a recording started after the pool sees them too.
        self._backend = _backend.get()

    # -- public ------------------------------------------------------------------------------------
    @property
    def device(self) -> Device:
        """The device the pool allocates on."""
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
        """True once close() gave every parent block back."""
        return self._closed

    @property
    def policy(self) -> int:
        """The allocation policy the parent blocks are allocated with."""
        return self._policy

    # -- what segments call: their release goes through these, never the pool's state ---------
    def segment_freed(self, start: int, serial: int) -> None:
        """A segment's free(): its range comes back now (takes the pool's lock). Only the
        allocation numbered ``serial`` is returned, so a repeat does nothing."""
        with self._lock:
            if self._pending:
                self._drain()
            self._free(start, serial, self._free_call)

    def segment_dropped(self, start: int, serial: int) -> None:
        """A segment collected (or a free that could not finish): queued for the next pool
        call. Never takes the lock: a collection can run inside this thread's locked
        section."""
        if not self._closed:
            self._pending.append((start, serial))

    def segment_keepalive(self, start: int) -> Any:
        """What must outlive views of the segment at ``start`` (the parent block's memory
        handle for host memory; None otherwise)."""
        return self._parent_handle(start)

    def segment_size(self, size: int) -> int:
        """The §3.14 size of a segment of ``size`` bytes in this pool."""
        return -(-size // 32) * 32 + self._extra

    def allocate(self, size: int) -> SegmentT:
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
                    ensure_context(self._device.id)
                    self._grow(footprint, nbytes)
                    carved = self._carve(need)
                    if carved is None:  # pragma: no cover - _grow guarantees room
                        raise AssertionError("pool grew but no extent fits")
                start = carved
                serial = next(self._serials)
                # Made before the commit: once committed, nothing can stop the segment
                # from reaching the caller except the return itself (then its finalizer
                # gives the range back).
                segment = cast(SegmentT, (HostSegment if self._host else Segment)(
                    self, start, nbytes, extent, serial))
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
            self._backend.checker_segment_allocated(self._parent_of(start), start, nbytes,
                                                    extent)
        return segment

    def release_unused(self) -> int:
        """Give memory no segment uses back to the runtime; returns the bytes released."""
        with self._lock:
            if self._pending:
                self._drain()
            if self._closed:
                return 0
            ensure_context(self._device.id)
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
                if self._token.live:
                    ensure_context(self._device.id)
                self._shutdown()

    def _shutdown(self) -> None:
        self._closed = True
        self._segments_epoch.live = False
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
        if not self._token.live:
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

    def _drain(self) -> None:
        pending = self._pending
        while pending:
            # Freed before it leaves the queue: an interrupt in between leaves a return
            # queued twice, which the serial makes harmless, never one lost.
            self._free(*pending[0], "a dropped segment's return to its pool")
            pending.popleft()

    def _free(self, start: int, serial: int, what: str) -> None:
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
        # Last: in strict mode these raise, and the range must be back by then. Not after
        # the runtime released the parent (reset): that memory is someone else's now.
        if self._token.live:
            try:
                # Queued stream work on the range would land in the next segment given
                # it: the race is the free's, as for aclrtFree (free-while-queued).
                self._backend.check_pending(start, footprint, access="free", what=what)
            finally:
                self._backend.checker_segment_freed(start)

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
