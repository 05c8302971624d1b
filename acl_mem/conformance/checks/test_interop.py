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
import pytest

import acl_mem
from acl_mem import DeviceBuffer, HostBuffer, MallocPolicy, MemcpyKind, raw

from .helpers import address_of, free_pools, raise_from_fresh_thread

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


# -- typed device arrays ---------------------------------------------------------------------------

ROUND_TRIPS = [
    ("float32", (1024,)), ("float64", (3, 5)), ("float16", (2, 3, 4)), ("int8", (7,)),
    ("uint8", (255,)), ("int32", (4, 4)), ("int64", (1, 9)), ("uint16", (2, 2, 2, 2)),
    ("complex64", (6,)), ("bool", (17,)), (">i4", (5,)), ("S3", (4,)), ("float32", ()),
    ("float32", (0,)), ("int16", (3, 0)),
]


@pytest.mark.parametrize(("dtype", "shape"), ROUND_TRIPS,
                         ids=[f"{d}-{'x'.join(map(str, s)) or 'scalar'}" for d, s in ROUND_TRIPS])
def test_to_device_copy_to_host_round_trip_spec_3_10(dev, dtype, shape):
    """docs/runtime-model.md §3.5 / §3.10: to_device is aclrtMalloc + H2D, copy_to_host D2H;
    the round trip gives the same shape, dtype and bytes (zero-size arrays allocate
    nothing and copy nothing)."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    x = np.frombuffer(_pattern(n), dtype=dt).reshape(shape).copy()
    d = acl_mem.arrays.to_device(dev, x)
    y = d.copy_to_host()
    assert (y.shape, y.dtype) == (x.shape, x.dtype)
    assert y.tobytes() == x.tobytes()
    if n:
        assert d.buffer is not None
        assert _device_bytes(d.buffer.ptr, n) == x.tobytes()  # the device holds the bytes
    else:
        assert d.buffer is None
    d.free()


def test_empty_is_one_malloc_of_its_bytes_spec_3_5(dev):
    """docs/runtime-model.md §3.5: empty() takes ALIGN_UP(nbytes,32)+padding like aclrtMalloc,
    and free() gives it back."""
    before = free_pools()
    d = acl_mem.arrays.empty(dev, (3, 1024, 1024), np.float32)
    assert d.buffer is not None
    assert d.buffer.api is acl_mem.AllocApi.MALLOC
    assert d.buffer.size == d.nbytes == 12 * MiB
    assert free_pools() != before
    d.free()
    assert free_pools() == before


def test_async_round_trip_after_synchronize_spec_3_4(dev):
    """docs/runtime-model.md §3.4 / §3.10: with stream=, both copies are queued on the stream
    and the data is there after synchronise, into pageable and page-locked memory."""
    x = np.arange(4096, dtype=np.int32).reshape(64, 64)
    with dev.stream() as stream, dev.malloc_host(x.nbytes) as host:
        d = acl_mem.arrays.to_device(dev, x, stream=stream)
        pageable = d.copy_to_host(stream=stream)
        pinned = np.frombuffer(host, np.int32).reshape(64, 64)
        d.copy_to_host(pinned, stream=stream)
        stream.synchronize()
        assert np.array_equal(pageable, x)
        assert np.array_equal(pinned, x)
        del pinned
        d.free()


def test_copy_from_host_overwrites_in_place_spec_3_10(dev):
    """docs/runtime-model.md §3.10: copy_from_host is one H2D into the array's memory."""
    with acl_mem.arrays.empty(dev, (8, 8), np.float64) as d:
        address = d.buffer.ptr if d.buffer is not None else 0
        d.copy_from_host(np.eye(8))
        d.copy_from_host(np.full((8, 8), 2.0))
        assert d.buffer is not None and d.buffer.ptr == address
        assert np.array_equal(d.copy_to_host(), np.full((8, 8), 2.0))


def test_device_methods_round_trip_in_a_thread_with_no_device_spec_3_2(backend):
    """docs/runtime-model.md §3.2, §3.10: ``Device(0).to_device(x).copy_to_host()`` needs no
    set-up (the device becomes current) and gives back x; ``Device.empty`` is uninitialised
    memory of the right shape. The worker resets the device it made current."""
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)

    def body() -> tuple[np.ndarray, tuple[int, ...], str, int]:
        device = acl_mem.Device(0)
        try:
            d = device.to_device(x)
            e = device.empty((5, 2), np.float64)
            return d.copy_to_host(), e.shape, str(e.dtype), e.nbytes
        finally:
            device.reset()

    y, shape, dtype, nbytes = raise_from_fresh_thread(body)
    assert y.dtype == x.dtype and y.shape == x.shape and np.array_equal(x, y)
    assert (shape, dtype, nbytes) == ((5, 2), "float64", 80)
