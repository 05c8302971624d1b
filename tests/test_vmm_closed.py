"""Closed VMM objects refuse every use (FreedBufferError), so a closed MappedMemory
never reads or writes whatever the runtime mapped at its old address since."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import acl_mem
from acl_mem import AllocApi, FreedBufferError, MemAttr
from acl_mem.pool import ExpandablePool, SegmentPool
from acl_mem.vmm import ExpandableSegment, Mapping, PhysicalMemory, VirtualRange

MiB = 1 << 20

#: Names that keep working once closed.
ALWAYS = {"close", "closed"}


def pools(dev: acl_mem.Device) -> tuple[int, int]:
    return (dev.mem_info(MemAttr.HBM_MEM_HUGE).free, dev.mem_info(MemAttr.HBM_MEM_NORMAL).free)


def public_names(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")} - ALWAYS


def uses(obj: Any, calls: dict[str, Callable[[], object]]) -> dict[str, Callable[[], object]]:
    """One use per public attribute: the given calls for methods, a read for the rest."""
    every = {name: (lambda name=name: getattr(obj, name)) for name in public_names(type(obj))}
    assert set(calls) <= set(every)
    return {**every, **calls, "__enter__": obj.__enter__}


def io_calls(obj: VirtualRange | Mapping) -> dict[str, Callable[[], object]]:
    """One call of each of the read/write methods VirtualRange and Mapping share."""
    return {"read": lambda: obj.read(1), "write": lambda: obj.write(b"x"),
            "copy_from": lambda: obj.copy_from(b"x"),
            "copy_to": lambda: obj.copy_to(bytearray(1), 1)}


def make(kind: str, keep: list[Any]) -> tuple[Any, dict[str, Callable[[], object]]]:
    """A closed object of ``kind`` and one use of each of its public attributes."""
    if kind == "VirtualRange":
        rng = VirtualRange(2 * MiB)
        physical = PhysicalMemory(2 * MiB)
        keep.append(physical)
        return rng, uses(rng, {"map": lambda: rng.map(physical), **io_calls(rng)})
    if kind == "PhysicalMemory":
        physical = PhysicalMemory(2 * MiB)
        return physical, uses(physical, {})
    if kind == "Mapping":
        rng, physical = VirtualRange(2 * MiB), PhysicalMemory(2 * MiB)
        keep += [rng, physical]
        mapping = rng.map(physical)
        return mapping, uses(mapping, io_calls(mapping))
    if kind == "MappedMemory":
        memory = acl_mem.reserve_and_map(2 * MiB)
        return memory, uses(memory, {
            "write": lambda: memory.write(b"x"), "read": lambda: memory.read(1),
            "offload": memory.offload, "restore": memory.restore})
    segment = ExpandableSegment(4 * MiB)
    segment.grow(2 * MiB)
    return segment, uses(segment, {
        "write": lambda: segment.write(b"x"), "read": lambda: segment.read(1),
        "grow": lambda: segment.grow(4 * MiB), "shrink": lambda: segment.shrink(0)})


KINDS = ["VirtualRange", "PhysicalMemory", "Mapping", "MappedMemory", "ExpandableSegment"]


@pytest.mark.parametrize("kind", KINDS)
def test_closed_object_refuses_every_public_attribute(dev, kind):
    start = pools(dev)
    keep: list[Any] = []
    obj, calls = make(kind, keep)
    assert not obj.closed
    obj.close()
    assert obj.closed
    for _, use in sorted(calls.items()):
        with pytest.raises(FreedBufferError):
            use()
    obj.close()  # idempotent
    assert obj.closed
    for other in reversed(keep):
        other.close()
    assert pools(dev) == start


def test_closed_mapped_memory_does_not_touch_the_next_mapping_at_its_address(dev):
    """Close, map new memory (most likely at the same addresses), then every use of the
    closed object raises and the new memory keeps its contents."""
    start = pools(dev)
    old = acl_mem.reserve_and_map(2 * MiB)
    old.write(b"old")
    old.close()
    new = acl_mem.reserve_and_map(2 * MiB)
    new.write(b"new!")
    for use in (lambda: old.write(b"xxxx"), lambda: old.read(4), old.offload, old.restore,
                lambda: old.address, lambda: old.size, lambda: old.offloaded,
                lambda: old.range):
        with pytest.raises(FreedBufferError):
            use()
    assert new.read(4) == b"new!"
    new.close()
    assert pools(dev) == start


def test_closed_offloaded_memory_refuses_restore(dev):
    start = pools(dev)
    memory = acl_mem.reserve_and_map(2 * MiB)
    memory.offload()
    memory.close()
    with pytest.raises(FreedBufferError):
        memory.restore()
    assert pools(dev) == start


def test_parts_refuse_once_closed_even_inside_a_composite(dev):
    """A closed PhysicalMemory cannot be mapped; a closed VirtualRange cannot map."""
    rng, physical = VirtualRange(2 * MiB), PhysicalMemory(2 * MiB)
    physical.close()
    with pytest.raises(FreedBufferError):
        rng.map(physical)
    with pytest.raises(FreedBufferError):
        Mapping(rng.base, physical, rng)
    rng.close()


@pytest.mark.parametrize("pool_kind", ["segment", "expandable"])
def test_closed_pool_refuses_allocate_and_keeps_its_figures(dev, pool_kind):
    start = pools(dev)
    pool: SegmentPool | ExpandablePool
    if pool_kind == "segment":
        pool = SegmentPool(dev, api=AllocApi.MALLOC, block_size=1 * MiB)
    else:
        pool = ExpandablePool(dev, 8 * MiB)
    segment = pool.allocate(100)
    pool.close()
    with pytest.raises(FreedBufferError):
        pool.allocate(100)
    with pytest.raises(FreedBufferError):
        segment.read(1)
    assert pool.closed
    assert pool.stats().in_use == 0
    assert pool.release_unused() == 0
    if isinstance(pool, ExpandablePool):
        assert (pool.max_size, pool.chunk, pool.mapped) == (8 * MiB, 2 * MiB, 0)
    pool.close()
    segment.free()
    assert pools(dev) == start
