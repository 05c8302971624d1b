"""Pinned host memory in the fake: one story for device reset, aclFinalize and free
(docs/runtime-model.md §3.7, docs/fidelity.md row 20).

A reset or aclFinalize leaves pinned memory allocated (the runtime keeps no record of it
per device); free() then releases it, so ``leaks()`` lists only what is really held.
Freed pinned memory stays mapped, emptied, for a while: a view or pointer that outlived
aclrtFreeHost reads zeros and writes nowhere anyone else allocated, and the memory
checker reports such a write as a use after free.
"""

from __future__ import annotations

import pytest

import acl_mem
from acl_mem import HostBuffer, MemcpyKind, RtParamInvalidError, raw

#: Freed pinned blocks the fake keeps mapped (emptied), and their bytes at most besides
#: the newest (docs/fidelity.md).
PINNED_QUARANTINE = 64
PINNED_QUARANTINE_BYTES = 256 << 20

pytestmark = pytest.mark.fake_only("leaks(), quarantine and checker are the fake's")


def _pinned_leaks() -> list[int]:
    return [leak.address for leak in acl_mem.fake.leaks() if leak.api == "aclrtMallocHost"]


def test_free_after_finalize_really_frees(fake):
    raw.aclInit()
    with acl_mem.Device(0) as dev:
        buf = dev.malloc_host(256)
    raw.aclFinalize()
    assert _pinned_leaks() == [buf.ptr]  # still held: nothing released it
    buf.free()
    assert _pinned_leaks() == []


def test_buffer_dropped_after_finalize_is_freed_by_its_finalizer(fake):
    raw.aclInit()
    with acl_mem.Device(0) as dev:
        buf = dev.malloc_host(256)
    raw.aclFinalize()
    del buf
    assert _pinned_leaks() == []


def test_a_new_fake_takes_pinned_memory_with_it(fake):
    """Reconfiguring the fake is a new runtime: the old buffer is released, free() is a
    no-op, and the new fake lists nothing."""
    raw.aclrtSetDevice(0)
    buf = acl_mem.Device(0).malloc_host(256)
    acl_mem.fake.reset()  # the old device references went with the old fake
    assert buf.freed
    buf.free()
    assert _pinned_leaks() == []


def _stale_view(dev: acl_mem.Device) -> tuple[int, memoryview]:
    """A view of pinned memory that outlives its aclrtFreeHost (a borrowed wrapper)."""
    ptr = raw.aclrtMallocHost(4096)
    view = HostBuffer.from_ptr(ptr, 4096, device=dev).view()
    view[:4] = b"live"
    raw.aclrtFreeHost(ptr)
    return ptr, view


def test_a_stale_view_reads_emptied_memory_and_aliases_no_new_allocation(fake, dev):
    ptr, view = _stale_view(dev)
    assert bytes(view[:4]) == bytes(4)  # emptied, not the old bytes, not a crash
    fresh = [raw.aclrtMallocHost(4096) for _ in range(4)]
    assert ptr not in fresh
    view[:4] = b"late"  # lands in the quarantined mapping, nobody's memory
    for other in fresh:
        assert HostBuffer.from_ptr(other, 4).read() != b"late"
        raw.aclrtFreeHost(other)
    assert acl_mem.check() == []  # the checker is off: nothing is recorded
    # The runtime no longer knows the address: a copy through it fails, as after an unmap.
    with dev.malloc(4096) as device, pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemcpy(ptr, 4096, device.ptr, 4096, MemcpyKind.DEVICE_TO_HOST)
    assert e.value.code == 107000


def test_the_checker_reports_a_write_through_a_stale_view_once(checking):
    with acl_mem.Device(0) as dev:
        _, view = _stale_view(dev)
        assert bytes(view[:4]) == b"\xdd" * 4  # the checker's freed-memory poison
        assert acl_mem.check() == []  # reading is not reported, writing is
        view[8:12] = b"late"
        findings = [kind for kind, _ in acl_mem.check()]
        assert findings == ["use-after-free"]
        assert [kind for kind, _ in acl_mem.check()] == findings  # reported once
        view.release()


def test_quarantine_is_bounded(fake, dev):
    for _ in range(PINNED_QUARANTINE + 5):
        raw.aclrtFreeHost(raw.aclrtMallocHost(4096))
    assert fake.pinned_kept() == (PINNED_QUARANTINE, PINNED_QUARANTINE * 4096)


def test_quarantine_keeps_little_address_space(fake, dev):
    """Freed pinned blocks kept mapped take at most PINNED_QUARANTINE_BYTES besides the
    newest: freeing big blocks over and over does not pile up address space (which
    counts against `ulimit -v`)."""
    big = 200 << 20
    for _ in range(6):
        raw.aclrtFreeHost(raw.aclrtMallocHost(big))
    count, kept = fake.pinned_kept()
    newest = big + 4096  # 200 MiB and the padding, in whole host pages
    assert kept - newest <= PINNED_QUARANTINE_BYTES
    assert 1 <= count < 6
