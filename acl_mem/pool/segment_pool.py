"""SegmentPool: segments carved from big blocks of any allocation call."""

from __future__ import annotations

import bisect
import contextlib
from typing import Any, Literal, overload

from .._args import c_uint
from ..buffers import Buffer
from ..device import Device
from ..enums import MallocPolicy
from ..errors import MemoryAllocationError
from ..sizes import (
    HUGE_FIRST_THRESHOLD,
    HUGE_PAGE,
    NORMAL_PAGE,
    AllocApi,
    align_up,
    allocation_size,
)
from ._base import SegmentT, _PoolBase
from ._index import _Block
from .segments import HostSegment, Segment
from .stats import DEFAULT_BLOCK_SIZE

#: The ``api`` values of device memory and of page-locked host memory, for the overloads.
_DeviceApi = Literal[AllocApi.MALLOC, AllocApi.MALLOC_ALIGN32, AllocApi.MALLOC_CACHED,
                     AllocApi.DVPP_MALLOC, AllocApi.HI_MPI_DVPP_MALLOC, "aclrtMalloc",
                     "aclrtMallocAlign32", "aclrtMallocCached", "acldvppMalloc",
                     "hi_mpi_dvpp_malloc"]
_HostApi = Literal[AllocApi.MALLOC_HOST, "aclrtMallocHost"]


class SegmentPool(_PoolBase[SegmentT]):
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

    # The pool's type follows ``api``: SegmentPool[Segment] (DeviceBuffer segments) for
    # device memory, SegmentPool[HostSegment] for aclrtMallocHost; an api only known at
    # run time gives the union.
    @overload
    def __init__(self: SegmentPool[Segment], device: Device | int, *,
                 api: _DeviceApi = ..., block_size: int = ..., limit: int | None = ...,
                 mixed_media: bool = ..., policy: int = ...) -> None: ...
    @overload
    def __init__(self: SegmentPool[HostSegment], device: Device | int, *, api: _HostApi,
                 block_size: int = ..., limit: int | None = ..., mixed_media: bool = ...,
                 policy: int = ...) -> None: ...
    @overload
    def __init__(self: SegmentPool[Segment | HostSegment], device: Device | int, *,
                 api: AllocApi | str, block_size: int = ..., limit: int | None = ...,
                 mixed_media: bool = ..., policy: int = ...) -> None: ...
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
        """Bytes asked of the runtime for each parent block (larger requests get their own)."""
        return self._block_size

    @property
    def limit(self) -> int | None:
        """Most bytes of parent blocks the pool may hold (None: no limit of its own)."""
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
