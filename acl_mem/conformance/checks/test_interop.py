"""Interop with memory and data from elsewhere, against the runtime itself.

Wrapping memory another allocator owns (``from_ptr``) must leave it to that owner
(docs/runtime-model.md §3.5-§3.7: only the free calls release it); bytes written
through the buffer protocol, numpy or DLPack views of page-locked memory are the bytes
the runtime copies (§3.7, §3.10); typed device arrays round-trip numpy arrays through
device memory (§3.5, §3.10), asynchronously on a stream (§3.4).
"""

from __future__ import annotations

import gc

import numpy as np

import acl_mem
from acl_mem import DeviceBuffer, HostBuffer, MallocPolicy, MemcpyKind, raw

from .helpers import address_of, free_pools

MiB = 1 << 20


def _pattern(n: int, seed: int = 7) -> bytes:
    return bytes((seed + 31 * i) % 251 for i in range(n))


def _device_bytes(ptr: int, n: int) -> bytes:
    """``n`` bytes of device memory at ``ptr``, read with a raw D2H copy."""
    out = bytearray(n)
    raw.aclrtMemcpy(address_of(out), n, ptr, n, MemcpyKind.DEVICE_TO_HOST)
    return bytes(out)


# -- from_ptr: borrowed memory stays its owner's ---------------------------------------------------


def test_from_ptr_over_acl_malloc_is_not_freed_by_the_wrapper_spec_3_6(dev):
    """docs/runtime-model.md §3.6: only aclrtFree releases aclrtMalloc memory; a borrowed
    DeviceBuffer's free() and collection leave it allocated for raw.aclrtFree."""
    ptr = raw.aclrtMalloc(4096, MallocPolicy.HUGE_FIRST)
    buf = DeviceBuffer.from_ptr(ptr, 4096)
    buf.copy_from(_pattern(4096))
    buf.free()
    DeviceBuffer.from_ptr(ptr, 4096)  # collected at once
    gc.collect()
    assert _device_bytes(ptr, 4096) == _pattern(4096)
    raw.aclrtFree(ptr)  # still the owner's to free: no error


def test_from_ptr_owned_releases_acl_malloc_memory_spec_3_6(dev):
    """docs/runtime-model.md §3.6: with owned=True the wrapper's free() is the aclrtFree."""
    before = free_pools()
    ptr = raw.aclrtMalloc(3 * MiB, MallocPolicy.HUGE_FIRST)
    assert free_pools() != before
    DeviceBuffer.from_ptr(ptr, 3 * MiB, owned=True).free()
    assert free_pools() == before


def test_from_ptr_over_malloc_host_is_not_freed_by_the_wrapper_spec_3_7(dev):
    """docs/runtime-model.md §3.7: only aclrtFreeHost releases aclrtMallocHost memory; views
    of a borrowed HostBuffer outlive the wrapper, and raw.aclrtFreeHost still works."""
    ptr = raw.aclrtMallocHost(256)
    host = HostBuffer.from_ptr(ptr, 256)
    view = memoryview(host)
    view[:] = _pattern(256)
    host.free()
    del host
    gc.collect()
    assert bytes(view) == _pattern(256)
    with acl_mem.Device(0).malloc(256) as buf:
        buf.copy_from(view)
        assert buf.read() == _pattern(256)
    view.release()
    raw.aclrtFreeHost(ptr)


# -- host exports are the bytes the runtime copies -------------------------------------------------


def test_memoryview_writes_are_seen_by_a_device_copy_spec_3_10(dev):
    """docs/runtime-model.md §3.10: H2D from page-locked memory copies what a memoryview wrote."""
    with dev.malloc_host(1000) as host, dev.malloc(1000) as buf:
        with memoryview(host) as view:
            view[:] = _pattern(1000)
        buf.copy_from(host)
        assert buf.read() == _pattern(1000)
        assert _device_bytes(buf.ptr, 1000) == _pattern(1000)


def test_numpy_views_see_a_device_to_host_copy_spec_3_10(dev):
    """docs/runtime-model.md §3.10: D2H into page-locked memory lands in its numpy views."""
    data = np.arange(256, dtype=np.float32)
    with dev.malloc(data.nbytes) as buf, dev.malloc_host(data.nbytes) as host:
        buf.copy_from(data)
        floats = np.frombuffer(host, np.float32)
        raw_bytes = np.asarray(host)
        buf.copy_to(host)
        assert np.array_equal(floats, data)
        assert raw_bytes.tobytes() == data.tobytes()
        del floats, raw_bytes


def test_dlpack_view_round_trip_through_the_device_spec_3_10(dev):
    """docs/runtime-model.md §3.10: a DLPack view of page-locked memory reads and writes the
    bytes H2D / D2H copies move."""
    with dev.malloc_host(512) as host, dev.malloc(512) as buf:
        tensor = np.from_dlpack(host)
        tensor[:] = np.frombuffer(_pattern(512), np.uint8)
        buf.copy_from(host)
        assert buf.read() == _pattern(512)
        buf.memset(0x66)
        buf.copy_to(host)
        assert tensor.tobytes() == b"\x66" * 512
        del tensor


def test_async_copy_into_pinned_memory_is_in_the_view_after_synchronize_spec_3_4(dev):
    """docs/runtime-model.md §3.4 / §3.10: a queued D2H into page-locked memory is in its
    memoryview once the stream is synchronised."""
    with dev.stream() as stream, dev.malloc(4096) as buf, dev.malloc_host(4096) as host:
        buf.copy_from(_pattern(4096))
        buf.copy_to_async(host, stream=stream)
        stream.synchronize()
        with memoryview(host) as view:
            assert bytes(view) == _pattern(4096)
