"""A KeyboardInterrupt at any line of the pools and the VMM helpers leaves them usable.

Each operation runs once per line it executes in acl_mem/pool/ and acl_mem/vmm.py,
interrupted at that line (tests/injection.py); after every run the pool's bookkeeping
must be whole (free extents and live segments tile the parent memory, the figures
agree, the lock is free), every segment the test holds must still work, the next
operations must work, and once everything is freed and closed the device's free memory
must be what it was: nothing leaked, nothing given back twice.

Only lines of those two files are interrupted: the fake's own calls are not what is
under test here. Points where CPython never delivers a signal (a ``try:`` line, a
``with`` block's normal exit, see ``injection.is_unsignalled``) are skipped.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import pytest
from injection import in_files, interrupted_runs, is_unsignalled, lock_is_free

import acl_mem
from acl_mem import AllocApi, MemAttr
from acl_mem.pool import ExpandablePool, SegmentPool
from acl_mem.vmm import ExpandableSegment, MappedMemory

pytestmark = [
    pytest.mark.fake_only("re-runs each operation once per line; the leak check needs the "
                          "fake's exact free memory figures (on hardware other processes "
                          "change them)"),
    # An interrupt inside a finalizer is printed and dropped by Python, as it would be
    # for a real KeyboardInterrupt; what it would leak, the memory checks catch.
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*__del__:pytest.PytestUnraisableExceptionWarning"),
]

KiB = 1 << 10
MiB = 1 << 20
_PACKAGE = os.path.dirname(os.path.abspath(acl_mem.__file__))
_FILES = in_files(*glob.glob(os.path.join(_PACKAGE, "pool", "*.py")),
                  os.path.join(_PACKAGE, "vmm.py"))


def where(frame: FrameType) -> bool:
    return _FILES(frame) and not is_unsignalled(frame)


def free_memory(dev: acl_mem.Device) -> tuple[int, int]:
    return (dev.mem_info(MemAttr.HBM_MEM_HUGE).free, dev.mem_info(MemAttr.HBM_MEM_NORMAL).free,
            dev.mem_info(MemAttr.DDR_MEM).free)


# -- pool invariants -------------------------------------------------------------------------------


def spans(pool: SegmentPool | ExpandablePool) -> list[tuple[int, int]]:
    """The parent memory the pool may carve, from its own records of the parents."""
    if isinstance(pool, ExpandablePool):
        return [(pool.address, pool.address + pool.mapped)] if pool.mapped else []
    return sorted((block.start, block.end) for block in pool._blocks.values())


def check_pool(pool: SegmentPool | ExpandablePool, held: list[Any]) -> None:
    """The bookkeeping is whole and agrees with the segments the test holds."""
    assert lock_is_free(pool._lock)
    stats = pool.stats()  # returns queued segments first
    live = {seg.ptr for seg in held if not seg.freed}
    assert set(pool._live) == live
    # The free extents and their three indexes agree.
    starts, ends = pool._starts, pool._ends
    assert {end: start for start, end in starts.items()} == ends
    binned = {start: length for length, group in pool._bins.items() for start in group}
    assert binned == {start: (end - start) >> pool._shift for start, end in starts.items()}
    assert all(pool._bins.values())
    for length in pool._bins:
        assert pool._index.ceiling(length) == length
    assert pool._index.max() == max(pool._bins, default=0)
    # Free extents and live segments tile the parents exactly, coalesced.
    pieces = sorted([(s, e, "free") for s, e in starts.items()]
                    + [(s, s + entry[0], "live") for s, entry in pool._live.items()])
    parents = spans(pool)
    tiled: list[tuple[int, int]] = []
    previous: tuple[int, int, str] | None = None
    for piece in pieces:
        start, end, kind = piece
        if tiled and tiled[-1][1] == start and start not in pool._bounds:
            tiled[-1] = (tiled[-1][0], end)
            assert not (kind == "free" and previous is not None and previous[2] == "free"), \
                "neighbouring free extents were not merged"
        else:
            tiled.append((start, end))
        previous = piece
    assert tiled == parents
    # The figures.
    assert stats.in_use == sum(entry[0] for entry in pool._live.values())
    assert stats.requested == sum(entry[1] for entry in pool._live.values())
    assert stats.cached == sum(end - start for start, end in starts.items())
    assert stats.in_use + stats.cached == stats.reserved == sum(e - s for s, e in parents)
    assert stats.segments == len(live)
    assert stats.allocations - stats.frees == stats.segments
    units = (len(parents) if isinstance(pool, SegmentPool)
             else pool.mapped // pool.chunk)
    assert stats.blocks_allocated - stats.blocks_freed == units
    assert stats.peak_in_use >= stats.in_use and stats.peak_reserved >= stats.reserved


def use_and_finish(dev: acl_mem.Device, pool: SegmentPool | ExpandablePool,
                   held: list[Any]) -> None:
    """Every held segment works, the pool still serves, then everything goes back."""
    for index, seg in enumerate(held):
        if not seg.freed:
            data = bytes([index + 1]) * seg.size
            seg.copy_from(data)
            assert seg.read() == data
    extra = pool.allocate(3000)
    extra.copy_from(b"z" * 3000)
    assert extra.read(3) == b"zzz"
    extra.free()
    for seg in held:
        seg.free()
    check_pool(pool, held)
    pool.release_unused()
    assert pool.stats().reserved == 0 or isinstance(pool, ExpandablePool)
    pool.close()


@dataclass
class Case:
    pool: SegmentPool | ExpandablePool
    held: list[Any]
    operation: Callable[[], object]
    results: list[Any] = field(default_factory=list)


def drive(dev: acl_mem.Device, build: Callable[[], Case]) -> int:
    """Interrupt ``build().operation`` at each line in turn; check after every run."""
    start = free_memory(dev)
    cases: list[Case] = []

    def setup() -> Callable[[], object]:
        case = build()
        cases.append(case)

        def operation() -> None:
            case.results.append(case.operation())

        return operation

    runs = 0
    for n in interrupted_runs(setup, where=where):
        case = cases.pop()
        held = case.held + [r for r in case.results if r is not None and hasattr(r, "free")]
        try:
            check_pool(case.pool, held)
            use_and_finish(dev, case.pool, held)
        except AssertionError as exc:
            raise AssertionError(f"after an interrupt at line {n}: {exc}") from exc
        assert free_memory(dev) == start, f"memory leaked after an interrupt at line {n}"
        runs += 1
    assert runs > 5  # the operation really ran through acl_mem/pool/ and vmm.py
    return runs


# -- SegmentPool -----------------------------------------------------------------------------------


def segment_pool(dev: acl_mem.Device, api: AllocApi = AllocApi.MALLOC,
                 limit: int | None = None) -> tuple[SegmentPool, list[Any]]:
    """A pool of 64 KiB blocks with live segments around a free hole."""
    pool = SegmentPool(dev, api=api, block_size=64 * KiB, limit=limit)
    held = [pool.allocate(size) for size in (100, 1000, 33, 5000)]
    held.pop(1).free()
    return pool, held


@pytest.mark.parametrize("size", [500, 40 * KiB, 200 * KiB], ids=["fits", "new-block", "own-block"])
def test_segment_pool_allocate(dev, size):
    def build() -> Case:
        pool, held = segment_pool(dev)
        return Case(pool, held, lambda: pool.allocate(size))

    drive(dev, build)


def test_segment_pool_allocate_host(dev):
    def build() -> Case:
        pool, held = segment_pool(dev, AllocApi.MALLOC_HOST)
        return Case(pool, held, lambda: pool.allocate(40 * KiB))

    drive(dev, build)


def test_segment_pool_allocate_at_the_limit_releases_then_grows(dev):
    """At the limit the pool gives an unused block back before taking a new one."""
    def build() -> Case:
        pool = SegmentPool(dev, block_size=64 * KiB, limit=128 * KiB)
        held = [pool.allocate(40 * KiB), pool.allocate(40 * KiB)]
        held.pop().free()  # its block is now unused
        return Case(pool, held, lambda: pool.allocate(60 * KiB))

    drive(dev, build)


def test_segment_free(dev):
    def build() -> Case:
        pool, held = segment_pool(dev)
        middle = held[1]  # between a live segment and the free hole: merges
        return Case(pool, held, middle.free)

    drive(dev, build)


def test_segment_free_host(dev):
    def build() -> Case:
        pool, held = segment_pool(dev, AllocApi.MALLOC_HOST)
        return Case(pool, held, held[0].free)

    drive(dev, build)


def test_segment_pool_release_unused(dev):
    def build() -> Case:
        pool, held = segment_pool(dev)
        spare = [pool.allocate(40 * KiB), pool.allocate(40 * KiB)]  # two more blocks
        for seg in spare:
            seg.free()
        return Case(pool, held, pool.release_unused)

    drive(dev, build)


# -- ExpandablePool --------------------------------------------------------------------------------


def expandable_pool(dev: acl_mem.Device) -> tuple[ExpandablePool, list[Any]]:
    pool = ExpandablePool(dev, 8 * MiB)
    held = [pool.allocate(size) for size in (100, 1000, 33)]
    held.pop(1).free()
    return pool, held


@pytest.mark.parametrize("size", [500, 3 * MiB], ids=["fits", "grows"])
def test_expandable_pool_allocate(dev, size):
    def build() -> Case:
        pool, held = expandable_pool(dev)
        return Case(pool, held, lambda: pool.allocate(size))

    drive(dev, build)


def test_expandable_pool_free_and_release(dev):
    def build() -> Case:
        pool, held = expandable_pool(dev)
        big = pool.allocate(3 * MiB)

        def operation() -> int:
            big.free()
            return pool.release_unused()

        return Case(pool, [*held, big], operation)

    drive(dev, build)


# -- VMM helpers -----------------------------------------------------------------------------------


def vmm_drive(dev: acl_mem.Device, build: Callable[[], tuple[Any, Callable[[], object]]],
              check: Callable[[Any], None]) -> None:
    start = free_memory(dev)
    made: list[Any] = []

    def setup() -> Callable[[], object]:
        obj, operation = build()
        made.append(obj)
        return operation

    runs = 0
    for n in interrupted_runs(setup, where=where):
        obj = made.pop()
        try:
            check(obj)
        except AssertionError as exc:
            raise AssertionError(f"after an interrupt at line {n}: {exc}") from exc
        obj.close()
        assert free_memory(dev) == start, f"memory leaked after an interrupt at line {n}"
        runs += 1
    assert runs > 5


def check_expandable(dev: acl_mem.Device, start: tuple[int, int, int],
                     sizes: list[int]) -> Callable[[ExpandableSegment], None]:
    def check(segment: ExpandableSegment) -> None:
        assert segment.size in sizes
        # A chunk an interrupted shrink began to release is finished by the next call.
        segment.shrink(segment.size)
        assert free_memory(dev)[0] == start[0] - segment.size  # exactly what is mapped
        assert segment.read(4) == b"head"
        segment.write(b"tail", segment.size - 4)
        assert segment.read(4, segment.size - 4) == b"tail"
        segment.grow(8 * MiB)
        segment.shrink(2 * MiB)
        assert segment.read(4) == b"head"

    return check


@pytest.mark.parametrize(("before", "after"), [(2 * MiB, 6 * MiB), (6 * MiB, 2 * MiB)],
                         ids=["grow", "shrink"])
def test_expandable_segment_grow_and_shrink(dev, before, after):
    start = free_memory(dev)

    def build() -> tuple[ExpandableSegment, Callable[[], object]]:
        segment = ExpandableSegment(8 * MiB)
        segment.grow(before)
        segment.write(b"head")
        operation = segment.grow if after > before else segment.shrink
        return segment, lambda: operation(after)

    # A grow is all or nothing; a shrink may stop between two chunks (each one is
    # unmapped and freed whole).
    sizes = [before, after] if after > before else list(range(after, before + 1, 2 * MiB))
    vmm_drive(dev, build, check_expandable(dev, start, sizes))


def test_mapped_memory_offload_and_restore(dev):
    start = free_memory(dev)
    payload = bytes(range(256)) * 4

    def check(memory: MappedMemory) -> None:
        if memory._saving is not None:
            memory.offload()  # an interrupted offload is continued, never undone
        used = 0 if memory.offloaded else memory.size
        assert free_memory(dev)[0] == start[0] - used
        memory.restore()
        assert memory.read(len(payload), MiB) == payload
        memory.offload()
        assert free_memory(dev)[0] == start[0]
        memory.restore()
        assert memory.read(len(payload), MiB) == payload

    def offload() -> tuple[MappedMemory, Callable[[], object]]:
        memory = MappedMemory(2 * MiB)
        memory.write(payload, MiB)
        return memory, memory.offload

    def restore() -> tuple[MappedMemory, Callable[[], object]]:
        memory, _ = offload()
        memory.offload()
        return memory, memory.restore

    vmm_drive(dev, offload, check)
    vmm_drive(dev, restore, check)


def test_reserve_and_map(dev):
    """Interrupted construction leaves nothing reserved, allocated or mapped."""
    start = free_memory(dev)
    made: list[Any] = []

    def setup() -> Callable[[], object]:
        return lambda: made.append(acl_mem.reserve_and_map(2 * MiB))

    for n in interrupted_runs(setup, where=where):
        for memory in made:
            memory.write(b"ok")
            memory.close()
        made.clear()
        assert free_memory(dev) == start, f"memory leaked after an interrupt at line {n}"
        probe = acl_mem.vmm.VirtualRange(16 * MiB)  # the address window is still whole
        probe.close()
