"""Pools that follow the secondary-allocation rules (docs/runtime-model.md §3.14).

Segment sizes ``ALIGN_UP(len, 32) + 32``, starts on 64 bytes for the aclrtMalloc family
and aclrtMallocHost, 128 for DVPP memory or with ``mixed_media``; best fit, coalescing,
limits, statistics, segments used as buffers, a Hypothesis state machine and threads.
Expected numbers are written out by hand from the runtime model's formulas, for a SoC
that pads aclrtMalloc and for one that does not: the padding comes from the SoC name and
the CANN release (Ascend950 from 9.1.0 pads nothing, so its segments have no +32,
docs/runtime-model.md §3.5, §3.14). §3.14 names only "the aclrtMalloc rule" for Ascend950;
aclrtMallocHost pools are expected to drop the +32 there too, as acl_mem.pool documents
(and as this file's state machine always assumed). DVPP parent kinds skip on a SoC without
DVPP memory (Ascend950, §3.8).
"""

from __future__ import annotations

import gc
import itertools
import random
import threading

import pytest
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import acl_mem
from acl_mem import AllocApi, FreedBufferError, MemAttr, MemoryAllocationError, raw
from acl_mem.pool import ExpandablePool, HostSegment, PoolOutOfMemoryError, Segment, SegmentPool

from .helpers import (
    THREAD_TIMEOUT,
    address_range,
    free_pools,
    has_dvpp_memory,
    need_dvpp_api,
    padding,
)

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

DEVICE_FAMILY = [AllocApi.MALLOC, AllocApi.MALLOC_ALIGN32, AllocApi.MALLOC_CACHED]
DVPP = [AllocApi.DVPP_MALLOC, AllocApi.HI_MPI_DVPP_MALLOC]
ALL_KINDS = [*DEVICE_FAMILY, *DVPP, AllocApi.MALLOC_HOST]
#: Start alignment of docs/runtime-model.md §3.14's table, by parent kind.
TABLE_ALIGNMENT = {AllocApi.MALLOC: 64, AllocApi.MALLOC_ALIGN32: 64,
                   AllocApi.MALLOC_CACHED: 64, AllocApi.DVPP_MALLOC: 128,
                   AllocApi.HI_MPI_DVPP_MALLOC: 128, AllocApi.MALLOC_HOST: 64}
#: len -> m = ALIGN_UP(len, 32) + 32 (docs/runtime-model.md §3.14), written out.
SEGMENT_SIZE = {1: 64, 31: 64, 32: 64, 33: 96, 100: 160, 1000: 1056, 4096: 4128}
#: len -> m = ALIGN_UP(len, 32) where aclrtMalloc pads nothing (Ascend950 from 9.1.0, §3.14).
SEGMENT_SIZE_UNPADDED = {1: 32, 31: 32, 32: 32, 33: 64, 100: 128, 1000: 1024, 4096: 4096}
#: Segments of 1, 100, 1000 and 33 bytes: (padded?, start alignment) -> offsets from the first
#: (ALIGN_UP(m, A) apart) and their m, written out (docs/runtime-model.md §3.14).
OFFSETS = {(True, 64): [0, 64, 256, 1344], (True, 128): [0, 128, 384, 1536],
           (False, 64): [0, 64, 192, 1216], (False, 128): [0, 128, 256, 1280]}
SIZES = {True: [64, 160, 1056, 96], False: [32, 128, 1024, 64]}


def padded() -> bool:
    """Whether aclrtMalloc pads here: on every SoC before CANN 9.1.0, from 9.1.0 on every SoC
    but Ascend950 / 350 (docs/runtime-model.md §3.5)."""
    return padding() != 0


def usable(block: int) -> int:
    """Bytes a SegmentPool block of ``block`` bytes serves: the pool asks aclrtMalloc for
    ``block - pad`` bytes, so that the runtime reserves exactly ``block`` (ALIGN_UP(n + pad, 32),
    docs/runtime-model.md §3.5), and uses them from a 64-byte boundary to the last one."""
    return (block - padding()) // 64 * 64


def rule_size(length: int) -> int:
    """docs/runtime-model.md §3.14 by hand: ALIGN_UP(len, 32) + 32 (+0 on SoCs without padding)."""
    return ((length - 1) // 32 + 1) * 32 + (32 if padded() else 0)


def spaced(length: int, alignment: int) -> int:
    """The spacing of the §3.14 table: ALIGN_UP(m, alignment)."""
    m = rule_size(length)
    return ((m - 1) // alignment + 1) * alignment


# -- the §3.14 rules for every parent kind ---------------------------------------------------------


@pytest.mark.parametrize("api", ALL_KINDS, ids=lambda a: a.value)
def test_spec_3_14_segment_size_and_alignment_for_every_parent_kind(dev, api):
    """docs/runtime-model.md §3.14: m = ALIGN_UP(len,32)+32; starts on 64 B (aclrtMalloc family,
    host) or 128 B (acldvppMalloc, hi_mpi_dvpp_malloc), consecutive segments ALIGN_UP(m, A)
    apart; without the SoC's padding (Ascend950 from 9.1.0) m = ALIGN_UP(len, 32)."""
    if api in DVPP:
        need_dvpp_api(api)
    alignment = TABLE_ALIGNMENT[api]
    with SegmentPool(dev, api=api, block_size=1 * MiB) as pool:
        assert pool.alignment == alignment
        segments = [pool.allocate(n) for n in (1, 100, 1000, 33)]
        base = segments[0].ptr
        assert base % alignment == 0
        assert [s.ptr - base for s in segments] == OFFSETS[padded(), alignment]
        table = SEGMENT_SIZE if padded() else SEGMENT_SIZE_UNPADDED
        for length, size in table.items():
            seg = pool.allocate(length)
            assert seg.allocated_size == size
            assert seg.size == length
            assert seg.ptr % alignment == 0
        kind = HostSegment if api is AllocApi.MALLOC_HOST else Segment
        assert all(type(s) is kind for s in segments)
        assert isinstance(segments[0], acl_mem.HostBuffer if kind is HostSegment
                          else acl_mem.DeviceBuffer)


@pytest.mark.parametrize("api", [AllocApi.MALLOC, AllocApi.MALLOC_ALIGN32,
                                 AllocApi.MALLOC_CACHED, AllocApi.MALLOC_HOST],
                         ids=lambda a: a.value)
def test_spec_3_14_mixed_media_aligns_every_kind_to_128(dev, api):
    """docs/runtime-model.md §3.14 advice: media and inference buffers in one pool -> 128 B
    starts."""
    with SegmentPool(dev, api=api, block_size=1 * MiB, mixed_media=True) as pool:
        assert pool.alignment == 128
        segments = [pool.allocate(n) for n in (1, 100, 1000, 33)]
        base = segments[0].ptr
        assert base % 128 == 0
        assert [s.ptr - base for s in segments] == OFFSETS[padded(), 128]
        assert [s.allocated_size for s in segments] == SIZES[padded()]


def test_spec_3_14_expandable_pool_follows_the_rules(dev):
    """docs/runtime-model.md §3.14 in a virtual range: aclrtMalloc rules (no +32 where the SoC
    pads nothing), 128 B with mixed_media."""
    with ExpandablePool(dev, 16 * MiB) as pool:
        segments = [pool.allocate(n) for n in (1, 100, 1000, 33)]
        assert [s.ptr - pool.address for s in segments] == OFFSETS[padded(), 64]
        assert [s.allocated_size for s in segments] == SIZES[padded()]
    with ExpandablePool(dev, 16 * MiB, mixed_media=True) as pool:
        segments = [pool.allocate(n) for n in (1, 100, 1000, 33)]
        assert [s.ptr - pool.address for s in segments] == OFFSETS[padded(), 128]


@pytest.mark.cann("9.1.0")
@pytest.mark.fake_only("only the fake can switch to the Ascend950 profile")
def test_spec_3_14_no_extra_32_bytes_on_ascend950(fake):
    """docs/runtime-model.md §3.14: on 950 (CANN 9.1.0) the aclrtMalloc rule has no +32
    (m = ALIGN_UP(len, 32))."""
    acl_mem.fake.configure("ascend950")
    with acl_mem.Device(0) as dev, SegmentPool(dev, block_size=1 * MiB) as pool:
        segments = [pool.allocate(n) for n in (1, 33, 100, 1000)]
        assert [s.allocated_size for s in segments] == [32, 64, 128, 1024]
        base = segments[0].ptr
        assert [s.ptr - base for s in segments] == [0, 64, 128, 256]


@pytest.mark.cann("8.5.0", "9.0.1")
@pytest.mark.fake_only("only the fake can switch to the Ascend950 profile")
def test_spec_3_14_ascend950_keeps_the_extra_32_bytes_before_9_1(fake):
    """docs/runtime-model.md §3.14 with §3.5 Releases: before 9.1.0 Ascend950 pads a fixed 32
    bytes like every SoC, so its segments keep the +32 (m = ALIGN_UP(len, 32) + 32), in a
    SegmentPool and an ExpandablePool alike."""
    acl_mem.fake.configure("ascend950")
    with acl_mem.Device(0) as dev:
        with SegmentPool(dev, block_size=1 * MiB) as pool:
            segments = [pool.allocate(n) for n in (1, 33, 100, 1000)]
            assert [s.allocated_size for s in segments] == [64, 96, 160, 1056]
            base = segments[0].ptr
            assert [s.ptr - base for s in segments] == [0, 64, 192, 384]
        with ExpandablePool(dev, 16 * MiB) as expandable:
            parts = [expandable.allocate(n) for n in (1, 100, 1000, 33)]
            assert [s.ptr - expandable.address for s in parts] == [0, 64, 256, 1344]
            assert [s.allocated_size for s in parts] == [64, 160, 1056, 96]


# -- placement -------------------------------------------------------------------------------------


def test_spec_3_14_segments_never_overlap_and_stay_inside_their_block(dev, cann):
    """docs/runtime-model.md §3.14: no two segments share a byte; each lies inside one runtime
    block (seen through aclrtMemGetAddressRange, from CANN 9.0.1), also when blocks are back to
    back and requests exceed the block size."""
    rng = random.Random(7)
    with SegmentPool(dev, api=AllocApi.MALLOC_ALIGN32, block_size=64 * KiB) as pool:
        segments = [pool.allocate(rng.choice([1, 100, 3000, 20 * KiB, 100 * KiB]))
                    for _ in range(60)]
        for seg in segments[::3]:
            seg.free()
        segments = [s for s in segments if not s.freed]
        segments += [pool.allocate(rng.choice([64, 5000, 70 * KiB])) for _ in range(20)]
        spans = sorted((s.ptr, s.ptr + s.allocated_size) for s in segments)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start
        for seg in segments:
            block = address_range(seg.ptr, cann)
            if block is not None:
                base, size = block
                assert base <= seg.ptr and seg.ptr + seg.allocated_size <= base + size


def test_spec_3_14_a_request_larger_than_the_block_size_gets_its_own_block(dev, cann):
    """docs/runtime-model.md §3.14: a 3 MiB request in a pool of 1 MiB blocks starts its own
    block (its start is the block's, where aclrtMemGetAddressRange exists: 9.0.1 on)."""
    with SegmentPool(dev, block_size=1 * MiB) as pool:
        big = pool.allocate(3 * MiB)
        block = address_range(big.ptr, cann)
        assert block is None or block[0] == big.ptr
        stats = pool.stats()
        assert stats.blocks_allocated == 1
        assert stats.reserved >= 3 * MiB + 32


def test_best_fit_picks_the_smallest_extent_that_fits(dev):
    """Best fit: of three holes (1088, 3072, 2048 bytes) and the block's tail, each request
    lands in the smallest that holds it."""
    with SegmentPool(dev, block_size=1 * MiB) as pool:
        a = pool.allocate(1000)   # 1088 bytes apart (m = 1056)
        keep = [pool.allocate(1)]
        c = pool.allocate(3000)   # m = 3040 -> 3072
        keep.append(pool.allocate(1))
        e = pool.allocate(2000)   # m = 2048
        keep.append(pool.allocate(1))
        holes = {"a": a.ptr, "c": c.ptr, "e": e.ptr}
        for seg in (a, c, e):
            seg.free()
        keep += [pool.allocate(900), pool.allocate(1500), pool.allocate(2500)]
        # m = 960 fits a, c, e and the tail; 1536 fits c, e, tail; 2560 fits c, tail.
        assert [s.ptr for s in keep[3:]] == [holes["a"], holes["e"], holes["c"]]
        # Left: 128 after a, 512 after e, 512 after c, the tail. 100 (192) takes a 512.
        assert pool.allocate(100).ptr in (holes["e"] + 1536, holes["c"] + 2560)


def test_coalescing_three_free_neighbours_become_one_extent(dev):
    """Coalescing: three freed neighbours of 1088 bytes (1024 without the SoC's padding) serve
    a 3000-byte request (3072 bytes; 3008)."""
    apart = 1088 if padded() else 1024
    with SegmentPool(dev, block_size=1 * MiB) as pool:
        x, y, z = (pool.allocate(1000) for _ in range(3))
        fence = pool.allocate(1)
        assert (y.ptr - x.ptr, z.ptr - y.ptr, fence.ptr - z.ptr) == (apart, apart, apart)
        first = x.ptr
        x.free()
        z.free()
        tail = fence.ptr + 64
        probe = pool.allocate(2000)  # 2048: neither hole fits, the tail does
        assert probe.ptr == tail
        probe.free()
        y.free()  # x, y, z merge into 3 * apart bytes
        merged = pool.allocate(3000)
        assert merged.ptr == first
        merged.free()
        fence.free()
        stats = pool.stats()
        assert stats.largest_free_extent == stats.cached == stats.reserved
        assert stats.fragmentation == 0.0


# -- limits, out of memory, release ----------------------------------------------------------------


def test_limit_raises_pool_out_of_memory_with_code_207001(dev):
    """Limit: two 40 KiB segments take two 64 KiB blocks; a third would pass the limit."""
    with SegmentPool(dev, block_size=64 * KiB, limit=128 * KiB) as pool:
        first, second = pool.allocate(40 * KiB), pool.allocate(40 * KiB)
        with pytest.raises(PoolOutOfMemoryError) as e:
            pool.allocate(40 * KiB)
        assert e.value.code == 207001
        assert isinstance(e.value, MemoryAllocationError)
        # Blocks: 65472 usable bytes each with padding 32, 65536 without (usable()).
        # Segments: 40960 + 32 -> 41024 bytes apart; 40960 without the padding.
        block = 65472 if padded() else 65536
        assert block == usable(64 * KiB)
        apart = 41024 if padded() else 40960
        assert e.value.requested == 40 * KiB
        assert e.value.reserved == 2 * block
        assert e.value.cached == 2 * block - 2 * apart
        assert e.value.free == block - apart
        assert e.value.limit == 128 * KiB
        with pytest.raises(PoolOutOfMemoryError) as big:
            pool.allocate(200 * KiB)  # larger than the whole limit
        assert big.value.code == 207001
        # The pool keeps working, and frees unused blocks to make room when it must.
        small = pool.allocate(100)
        small.free()
        first.free()
        second.free()
        whole = pool.allocate(100 * KiB)
        stats = pool.stats()
        assert stats.blocks_freed == 2 and stats.reserved <= 128 * KiB
        whole.free()


def test_runtime_out_of_memory_becomes_pool_out_of_memory_chained(dev):
    """docs/runtime-model.md §1.1: aclrtMalloc out of memory (207001) -> PoolOutOfMemoryError,
    original chained; the pool is unchanged."""
    with SegmentPool(dev, block_size=1 * MiB) as pool:
        with pytest.raises(PoolOutOfMemoryError) as e:
            pool.allocate(200 * GiB)
        assert e.value.code == 207001
        assert isinstance(e.value.__cause__, MemoryAllocationError)
        assert e.value.__cause__.code == 207001
        assert e.value.requested == 200 * GiB
        assert pool.stats().reserved == 0


def test_pool_oom_error_does_not_replace_the_runtime_error_class(dev):
    """docs/runtime-model.md §1.1: the runtime's own 207001 stays MemoryAllocationError."""
    with pytest.raises(MemoryAllocationError) as e:
        raw.aclrtMalloc(200 * GiB, 0)
    assert type(e.value) is MemoryAllocationError
    assert e.value.code == 207001


def test_release_unused_gives_free_blocks_back_to_the_device(dev):
    """docs/runtime-model.md §3.12: mem_info shows the blocks taken (4 MiB of huge pages each,
    padding included) and given back by release_unused and close."""
    before = dev.mem_info(MemAttr.HBM_MEM).free
    pool = SegmentPool(dev, block_size=4 * MiB)
    segments = [pool.allocate(3 * MiB) for _ in range(3)]  # one per block
    assert dev.mem_info(MemAttr.HBM_MEM).free == before - 12 * MiB
    assert pool.release_unused() == 0
    segments[0].free()
    segments[2].free()
    # Usable bytes per block: 4 MiB - 64 with padding 32, 4 MiB without (usable()).
    block = 4 * MiB - 64 if padded() else 4 * MiB
    assert block == usable(4 * MiB)
    assert pool.release_unused() == 2 * block
    assert dev.mem_info(MemAttr.HBM_MEM).free == before - 4 * MiB
    stats = pool.stats()
    assert (stats.reserved, stats.blocks_allocated, stats.blocks_freed) == (block, 3, 2)
    pool.close()
    assert dev.mem_info(MemAttr.HBM_MEM).free == before
    assert segments[1].freed


def test_expandable_pool_grows_and_shrinks_by_granularity_chunks(dev):
    """docs/runtime-model.md §4.5: the range grows by 2 MiB chunks (HBM huge granularity) and
    release_unused unmaps the free chunks at its end. With padding 32 the segments take 1 MiB +
    64 and 3 MiB + 64 bytes (three chunks); without the SoC's padding exactly 1 MiB and 3 MiB
    (two chunks)."""
    before = dev.mem_info(MemAttr.HBM_MEM_HUGE).free
    pool = ExpandablePool(dev, 64 * MiB)
    assert pool.chunk == 2 * MiB
    extra, chunks = (64, 3) if padded() else (0, 2)
    a = pool.allocate(1 * MiB)      # 1 MiB (+ 64) -> one chunk
    assert pool.mapped == 2 * MiB
    b = pool.allocate(3 * MiB)      # ends at 4 MiB (+ 128) -> 6 MiB mapped (4 MiB)
    assert pool.mapped == chunks * 2 * MiB
    assert b.ptr == a.ptr + 1 * MiB + extra  # contiguous across the chunk boundary
    assert dev.mem_info(MemAttr.HBM_MEM_HUGE).free == before - chunks * 2 * MiB
    data = bytes(range(256)) * (3 * MiB // 256)
    b.copy_from(data)
    assert b.read() == data
    b.free()
    assert pool.release_unused() == (chunks - 1) * 2 * MiB
    assert pool.mapped == 2 * MiB
    assert dev.mem_info(MemAttr.HBM_MEM_HUGE).free == before - 2 * MiB
    stats = pool.stats()
    assert stats.reserved == 2 * MiB
    assert (stats.blocks_allocated, stats.blocks_freed) == (chunks, chunks - 1)
    assert stats.in_use + stats.cached == stats.reserved
    with pytest.raises(PoolOutOfMemoryError) as e:
        pool.allocate(64 * MiB)
    assert e.value.code == 207001
    pool.close()
    assert a.freed
    assert dev.mem_info(MemAttr.HBM_MEM_HUGE).free == before


# -- statistics ------------------------------------------------------------------------------------


def test_stats_are_consistent_and_kept_apart(dev):
    """Statistics: in use (segment sizes at 64 B spacing), requested, cached, reserved,
    peaks, counts, largest free extent and fragmentation, all hand-computed (with padding 32
    and without)."""
    with SegmentPool(dev, block_size=1 * MiB) as pool:
        # 1 MiB - 64 usable bytes with padding 32, the whole MiB without (usable()).
        reserved = 1 * MiB - 64 if padded() else 1 * MiB
        assert reserved == usable(1 * MiB)
        # 100, 1000 and 33 bytes take 192 + 1088 + 128 bytes (128 + 1024 + 64 unpadded).
        sa, sb, sc = (192, 1088, 128) if padded() else (128, 1024, 64)
        a, b, c = pool.allocate(100), pool.allocate(1000), pool.allocate(33)
        stats = pool.stats()
        total = sa + sb + sc
        assert stats.in_use == total
        assert stats.requested == 1133
        assert stats.reserved == reserved
        assert stats.cached == reserved - total
        assert stats.largest_free_extent == reserved - total
        assert stats.fragmentation == 0.0
        assert (stats.segments, stats.allocations, stats.frees) == (3, 3, 0)
        assert (stats.blocks_allocated, stats.blocks_freed) == (1, 0)
        b.free()
        stats = pool.stats()
        assert stats.in_use == sa + sc
        assert stats.requested == 133
        assert stats.cached == reserved - sa - sc
        assert stats.largest_free_extent == reserved - total
        assert stats.fragmentation == pytest.approx(1 - (reserved - total) / (reserved - sa - sc))
        assert stats.peak_in_use == total and stats.peak_reserved == reserved
        assert (stats.segments, stats.allocations, stats.frees) == (2, 3, 1)
        a.free()
        c.free()
        pool.reset_peaks()
        assert pool.stats().peak_in_use == 0


# -- segments as buffers ---------------------------------------------------------------------------


def test_segments_work_in_copies_memset_and_async_calls(dev):
    """docs/runtime-model.md §3.6, §3.10, §3.11: segments are buffers: copies, memset and async
    variants on a stream touch only the segment, never its neighbours."""
    with SegmentPool(dev, block_size=1 * MiB) as pool, dev.stream() as stream:
        left, mid, right = (pool.allocate(100) for _ in range(3))
        left.memset(0x11)
        right.memset(0x33)
        mid.copy_from(b"m" * 100)
        assert mid.read() == b"m" * 100
        mid.memset(0x5A, 10, offset=5)
        assert mid.read(20) == b"m" * 5 + b"\x5a" * 10 + b"m" * 5
        other = pool.allocate(100)
        other.copy_from(mid)  # device to device
        assert other.read() == mid.read()
        pinned = dev.malloc_host(100)
        pinned.view()[:] = b"p" * 100
        mid.copy_from_async(pinned, stream=stream)
        stream.synchronize()
        assert mid.read() == b"p" * 100
        mid.memset_async(0x7E, stream=stream)
        mid.copy_to_async(pinned, stream=stream)
        stream.synchronize()
        assert bytes(pinned.view()) == b"\x7e" * 100
        out = bytearray(100)
        mid.copy_to(out)
        assert out == b"\x7e" * 100
        with pytest.raises(ValueError):
            mid.copy_from(b"x" * 101)  # bounds are the requested size
        assert left.read() == b"\x11" * 100 and right.read() == b"\x33" * 100
        pinned.free()


def test_host_segments_are_host_buffers(dev):
    """docs/runtime-model.md §3.7: segments of an aclrtMallocHost pool are viewable without copying;
    free refuses under a live view; they copy to and from device segments."""
    with SegmentPool(dev, api="aclrtMallocHost", block_size=64 * KiB) as host, \
            SegmentPool(dev, block_size=64 * KiB) as device:
        seg = host.allocate(64)
        assert isinstance(seg, acl_mem.HostBuffer)
        view = seg.view()
        view[:] = b"h" * 64
        with pytest.raises(BufferError):
            seg.free()
        assert not seg.freed
        target = device.allocate(64)
        target.copy_from(seg)
        assert target.read() == b"h" * 64
        target.memset(0x2B)
        seg.copy_from(target)
        assert bytes(view) == b"+" * 64
        del view
        seg.free()
        assert host.stats().in_use == 0


def test_freed_segment_raises_freed_buffer_error(dev):
    """A freed segment, or one of a closed pool, raises FreedBufferError; free() twice is
    fine."""
    pool = SegmentPool(dev, block_size=64 * KiB)
    seg = pool.allocate(100)
    seg.free()
    seg.free()
    assert seg.freed
    for use in (lambda: seg.ptr, lambda: seg.read(), lambda: seg.copy_from(b"x"),
                lambda: seg.memset(0), lambda: pool.allocate(8).copy_from(seg)):
        with pytest.raises(FreedBufferError):
            use()
    live = pool.allocate(100)
    pool.close()
    pool.close()
    assert live.freed
    # The block is gone: a new allocation may have its address, and nothing may reach it
    # through the segment, whichever copy path the call takes.
    other = dev.malloc(64 * KiB)
    other.memset(7)
    target = bytearray(100)
    for use in (lambda: live.ptr, lambda: live.read(), lambda: live.memset(0),
                lambda: live.copy_from(b"x" * 100), lambda: live.copy_from(memoryview(b"x")),
                lambda: live.copy_from(b"x", 1, offset=1), lambda: live.copy_to(target),
                lambda: live.copy_from_async(b"x" * 100), lambda: live.copy_from(other, 100),
                lambda: other.copy_from(live)):
        with pytest.raises(FreedBufferError):
            use()
    assert other.read() == b"\x07" * (64 * KiB) and target == bytearray(100)
    other.free()
    live.free()
    with pytest.raises(ValueError):
        pool.allocate(1)


def test_finalizer_returns_a_forgotten_segment(dev):
    """A segment dropped without free() goes back to the pool, not to the runtime."""
    with SegmentPool(dev, block_size=64 * KiB) as pool:
        seg = pool.allocate(100)
        address = seg.ptr
        del seg
        gc.collect()
        stats = pool.stats()
        assert (stats.in_use, stats.frees, stats.blocks_freed) == (0, 1, 0)
        assert pool.allocate(100).ptr == address


def test_a_forgotten_host_segment_waits_for_its_last_view(dev):
    """docs/runtime-model.md §3.7: host memory under a live view is never reused."""
    with SegmentPool(dev, api="aclrtMallocHost", block_size=64 * KiB) as pool:
        seg = pool.allocate(100)
        assert isinstance(seg, acl_mem.HostSegment)
        view = seg.view()
        del seg
        gc.collect()
        assert pool.stats().in_use == (192 if padded() else 128)  # spaced(100, 64)
        view[0] = 1  # still valid memory
        del view
        gc.collect()
        assert pool.stats().in_use == 0


def test_bad_arguments(dev):
    """Sizes are C size_t values > 0; the API must be one of the six allocation calls."""
    with SegmentPool(dev, block_size=64 * KiB) as pool:
        for bad in (0, -1, 2**64):
            with pytest.raises(ValueError):
                pool.allocate(bad)
        for wrong in (1.5, True, None, "8"):
            with pytest.raises(TypeError):
                pool.allocate(wrong)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SegmentPool(dev, api="aclrtFree")
    with pytest.raises(ValueError):
        ExpandablePool(dev, 4 * MiB, api=AllocApi.MALLOC_HOST)


@pytest.mark.fake_only("the segment checker hooks are the fake's")
def test_pool_tells_the_checker_about_segments(fake, dev, cann, monkeypatch):
    """docs/runtime-model.md §3.14: pools report each segment (parent, start, requested,
    segment size) and its return, so the checker can watch segments."""
    carved: list[tuple[int, int, int, int]] = []
    returned: list[int] = []
    monkeypatch.setattr(fake, "checker_segment_allocated",
                        lambda *args: carved.append(args), raising=False)
    monkeypatch.setattr(fake, "checker_segment_freed", returned.append, raising=False)
    with SegmentPool(dev, block_size=64 * KiB) as pool:
        a = pool.allocate(100)
        b = pool.allocate(1000)
        # The first segment starts its block (seen through the address range from 9.0.1).
        parent = a.ptr
        block = address_range(a.ptr, cann)
        assert block is None or block[0] == parent
        sizes = (160, 1056) if padded() else (128, 1024)
        assert carved == [(parent, a.ptr, 100, sizes[0]), (parent, b.ptr, 1000, sizes[1])]
        b_ptr = b.ptr
        a.free()
        del b
        pool.stats()
        assert returned == [carved[0][1], b_ptr]


# -- Hypothesis: random programs keep every invariant ----------------------------------------------


class PoolMachine(RuleBasedStateMachine):
    """Random allocate / free / forget / release programs on one pool."""

    def __init__(self) -> None:
        super().__init__()
        self.pool: SegmentPool[Segment | HostSegment] | None = None
        self.live: list[tuple[Segment | HostSegment, int, int]] = []  # (segment, size, byte)
        self.counter = 0

    @initialize(api=st.sampled_from([AllocApi.MALLOC, AllocApi.MALLOC_ALIGN32,
                                     AllocApi.DVPP_MALLOC, AllocApi.MALLOC_HOST]),
                mixed=st.booleans(), block=st.sampled_from([16 * KiB, 64 * KiB]),
                limit=st.sampled_from([None, 256 * KiB]))
    def make_pool(self, api: AllocApi, mixed: bool, block: int, limit: int | None) -> None:
        # No DVPP parent on a SoC without DVPP memory (Ascend950, docs/runtime-model.md §3.8).
        assume(api not in DVPP or has_dvpp_memory())
        self.start = free_pools()
        self.alignment = 128 if mixed or api in DVPP else 64
        self.limit = limit
        self.device_memory = api is not AllocApi.MALLOC_HOST
        self.pool = SegmentPool(acl_mem.Device(0), api=api, block_size=block, limit=limit,
                                mixed_media=mixed)

    @rule(size=st.one_of(st.integers(1, 300), st.integers(1, 100 * KiB)))
    def allocate(self, size: int) -> None:
        assert self.pool is not None
        try:
            seg = self.pool.allocate(size)
        except PoolOutOfMemoryError as e:
            assert self.limit is not None and e.code == 207001
            return
        assert seg.allocated_size == rule_size(size)
        assert seg.ptr % self.alignment == 0
        self.counter += 1
        byte = self.counter % 251 + 1
        seg.memset(byte)
        self.live.append((seg, size, byte))

    @precondition(lambda self: self.live)
    @rule(pick=st.integers(0, 10**6))
    def free(self, pick: int) -> None:
        seg, _, _ = self.live.pop(pick % len(self.live))
        seg.free()

    @precondition(lambda self: self.live)
    @rule(pick=st.integers(0, 10**6))
    def forget(self, pick: int) -> None:
        seg = self.live.pop(pick % len(self.live))[0]
        del seg  # the finalizer gives it back

    @rule()
    def release_unused(self) -> None:
        assert self.pool is not None
        before = self.pool.stats().reserved
        released = self.pool.release_unused()
        assert self.pool.stats().reserved == before - released

    @precondition(lambda self: self.live)
    @rule()
    def contents_survive(self) -> None:
        for seg, size, byte in self.live:
            assert seg.read(1) == bytes([byte])
            assert seg.read(1, size - 1) == bytes([byte])

    @invariant()
    def no_overlap_and_spacing(self) -> None:
        spans = sorted((s.ptr, s.ptr + s.allocated_size) for s, _, _ in self.live)
        for (_, end), (start, _) in itertools.pairwise(spans):
            # The next segment starts no earlier than ALIGN_UP(end, A) (docs/runtime-model.md
            # §3.14).
            assert start >= -(-end // self.alignment) * self.alignment

    @invariant()
    def stats_consistent(self) -> None:
        if self.pool is None:
            return
        s = self.pool.stats()
        assert s.in_use == sum(spaced(size, self.alignment) for _, size, _ in self.live)
        assert s.requested == sum(size for _, size, _ in self.live)
        assert s.segments == len(self.live) == s.allocations - s.frees
        assert s.in_use + s.cached == s.reserved
        assert 0 <= s.largest_free_extent <= s.cached
        assert 0.0 <= s.fragmentation < 1.0
        assert s.peak_in_use >= s.in_use and s.peak_reserved >= s.reserved
        if self.limit is not None:
            assert s.reserved <= self.limit

    def teardown(self) -> None:
        if self.pool is None:
            return
        for seg, _, _ in self.live:
            seg.free()
        self.live.clear()
        s = self.pool.stats()
        assert (s.in_use, s.requested, s.segments) == (0, 0, 0)
        assert self.pool.release_unused() == s.reserved
        s = self.pool.stats()
        assert (s.reserved, s.cached) == (0, 0)
        assert s.blocks_allocated == s.blocks_freed
        self.pool.close()
        if self.device_memory:
            assert free_pools() == self.start


def test_pool_state_machine(dev):
    """docs/runtime-model.md §3.14: random programs keep segments apart and aligned, the statistics
    consistent, and give every byte back after release_unused and close."""
    run_state_machine_as_test(
        PoolMachine,
        settings=settings(max_examples=60, stateful_step_count=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large]),
    )


# -- threads ---------------------------------------------------------------------------------------

THREADS, OPERATIONS = 8, 2000  # benchmarks/pool_bench.py runs 8 x 20 000


def test_thread_stress_keeps_statistics_consistent(dev):
    """One lock: 8 threads allocating and freeing at once never share a byte, and the
    final statistics add up (allocations == frees, nothing in use)."""
    pool = SegmentPool(dev, block_size=256 * KiB)
    errors: list[BaseException] = []
    allocated = [0] * THREADS
    sizes = [1, 64, 100, 1000, 4096, 30 * KiB, 300 * KiB]
    start_line = threading.Barrier(THREADS)

    def worker(k: int) -> None:
        rng = random.Random(k)
        mark = k + 1
        try:
            with acl_mem.Device(0):
                live: list[tuple[Segment | HostSegment, bool]] = []
                start_line.wait()
                for _ in range(OPERATIONS):
                    if live and (len(live) >= 24 or rng.random() < 0.5):
                        seg, marked = live.pop(rng.randrange(len(live)))
                        if marked:
                            assert seg.read(1) == seg.read(1, seg.size - 1) == bytes([mark])
                        seg.free()
                    else:
                        seg = pool.allocate(rng.choice(sizes))
                        allocated[k] += 1
                        marked = rng.random() < 0.1
                        if marked:
                            seg.memset(mark)
                        live.append((seg, marked))
                for seg, _ in live:
                    seg.free()
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(THREAD_TIMEOUT)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    s = pool.stats()
    assert s.allocations == s.frees == sum(allocated)
    assert (s.in_use, s.requested, s.segments) == (0, 0, 0)
    assert s.cached == s.reserved
    assert pool.release_unused() == s.reserved
    pool.close()
