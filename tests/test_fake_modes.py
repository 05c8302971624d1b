"""Switching the fake's reporting modes keeps its memory; raise mode reports the first
hazard; checker findings point at the user's line; freed pool segments are watched."""

from __future__ import annotations

import ctypes
import sys
import warnings

import pytest

import acl_mem
from acl_mem import raw
from acl_mem._fake.config import set_check, set_hazard_mode
from acl_mem.errors import HazardError, MemoryCheckWarning

pytestmark = pytest.mark.fake_only("reporting modes and the memory checker are the fake's")


@pytest.fixture
def restore_modes(fake):
    """The modes chosen here must not outlive the test (the next one gets a fresh fake)."""
    yield
    set_hazard_mode(None)
    set_check(None)


def address(buffer: bytearray) -> int:
    return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))


def test_switching_hazard_mode_and_checker_keeps_buffers(fake, dev, restore_modes):
    buf = dev.malloc(100)
    buf.copy_from(b"keep me!")
    for change in ({"hazards": "raise"}, {"check": True}, {"hazards": "count"},
                   {"check": False}):
        acl_mem.fake.configure(**change)
        assert not buf.freed
        out = bytearray(8)
        buf.copy_to(out, count=8)
        assert bytes(out) == b"keep me!"
    assert acl_mem.fake.hazards() == {}


def test_checker_turned_on_late_checks_new_blocks_only(fake, dev, restore_modes):
    old = dev.malloc(100)
    acl_mem.fake.configure(check=True, hazards="count")
    new = dev.malloc(100)
    data = bytearray(b"x" * 120)
    old_ptr = old.ptr
    raw.aclrtMemcpy(old.ptr, 160, address(data), 120, 1)  # past the request: no canary
    raw.aclrtMemcpy(new.ptr, 160, address(data), 120, 1)
    old.free()
    new.free()
    canaries = [message for kind, message in acl_mem.check() if kind == "canary-overwritten"]
    assert len(canaries) == 1  # the new block's, found at its free
    assert f"{old_ptr:#x}" not in canaries[0]


def test_checker_turned_off_gives_quarantined_addresses_back(fake, dev, restore_modes):
    acl_mem.fake.configure(check=True, hazards="count")
    first = dev.malloc(4096)
    ptr = first.ptr
    first.free()
    assert dev.malloc(4096).ptr != ptr  # quarantined while checking
    acl_mem.fake.configure(check=False)
    seen = {dev.malloc(4096).ptr for _ in range(4)}
    assert ptr in seen or len(seen) == 4


def test_raise_mode_reports_the_first_hazard_not_the_cleanup(fake, restore_modes):
    acl_mem.fake.configure(hazards="raise")
    with pytest.raises(HazardError) as e, acl_mem.Device(0) as dev:
        host = dev.malloc_host(1024)
        with dev.stream() as stream:
            buf = dev.malloc(1024)
            buf.copy_from_async(host, stream=stream)
            buf.free()  # the real mistake: freed while the copy is queued
    assert str(e.value).startswith("free-while-queued")
    if sys.version_info >= (3, 11):
        assert any("destroy-with-pending-work" in note for note in e.value.__notes__)
    assert acl_mem.fake.hazards()["free-while-queued"] == 1


def test_checker_warnings_point_at_the_users_line(fake, dev, restore_modes):
    acl_mem.fake.configure(check=True, hazards="warn")
    buf = dev.malloc(100)
    data = bytearray(120)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        raw.aclrtMemcpy(buf.ptr, 160, address(data), 120, 1)
        buf.free()
    found = [w for w in caught if issubclass(w.category, MemoryCheckWarning)]
    assert [w.category for w in found] == [MemoryCheckWarning] * 2  # the copy, the free
    assert all(w.filename == __file__ for w in found)


def test_access_to_a_freed_pool_segment_is_reported(fake, dev, restore_modes):
    acl_mem.fake.configure(check=True, hazards="count")
    with acl_mem.SegmentPool(dev, block_size=64 << 10) as pool:
        keep = pool.allocate(256)
        gone = pool.allocate(256)
        stale = gone.ptr
        gone.free()
        data = bytearray(16)
        raw.aclrtMemcpy(stale, 16, address(data), 16, 1)  # a raw write after free
        raw.aclrtMemcpy(address(data), 16, stale + 16, 16, 2)  # and a read
        found = [m for k, m in acl_mem.check() if k == "use-after-free"]
        assert len(found) == 2 and all(f"{stale:#x}" in m for m in found)
        reused = pool.allocate(256)  # the bytes belong to a live segment again
        raw.aclrtMemcpy(reused.ptr, 16, address(data), 16, 1)
        assert len([k for k, _ in acl_mem.check() if k == "use-after-free"]) == 2
        keep.free()
        reused.free()


def test_buffer_and_array_blocks_do_not_mask_the_users_exception(fake, restore_modes):
    """Leaving `with buffer` / `with device_array` while an exception propagates: the free's
    HazardError (a copy is still queued) must not replace it."""
    np = pytest.importorskip("numpy")
    acl_mem.fake.configure(hazards="raise")
    with pytest.raises(KeyError), acl_mem.Device(0) as dev:
        host = dev.malloc_host(64)
        stream = dev.stream()
        with dev.malloc(64) as buf:
            buf.copy_from_async(host, stream=stream)
            raise KeyError("the user's own error")
    assert acl_mem.fake.hazards()["free-while-queued"] == 1
    with pytest.raises(KeyError), acl_mem.Device(0) as dev:
        stream = dev.stream()
        pinned = dev.malloc_host(64)
        with dev.empty(16, np.float32) as array:
            array.buffer.copy_from_async(pinned, stream=stream)
            raise KeyError("the user's own error")


@pytest.mark.parametrize("pool_kind", ["SegmentPool", "ExpandablePool"])
def test_a_pool_segment_freed_with_queued_work_is_reported(fake, restore_modes, pool_kind):
    """A segment freed while a copy into it is still queued: the next segment of that size
    gets the same range, and the copy would land there. The free is the mistake, reported
    as aclrtFree's (free-while-queued) at the user's line, with the range back in the pool
    even in raise mode."""
    acl_mem.fake.configure(hazards="raise")
    with acl_mem.Device(0) as dev, dev.stream() as stream:
        host = dev.malloc_host(256)
        pool = acl_mem.SegmentPool(dev) if pool_kind == "SegmentPool" else \
            acl_mem.ExpandablePool(dev, 64 << 20)
        seg = pool.allocate(256)
        seg.copy_from_async(host, stream=stream)
        with pytest.raises(HazardError) as raised:
            seg.free()
        assert str(raised.value).startswith("free-while-queued: Segment.free()")
        assert pool.stats().in_use == 0  # the range went back before the report
        stream.synchronize()
        again = pool.allocate(256)  # nothing queued now: a plain free
        again.free()
        pool.close()
        host.free()
    assert acl_mem.fake.hazards()["free-while-queued"] == 1


def test_a_dropped_pool_segment_with_queued_work_is_reported(fake, dev, restore_modes):
    acl_mem.fake.configure(hazards="count")
    with dev.stream() as stream, acl_mem.SegmentPool(dev) as pool:
        host = dev.malloc_host(256)
        seg = pool.allocate(256)
        seg.copy_from_async(host, stream=stream)
        del seg  # collected: returned at the pool's next call
        pool.stats()
        assert acl_mem.fake.hazards()["free-while-queued"] == 1
        stream.synchronize()
        host.free()
