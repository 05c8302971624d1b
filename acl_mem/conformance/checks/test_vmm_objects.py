"""The Pythonic VMM objects name things one way and say what state they are in
(docs/runtime-model.md §4): ``.address`` everywhere, a Device or an int wherever a device is
taken, informative reprs, and errors that name the fix."""

from __future__ import annotations

import pytest

import acl_mem
from acl_mem import MemAttr, raw
from acl_mem.vmm import (
    ExpandableSegment,
    MappedMemory,
    Mapping,
    PhysicalMemory,
    VirtualRange,
    granularity,
)

MiB = 1 << 20


def test_virtual_range_address_and_its_alias_base(dev):
    with VirtualRange(4 * MiB) as vr:
        assert vr.address == vr.base
        assert vr.address % (2 * MiB) == 0
        assert hex(vr.address) in repr(vr)
    assert "closed" in repr(vr)


def test_mapping_of_a_range_and_physical_memory_maps_at_the_range_start(dev):
    with VirtualRange(4 * MiB) as vr, PhysicalMemory(2 * MiB, device=dev) as pm:
        mapping = Mapping(vr, pm)
        try:
            assert mapping.address == vr.address
            assert mapping.range is vr
            assert mapping.size == 2 * MiB
        finally:
            mapping.close()


def test_closing_a_range_with_live_mappings_is_refused_and_leaves_it_open(dev):
    """docs/runtime-model.md §4.2, §8.3: releasing a reservation that is still mapped -> 107000;
    the range stays usable and closes once its mappings are closed."""
    vr = VirtualRange(4 * MiB)
    pm = PhysicalMemory(2 * MiB)
    mapping = vr.map(pm, 2 * MiB)
    with pytest.raises(acl_mem.RtParamInvalidError) as e:
        vr.close()
    assert e.value.code == 107000
    assert not vr.closed
    assert "1 mapping" in repr(vr)
    mapping.close()
    vr.close()
    pm.close()
    assert vr.closed and pm.closed


@pytest.mark.parametrize("as_device", [True, False], ids=["Device", "int"])
def test_every_vmm_object_takes_a_device_or_its_id(dev, as_device):
    device = acl_mem.Device(0) if as_device else 0
    chunk = granularity(device)
    with PhysicalMemory(chunk, device=device) as pm:
        assert pm.device == 0
    with MappedMemory(chunk, device=device) as memory:
        assert memory.device == 0
    with ExpandableSegment(2 * chunk, device=device) as segment:
        segment.grow(chunk)
        assert segment.device == 0 and segment.size == chunk
    with acl_mem.reserve_and_map(chunk, device=device) as memory:
        assert memory.size == chunk


@pytest.mark.parametrize("bad", ["0", 1.0, None, True])
def test_a_device_that_is_neither_device_nor_int_is_a_type_error(dev, bad):
    with pytest.raises(TypeError):
        PhysicalMemory(2 * MiB, device=bad)
    with pytest.raises(TypeError):
        ExpandableSegment(4 * MiB, device=bad)
    with pytest.raises(TypeError):
        granularity(bad)


def test_mapping_refuses_arguments_of_the_wrong_type(dev):
    with PhysicalMemory(2 * MiB) as pm:
        with pytest.raises(TypeError):
            Mapping("0x1000", pm)  # type: ignore[arg-type]
        with VirtualRange(2 * MiB) as vr, pytest.raises(TypeError):
            Mapping(vr, 2 * MiB)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [None, True, 1.5, "4096"])
def test_sizes_and_offsets_that_are_not_ints_are_type_errors(dev, bad):
    """Refused before anything is reserved or mapped, with the call and argument named
    (True is not a size of 1, None is not a size)."""
    before = raw.aclrtGetMemInfo(MemAttr.HBM_MEM)[0]
    with pytest.raises(TypeError):
        acl_mem.reserve_and_map(bad)
    with pytest.raises(TypeError):
        ExpandableSegment(bad)
    with VirtualRange(4 * MiB) as vr, PhysicalMemory(2 * MiB) as pm:
        with pytest.raises(TypeError):
            vr.map(pm, bad)
        with pytest.raises(TypeError):
            vr.map(bad)
        with pytest.raises(ValueError):
            vr.map(pm, -1)
        with vr.map(pm, 2 * MiB):
            pass
    assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM)[0] == before


def test_reading_an_offloaded_memory_is_refused_until_restore(dev):
    with MappedMemory(2 * MiB) as memory:
        memory.write(b"abc", 10)
        memory.offload()
        assert "offloaded" in repr(memory)
        with pytest.raises(ValueError):
            memory.read(3, 10)
        memory.restore()
        assert memory.read(3, 10) == b"abc"
        assert "mapped" in repr(memory)


def test_reprs_show_address_size_and_device(dev):
    with ExpandableSegment(4 * MiB, device=dev) as segment:
        segment.grow(2 * MiB)
        text = repr(segment)
        assert hex(segment.address) in text and "2 MiB of 4 MiB" in text
    with PhysicalMemory(2 * MiB, attr=MemAttr.HBM_MEM_HUGE) as pm:
        assert hex(pm.handle) in repr(pm) and "2 MiB" in repr(pm)
    assert repr(pm) == "<PhysicalMemory closed>"


def _as_if_interrupted_after_the_call(obj: VirtualRange | PhysicalMemory | Mapping) -> None:
    """What an interrupt between the runtime's release and the object noting it leaves:
    the step started, its runtime call done, the object not closed."""
    obj._closing = obj._step_started = True


def test_a_close_whose_runtime_call_had_run_finishes_on_retry(dev):
    """close() continues an interrupted teardown: the runtime answers 107000 to a repeated
    unmap, free or release (docs/runtime-model.md §4.2-§4.4), which the retry takes as
    done, on every backend."""
    vr = VirtualRange(2 * MiB)
    pm = PhysicalMemory(2 * MiB, device=dev)
    mapping = vr.map(pm)
    acl_mem.raw.aclrtUnmapMem(mapping.address)
    _as_if_interrupted_after_the_call(mapping)
    with pytest.raises(acl_mem.FreedBufferError):
        mapping.address  # noqa: B018 - half closed: refused until close() finishes
    mapping.close()
    acl_mem.raw.aclrtFreePhysical(pm.handle)
    _as_if_interrupted_after_the_call(pm)
    pm.close()
    acl_mem.raw.aclrtReleaseMemAddress(vr.address)
    _as_if_interrupted_after_the_call(vr)
    vr.close()
    assert mapping.closed and pm.closed and vr.closed


def test_memory_freed_while_mapped_stays_until_the_unmap(dev):
    """The order MappedMemory and ExpandableSegment release in (free, then unmap): the
    contents stay readable in between, and closing releases everything."""
    memory = acl_mem.reserve_and_map(2 * MiB, device=dev)
    memory.write(b"kept")
    physical = memory._physical
    assert physical is not None
    physical.close()  # the first step of close()
    assert memory.read(4) == b"kept"
    memory.close()
    assert memory.closed
