"""The Pythonic VMM helpers: nothing leaks, contents survive offload/restore (docs/runtime-model.md
§4)."""

from __future__ import annotations

import ctypes

import pytest

import acl_mem
from acl_mem import MemAttr, raw
from acl_mem.vmm import ExpandableSegment, MappedMemory, PhysicalMemory, VirtualRange, granularity

MiB = 1 << 20


def pools(dev: acl_mem.Device) -> tuple[int, int]:
    return (dev.mem_info(MemAttr.HBM_MEM_HUGE).free, dev.mem_info(MemAttr.HBM_MEM_NORMAL).free)


def write(address: int, data: bytes) -> None:
    source = bytearray(data)
    raw.aclrtMemcpy(address, len(data), ctypes.addressof(
        (ctypes.c_char * len(source)).from_buffer(source)), len(data), 1)


def read(address: int, count: int) -> bytes:
    target = bytearray(count)
    raw.aclrtMemcpy(ctypes.addressof((ctypes.c_char * count).from_buffer(target)), count,
                    address, count, 2)
    return bytes(target)


def test_reserve_and_map_rounds_to_the_granularity_and_frees_everything(dev):
    """docs/runtime-model.md §4.5: physical sizes are multiples of the granularity (2 MiB for HBM
    huge)."""
    start = pools(dev)
    chunk = granularity()
    assert chunk == 2 * MiB
    with acl_mem.reserve_and_map(3 * MiB) as memory:
        assert memory.size == 4 * MiB
        assert memory.address % (2 * MiB) == 0
        write(memory.address + 1000, b"hello")
        assert read(memory.address + 1000, 5) == b"hello"
        assert pools(dev)[0] == start[0] - 4 * MiB
    assert pools(dev) == start


def test_offload_returns_the_memory_and_restore_keeps_address_and_contents(dev):
    """The sleep/wake pattern: VA kept, physical memory given back, contents restored."""
    start = pools(dev)
    memory = acl_mem.reserve_and_map(4 * MiB)
    address = memory.address
    payload = bytes(range(256)) * 16
    write(address + 3 * MiB, payload)
    memory.offload()
    assert memory.offloaded
    assert pools(dev) == start
    with pytest.raises(acl_mem.RtParamInvalidError) as e:
        read(address, 16)  # unmapped while offloaded
    assert e.value.code == 107000
    memory.restore()
    assert memory.address == address
    assert read(address + 3 * MiB, len(payload)) == payload
    memory.close()
    memory.close()
    assert pools(dev) == start


def test_expandable_segment_grows_and_shrinks_by_chunks(dev):
    start = pools(dev)
    with ExpandableSegment(64 * MiB) as segment:
        segment.grow(5 * MiB)
        assert segment.size == 6 * MiB
        write(segment.address + 5 * MiB, b"end")
        segment.grow(9 * MiB)
        assert segment.size == 10 * MiB
        assert read(segment.address + 5 * MiB, 3) == b"end"
        assert pools(dev)[0] == start[0] - 10 * MiB
        segment.shrink(3 * MiB)
        assert segment.size == 4 * MiB
        assert pools(dev)[0] == start[0] - 4 * MiB
        with pytest.raises(ValueError):
            segment.grow(65 * MiB)
    assert pools(dev) == start


def test_objects_release_once(dev):
    start = pools(dev)
    rng = VirtualRange(4 * MiB)
    physical = PhysicalMemory(2 * MiB)
    mapping = rng.map(physical, 2 * MiB)
    with pytest.raises(ValueError):
        rng.map(physical, 3 * MiB)
    physical.close()  # freed while mapped: released at the unmap (docs/runtime-model.md §4.3)
    assert pools(dev)[0] == start[0] - 2 * MiB
    mapping.close()
    mapping.close()
    assert pools(dev) == start
    rng.close()
    rng.close()


@pytest.mark.fake_only("fault injection exists only in the fake")
@pytest.mark.parametrize("call", ["aclrtReserveMemAddress", "aclrtMallocPhysical", "aclrtMapMem"])
def test_reserve_and_map_rolls_back_and_raises_the_original_error(fake, dev, call):
    start = pools(dev)
    held = acl_mem.fake.leaks()  # reservations, physical memory and mappings included
    acl_mem.fake.inject_fault(call)
    with pytest.raises(acl_mem.MemoryAllocationError) as e:
        acl_mem.reserve_and_map(4 * MiB)
    assert e.value.code == 207001
    assert pools(dev) == start
    assert acl_mem.fake.leaks() == held


@pytest.mark.fake_only("fault injection exists only in the fake")
@pytest.mark.parametrize(("call", "nth"), [("aclrtMallocPhysical", 2), ("aclrtMapMem", 3)])
def test_failed_grow_leaves_the_segment_as_it_was(fake, dev, call, nth):
    with ExpandableSegment(64 * MiB) as segment:
        segment.grow(4 * MiB)
        write(segment.address, b"kept")
        before = pools(dev)
        acl_mem.fake.inject_fault(call, nth=nth)
        with pytest.raises(acl_mem.MemoryAllocationError):
            segment.grow(16 * MiB)
        assert segment.size == 4 * MiB
        assert pools(dev) == before
        assert read(segment.address, 4) == b"kept"
        segment.grow(8 * MiB)
        assert segment.size == 8 * MiB


@pytest.mark.fake_only("fault injection exists only in the fake")
def test_failed_restore_keeps_the_saved_contents(fake, dev):
    memory = MappedMemory(2 * MiB)
    write(memory.address, b"saved")
    memory.offload()
    acl_mem.fake.inject_fault("aclrtMapMem")
    with pytest.raises(acl_mem.MemoryAllocationError):
        memory.restore()
    assert memory.offloaded
    memory.restore()
    assert read(memory.address, 5) == b"saved"
    memory.close()


@pytest.mark.fake_only("fault injection exists only in the fake")
def test_inject_fault_rejects_unknown_calls(fake):
    with pytest.raises(ValueError):
        acl_mem.fake.inject_fault("aclrtFree")
    with pytest.raises(ValueError):
        acl_mem.fake.inject_fault("aclrtMapMem", nth=0)


def test_read_and_write_are_bounded_by_what_is_mapped(dev):
    with acl_mem.reserve_and_map(2 * MiB) as memory:
        memory.write(b"abc", 2 * MiB - 3)
        assert memory.read(3, 2 * MiB - 3) == b"abc"
        with pytest.raises(ValueError):
            memory.write(b"abcd", 2 * MiB - 3)
        memory.offload()
        with pytest.raises(ValueError):
            memory.read(1)
    with ExpandableSegment(8 * MiB) as segment:
        with pytest.raises(ValueError):
            segment.write(b"x")
        segment.grow(1)
        segment.write(b"x", 2 * MiB - 1)
        assert segment.read(1, 2 * MiB - 1) == b"x"


def test_forgotten_objects_are_released_when_collected(dev):
    """Dropping VMM objects without close() gives everything back, in a safe order."""
    import gc

    start = pools(dev)
    memory = acl_mem.reserve_and_map(2 * MiB)
    segment = ExpandableSegment(8 * MiB)
    segment.grow(4 * MiB)
    rng = VirtualRange(2 * MiB)
    physical = PhysicalMemory(2 * MiB)
    mapping = rng.map(physical)
    assert pools(dev)[0] == start[0] - 8 * MiB
    del memory, segment, rng, physical, mapping  # the range goes first: it must wait
    gc.collect()
    assert pools(dev) == start
    probe = VirtualRange(2 * MiB)  # the window is free again: no leaked reservations
    probe.close()
