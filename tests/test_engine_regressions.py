"""Defects the fake engine had, each pinned by a test that failed before its fix.

Races with queued work, hazards raised in "raise" mode, and ownership tokens taken
while another thread resets the device (docs/fidelity.md, streams and hazards rows).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

import acl_mem
from acl_mem import HazardError, MemAttr, MemcpyKind, raw

FAKE_ONLY = "hazards and queued-work checks exist only in the fake"
MiB = 1 << 20


def _free_hbm() -> int:
    return raw.aclrtGetMemInfo(MemAttr.HBM_MEM)[0]


@pytest.mark.fake_only(FAKE_ONLY)
def test_queued_copy_into_freed_pinned_memory_never_writes_its_successor(fake, dev,
                                                                          monkeypatch):
    """It used to run at synchronise against whatever was mapped there next (or crash
    the interpreter when nothing was); now it is skipped and reported."""
    monkeypatch.setattr(fake.hazards, "mode", "count")
    source = raw.aclrtMalloc(4096, 0)
    raw.aclrtMemset(source, 4096, 0xEE, 4096)
    stream = raw.aclrtCreateStream()
    pinned = raw.aclrtMallocHost(4096)
    raw.aclrtMemcpyAsync(pinned, 4096, source, 4096, MemcpyKind.DEVICE_TO_HOST, stream)
    raw.aclrtFreeHost(pinned)
    successors = [raw.aclrtMallocHost(4096) for _ in range(4)]
    for ptr in successors:
        raw.aclrtMemset(ptr, 4096, 0x11, 4096)
    raw.aclrtSynchronizeStream(stream)
    assert acl_mem.fake.hazards()["queued-work-on-freed-memory"] == 1
    for ptr in successors:
        out = bytearray(4096)
        raw.aclrtMemcpy(acl_mem._hostbuf.host_span(out, writable=True, call="t",
                                                   name="out").address,
                        4096, ptr, 4096, MemcpyKind.HOST_TO_HOST)
        assert out == b"\x11" * 4096
        raw.aclrtFreeHost(ptr)
    raw.aclrtDestroyStream(stream)
    raw.aclrtFree(source)


@pytest.mark.fake_only(FAKE_ONLY)
def test_raise_mode_free_returns_the_memory_before_raising(fake, dev, monkeypatch):
    """A raised free-while-queued used to leave the block allocated (2 MiB lost per
    raised free, as the buffer had already forgotten its pointer)."""
    monkeypatch.setattr(fake.hazards, "mode", "raise")
    before = _free_hbm()
    with dev.stream() as stream:
        pinned = dev.malloc_host(2 * MiB)
        buf = dev.malloc(2 * MiB)
        buf.copy_from_async(pinned, stream=stream)
        with pytest.raises(HazardError):
            buf.free()
        assert buf.freed
        assert _free_hbm() == before
        monkeypatch.setattr(fake.hazards, "mode", "count")
        stream.synchronize()
        pinned.free()


@pytest.mark.fake_only(FAKE_ONLY)
def test_raise_mode_reset_marks_buffers_released(fake, backend, monkeypatch):
    """A raised reset-with-pending-work used to leave the Python mirror thinking the
    device was still set: old buffers looked live and their free() released whatever
    had taken the address since."""
    monkeypatch.setattr(fake.hazards, "mode", "raise")
    raw.aclrtSetDevice(0)
    device = acl_mem.Device(0)
    old = device.malloc(4096)
    stream = raw.aclrtCreateStream()
    raw.aclrtMemsetAsync(old.ptr, 4096, 1, 4096, stream)
    with pytest.raises(HazardError):
        raw.aclrtResetDevice(0)
    assert old.freed
    raw.aclrtSetDevice(0)
    successor = device.malloc(4096)
    old.free()  # must not free the successor, which may sit at the same address
    successor.memset(7)
    assert successor.read(1) == b"\x07"
    successor.free()
    raw.aclrtResetDevice(0)


@pytest.mark.fake_only("forces the race with a patched backend call")
def test_token_is_taken_with_the_allocation(fake, backend, monkeypatch):
    """Another thread resetting the device right after aclrtMalloc returned used to give
    the new buffer the post-reset token: a live-looking buffer on released memory."""
    raw.aclrtSetDevice(0)
    device = acl_mem.Device(0)
    original = fake.aclrtMalloc
    resetter = threading.Thread(target=raw.aclrtResetDevice, args=(0,))

    def malloc_then_race(size: int, policy: int, null_outputs: int = 0) -> tuple[int, int]:
        result = original(size, policy, null_outputs)
        resetter.start()
        time.sleep(0.2)  # the reset gets every chance to run before the buffer exists
        return result

    monkeypatch.setattr(fake, "aclrtMalloc", malloc_then_race)
    buf = device.malloc(4096)
    resetter.join(5)
    assert not resetter.is_alive()
    assert buf.freed


@pytest.mark.fake_only(FAKE_ONLY)
def test_raise_mode_unmap_is_done_before_raising(fake, dev, monkeypatch):
    """A raised free-while-queued on aclrtUnmapMem used to leave the mapping in place."""
    prop = raw.aclrtPhysicalMemProp(memAttr=MemAttr.HBM_MEM_HUGE,
                                    location=raw.aclrtMemLocation(id=0, type=1))
    base = raw.aclrtReserveMemAddress(2 * MiB, 0, 0, 0)
    handle = raw.aclrtMallocPhysical(2 * MiB, prop, 0)
    raw.aclrtMapMem(base, 2 * MiB, 0, handle, 0)
    stream = raw.aclrtCreateStream()
    raw.aclrtMemsetAsync(base, 2 * MiB, 3, 64, stream)
    monkeypatch.setattr(fake.hazards, "mode", "raise")
    with pytest.raises(HazardError):
        raw.aclrtUnmapMem(base)
    monkeypatch.setattr(fake.hazards, "mode", "count")
    with pytest.raises(acl_mem.RtParamInvalidError):
        raw.aclrtUnmapMem(base)          # already unmapped
    raw.aclrtSynchronizeStream(stream)   # the queued memset is skipped, not run
    assert acl_mem.fake.hazards()["queued-work-on-freed-memory"] == 1
    raw.aclrtDestroyStream(stream)
    raw.aclrtFreePhysical(handle)
    raw.aclrtReleaseMemAddress(base)


CHECKER = "the memory checker exists only in the fake"


def _read(ptr: int, count: int) -> bytes:
    out = bytearray(count)
    raw.aclrtMemcpy(acl_mem._hostbuf.host_span(out, writable=True, call="t", name="out")
                    .address, count, ptr, count, MemcpyKind.DEVICE_TO_HOST)
    return bytes(out)


@pytest.fixture
def checker_modes(fake: object) -> Iterator[Callable[[str], None]]:
    """Turn the fake's checker on with findings counted; the test then switches the mode
    (acl_mem.fake.configure keeps the memory when only modes change)."""
    def mode(name: str) -> None:
        acl_mem.fake.configure(check=True, hazards=name)

    mode("count")
    try:
        yield mode
    finally:
        acl_mem.fake.reset()


@pytest.mark.fake_only(CHECKER)
def test_checker_raise_mode_free_frees_before_raising(fake, checker_modes, dev):
    """A damaged canary used to make the block impossible to free (every free raised
    before releasing it)."""
    from acl_mem import MemoryCheckError

    before = _free_hbm()
    ptr = raw.aclrtMalloc(100, 0)
    raw.aclrtMemset(ptr, 4096, 0, 110)      # 10 bytes into the padding
    checker_modes("raise")
    with pytest.raises(MemoryCheckError):
        raw.aclrtFree(ptr)
    with pytest.raises(acl_mem.RtParamInvalidError):
        raw.aclrtFree(ptr)                  # it is gone
    assert _free_hbm() == before


@pytest.mark.fake_only(CHECKER)
def test_checker_raise_mode_synchronise_runs_every_op_first(fake, checker_modes, dev):
    from acl_mem import MemoryCheckError

    checker_modes("raise")
    small = raw.aclrtMalloc(100, 0)
    other = raw.aclrtMalloc(4096, 0)
    stream = raw.aclrtCreateStream()
    raw.aclrtMemsetAsync(small, 128, 0x11, 128, stream)   # crosses the requested end
    raw.aclrtMemsetAsync(other, 4096, 0x22, 64, stream)
    with pytest.raises(MemoryCheckError):
        raw.aclrtSynchronizeStream(stream)
    assert _read(other, 4) == b"\x22" * 4                  # the op after it ran too
    checker_modes("count")
    found = len(acl_mem.check())
    raw.aclrtSynchronizeStream(stream)                     # nothing was left queued
    raw.aclrtDestroyStream(stream)
    assert acl_mem.fake.hazards().get("destroy-with-pending-work", 0) == 0
    raw.aclrtFree(small)
    raw.aclrtFree(other)
    # The damaged canary, seen at the free (and at the synchronisation, by an engine that
    # verifies every canary there).
    assert {k for k, _ in acl_mem.check()[found:]} == {"canary-overwritten"}


@pytest.mark.fake_only(CHECKER)
def test_stale_pool_segment_after_reset_leaves_new_memory_alone(fake, backend, checker_modes):
    """Freeing a pool segment whose block a device reset released used to poison (0xDD)
    whatever was allocated at that address since."""
    raw.aclrtSetDevice(0)
    pool = acl_mem.SegmentPool(acl_mem.Device(0))
    segment = pool.allocate(100)
    raw.aclrtResetDevice(0)
    raw.aclrtSetDevice(0)
    fresh = raw.aclrtMalloc(4096, 0)
    raw.aclrtMemset(fresh, 4096, 0x11, 4096)
    segment.free()
    assert _read(fresh, 16) == b"\x11" * 16
    assert [kind for kind, _ in acl_mem.check()] == []
    raw.aclrtFree(fresh)
    pool.close()
    raw.aclrtResetDevice(0)


@pytest.mark.fake_only("virtual memory outliving a context is checked through the fake's "
                       "pools")
def test_expandable_pool_closed_after_reset_returns_its_memory(fake, backend):
    raw.aclrtSetDevice(0)
    before = _free_hbm()
    pool = acl_mem.ExpandablePool(acl_mem.Device(0), 1 << 30)
    pool.allocate(10 << 20)
    raw.aclrtResetDevice(0)
    pool.close()
    raw.aclrtSetDevice(0)
    assert _free_hbm() == before
    raw.aclrtResetDevice(0)


def test_a_refused_stream_destroy_keeps_the_stream(backend):
    """Destroying a stream from another device's context fails (107003); the Stream used
    to forget its handle anyway, so the runtime kept a stream nobody could destroy."""
    raw.aclrtSetDevice(0)
    raw.aclrtSetDevice(1)
    zero, one = acl_mem.Device(0), acl_mem.Device(1)
    zero.set_current()
    stream = zero.stream()
    one.set_current()
    with pytest.raises(acl_mem.AclError) as refused:
        stream.destroy()
    assert refused.value.code == 107003
    zero.set_current()
    assert not stream.destroyed
    stream.synchronize()
    stream.destroy()
    assert stream.destroyed
    raw.aclrtResetDevice(1)
    raw.aclrtResetDevice(0)


@pytest.mark.fake_only("acl_mem.fake.configure replaces the fake under the program")
def test_vmm_objects_from_before_a_reconfiguration_refuse_use(fake, backend):
    """They used to keep writing into whatever the new fake mapped at the same address."""
    raw.aclrtSetDevice(0)
    old = acl_mem.reserve_and_map(2 * MiB)
    acl_mem.fake.configure()
    try:
        raw.aclrtSetDevice(0)
        new = acl_mem.reserve_and_map(2 * MiB)
        new.write(b"NEW!")
        assert old.closed
        with pytest.raises(acl_mem.FreedBufferError):
            old.write(b"OLD!")
        assert new.read(4) == b"NEW!"
        new.close()
        old.close()
        raw.aclrtResetDevice(0)
    finally:
        acl_mem.fake.configure()
