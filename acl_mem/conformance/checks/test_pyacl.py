"""Conformance: acl_mem.pyacl, pyACL's calls over each backend (docs/pyacl.md).

What a pyACL program sees must not depend on the backend: the return shapes, the codes
of the runtime passed back as ``ret``, copies through ``bytes_to_ptr`` memory, and
``ptr_to_bytes`` / ``ptr_to_numpy`` refusing device memory instead of crashing.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from acl_mem import pyacl as acl

from .helpers import has_dvpp_memory, raise_from_fresh_thread

ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEM_MALLOC_NORMAL_ONLY = 2
ACL_MEMCPY_HOST_TO_HOST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
ACL_MEMCPY_DEVICE_TO_DEVICE = 3
ACL_HBM_MEM = 1
NPY_UINT8 = 2
NPY_FLOAT32 = 11


def test_pyacl_malloc_free_return_shapes(dev):
    """docs/runtime-model.md §3.5: ``ptr, ret = acl.rt.malloc(size, policy)`` gives an int
    pointer and 0; size 0 gives ``(0, 100000)``; ``acl.rt.free`` returns 0."""
    ptr, ret = acl.rt.malloc(4096, ACL_MEM_MALLOC_HUGE_FIRST)
    assert (type(ptr), ret) == (int, 0) and ptr != 0
    assert acl.rt.malloc(0, ACL_MEM_MALLOC_HUGE_FIRST) == (0, 100000)
    assert acl.rt.free(ptr) == 0
    assert acl.rt.free(0) == 100000


def test_pyacl_get_mem_info_counts_an_allocation(dev):
    """docs/runtime-model.md §3.12: ``free, total, ret = acl.rt.get_mem_info(attr)``; a
    4 MiB allocation takes at least 4 MiB from the free bytes; an unknown attribute gives
    ``(0, 0, 107016)``."""
    free_before, total, ret = acl.rt.get_mem_info(ACL_HBM_MEM)
    assert ret == 0 and 0 < free_before <= total
    ptr, ret = acl.rt.malloc(4 << 20, ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    free_after, _, ret = acl.rt.get_mem_info(ACL_HBM_MEM)
    assert ret == 0 and free_before - free_after >= 4 << 20
    assert acl.rt.free(ptr) == 0
    assert acl.rt.get_mem_info(99) == (0, 0, 107016)


def test_pyacl_get_device_without_a_device(backend):
    """docs/runtime-model.md §3.2: in a thread that set no device, ``acl.rt.get_device()``
    and ``acl.rt.create_stream()`` return ``(0, 107002)``; get_run_mode is ACL_HOST."""
    assert raise_from_fresh_thread(acl.rt.get_device) == (0, 107002)
    assert raise_from_fresh_thread(acl.rt.create_stream) == (0, 107002)
    assert raise_from_fresh_thread(acl.rt.get_run_mode) == (1, 0)


def test_pyacl_round_trip_through_bytes_and_pinned_memory(dev):
    """docs/runtime-model.md §3.10: H2D from ``bytes_to_ptr`` memory, D2D, D2H into bytes (seen
    through ``np.frombuffer``) and into ``malloc_host`` memory read with ``ptr_to_bytes`` and
    ``ptr_to_numpy``."""
    data = np.random.default_rng(1).integers(0, 255, 100_000, dtype=np.uint8)
    size = data.nbytes
    src = data.tobytes()
    a, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    b, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_NORMAL_ONLY)
    assert ret == 0
    host, ret = acl.rt.malloc_host(size)
    assert ret == 0
    assert acl.rt.memcpy(a, size, acl.util.bytes_to_ptr(src), size,
                         ACL_MEMCPY_HOST_TO_DEVICE) == 0
    assert acl.rt.memcpy(b, size, a, size, ACL_MEMCPY_DEVICE_TO_DEVICE) == 0
    out = bytes(size)
    assert acl.rt.memcpy(acl.util.bytes_to_ptr(out), size, b, size,
                         ACL_MEMCPY_DEVICE_TO_HOST) == 0
    assert np.array_equal(np.frombuffer(out, dtype=np.uint8), data)
    assert acl.rt.memcpy(host, size, b, size, ACL_MEMCPY_DEVICE_TO_HOST) == 0
    assert acl.util.ptr_to_bytes(host, size) == src
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Warning)  # pyACL's deprecation notice
        view = acl.util.ptr_to_numpy(host, (size,), NPY_UINT8)
    assert np.array_equal(view, data)
    del view
    assert [acl.rt.free(a), acl.rt.free(b), acl.rt.free_host(host)] == [0, 0, 0]


def test_pyacl_memset_of_pinned_host_memory(dev):
    """docs/runtime-model.md §3.11: ``acl.rt.memset`` on ``acl.rt.malloc_host`` memory, as
    Huawei's pyACL memory sample does, then a host-to-host copy into bytes."""
    host, ret = acl.rt.malloc_host(4096)
    assert ret == 0
    assert acl.rt.memset(host, 4096, 7, 4096) == 0
    out = bytes(4096)
    assert acl.rt.memcpy(acl.util.bytes_to_ptr(out), 4096, host, 4096,
                         ACL_MEMCPY_HOST_TO_HOST) == 0
    assert out == b"\7" * 4096
    assert acl.rt.free_host(host) == 0


def test_pyacl_reading_device_memory_raises_value_error(dev):
    """docs/runtime-model.md §4.9: the host cannot read device memory in EP mode;
    ``ptr_to_bytes`` and ``ptr_to_numpy`` raise ValueError instead of crashing, for device
    and DVPP memory alike."""
    ptr, ret = acl.rt.malloc(4096, ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    dvpp, ret = acl.media.dvpp_malloc(4096)
    # A SoC without DVPP memory (Ascend950, docs/runtime-model.md §3.8) answers 207000.
    assert ret == (0 if has_dvpp_memory() else 207000)
    for address in (ptr, dvpp) if dvpp else (ptr,):
        with pytest.raises(ValueError):
            acl.util.ptr_to_bytes(address, 16)
        with pytest.raises(ValueError), warnings.catch_warnings():
            warnings.simplefilter("ignore", Warning)
            acl.util.ptr_to_numpy(address, (16,), NPY_UINT8)
    assert acl.rt.free(ptr) == 0
    assert not dvpp or acl.media.dvpp_free(dvpp) == 0


def test_pyacl_streams_memcpy_async(dev):
    """docs/runtime-model.md §3.4: memcpy_async and memset_async on a stream, then
    synchronize_stream: the bytes are there; destroy_stream returns 0."""
    stream, ret = acl.rt.create_stream()
    assert ret == 0 and stream != 0
    size = 1 << 16
    staging, ret = acl.rt.malloc_host(size)
    assert ret == 0
    result, ret = acl.rt.malloc_host(size)
    assert ret == 0
    ptr, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    assert acl.rt.memset(staging, size, 0x3C, size) == 0
    assert acl.rt.memcpy_async(ptr, size, staging, size, ACL_MEMCPY_HOST_TO_DEVICE,
                               stream) == 0
    assert acl.rt.memset_async(ptr, size, 0x11, 16, stream) == 0
    assert acl.rt.memcpy_async(result, size, ptr, size, ACL_MEMCPY_DEVICE_TO_HOST,
                               stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert acl.util.ptr_to_bytes(result, size) == b"\x11" * 16 + b"\x3c" * (size - 16)
    assert acl.rt.synchronize_device() == 0
    assert [acl.rt.destroy_stream(stream), acl.rt.free(ptr), acl.rt.free_host(staging),
            acl.rt.free_host(result)] == [0, 0, 0, 0]


def test_pyacl_dvpp_malloc_both_apis(dev):
    """docs/runtime-model.md §3.8, §3.9: ``acl.media.dvpp_malloc(size)`` and
    ``acl.himpi.dvpp_malloc(dev_id, size)`` give 128-byte aligned memory that copies in and
    out; their frees return 0. A SoC without DVPP memory (Ascend950) answers ``(0, 207000)``."""
    payload = bytes(range(256)) * 64
    size = len(payload)
    for allocate, release in ((acl.media.dvpp_malloc, acl.media.dvpp_free),
                              (lambda n: acl.himpi.dvpp_malloc(0, n), acl.himpi.dvpp_free)):
        ptr, ret = allocate(size)
        if not has_dvpp_memory():
            assert (ptr, ret) == (0, 207000)
            continue
        assert ret == 0 and ptr % 128 == 0
        assert acl.rt.memcpy(ptr, size, acl.util.bytes_to_ptr(payload), size,
                             ACL_MEMCPY_HOST_TO_DEVICE) == 0
        back = bytes(size)
        assert acl.rt.memcpy(acl.util.bytes_to_ptr(back), size, ptr, size,
                             ACL_MEMCPY_DEVICE_TO_HOST) == 0
        assert back == payload
        assert release(ptr) == 0


def test_pyacl_device_reference_counting(backend):
    """docs/runtime-model.md §3.2: set_device twice needs reset_device twice; a bad device
    id gives 107001; reset of a device never set gives 507007."""
    assert acl.rt.set_device(0) == 0
    assert acl.rt.set_device(0) == 0
    assert acl.rt.get_device() == (0, 0)
    count, ret = acl.rt.get_device_count()
    assert ret == 0 and count >= 1
    assert acl.rt.set_device(count) == 107001
    assert acl.rt.reset_device(0) == 0
    assert acl.rt.reset_device(0) == 0
    assert raise_from_fresh_thread(lambda: acl.rt.reset_device(0)) == 507007
