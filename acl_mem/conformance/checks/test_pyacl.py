"""Conformance: acl_mem.pyacl, pyACL's calls over each backend (docs/pyacl.md).

What a pyACL program sees must not depend on the backend: the return shapes, the codes
of the runtime passed back as ``ret``, copies through ``bytes_to_ptr`` memory,
``ptr_to_bytes`` / ``ptr_to_numpy`` refusing device memory instead of crashing (EP mode) or
reading it (RC mode, docs/runtime-model.md §3.16), and contexts and events (the outputs on
failure, streams ordered by an event).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

from acl_mem import pyacl as acl
from acl_mem import raw

from .helpers import (
    ACL_DEVICE,
    ACL_HOST,
    has_dvpp_memory,
    has_mpi_dvpp,
    raise_from_fresh_thread,
    rc_mode,
    since,
)

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
    """docs/runtime-model.md §3.2 / §3.16: in a thread that set no device, ``acl.rt.get_device()``
    and ``acl.rt.create_stream()`` return ``(0, 107002)``; get_run_mode needs no device and
    gives the runtime's run mode (ACL_HOST in EP mode, ACL_DEVICE in RC mode) with 0."""
    assert raise_from_fresh_thread(acl.rt.get_device) == (0, 107002)
    assert raise_from_fresh_thread(acl.rt.create_stream) == (0, 107002)
    mode = raw.aclrtGetRunMode()
    assert mode in (ACL_DEVICE, ACL_HOST)
    assert raise_from_fresh_thread(acl.rt.get_run_mode) == (mode, 0)


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


def test_pyacl_reading_device_memory_follows_the_run_mode(dev, backend):
    """docs/runtime-model.md §4.9 / §3.16: the host cannot read device memory in EP mode;
    ``ptr_to_bytes`` and ``ptr_to_numpy`` raise ValueError instead of crashing, for device
    and DVPP memory alike. In RC mode the control CPU reads device memory itself: both give
    the device's bytes (docs/pyacl.md, "Reading memory: EP and RC mode")."""
    rc = rc_mode()
    ptr, ret = acl.rt.malloc(4096, ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    dvpp, ret = acl.media.dvpp_malloc(4096)
    # A SoC without DVPP memory (Ascend950, docs/runtime-model.md §3.8) answers 207000.
    assert ret == (0 if has_dvpp_memory() else 207000)
    for value, address in enumerate((ptr, dvpp) if dvpp else (ptr,), start=0x5A):
        assert acl.rt.memset(address, 4096, value, 4096) == 0
        if rc:
            assert acl.util.ptr_to_bytes(address, 16) == bytes([value]) * 16
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Warning)
                view = acl.util.ptr_to_numpy(address, (16,), NPY_UINT8)
            assert view.tobytes() == bytes([value]) * 16
            del view
        else:
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
    out; their frees return 0. A SoC without DVPP memory (Ascend950) answers ``(0, 207000)``
    to both, Ascend310 (no DVPP V2, §3.9) to acl.himpi.dvpp_malloc."""
    payload = bytes(range(256)) * 64
    size = len(payload)
    for allocate, release, supported in (
            (acl.media.dvpp_malloc, acl.media.dvpp_free, has_dvpp_memory()),
            (lambda n: acl.himpi.dvpp_malloc(0, n), acl.himpi.dvpp_free, has_mpi_dvpp())):
        ptr, ret = allocate(size)
        if not supported:
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


# -- contexts and events (docs/runtime-model.md §3.3, §3.15) ---------------------------------------

ACL_EVENT_SYNC = 0x1
ACL_EVENT_TIME_LINE = 0x8
ACL_EVENT_DEVICE_USE_ONLY = 0x10
#: aclrtEventRecordedStatus (query_event_status) and aclrtEventStatus (query_event).
RECORDED_NOT_READY, RECORDED_COMPLETE = 0, 1
STATUS_COMPLETE = 0


def test_pyacl_context_return_shapes(dev, cann):
    """docs/runtime-model.md §3.3: ``context, ret = acl.rt.create_context(device_id)`` gives a
    new int handle, current at once; ``get_context`` / ``set_context`` switch between it and
    the default context; failures are ``(0, code)`` or the code: a bad device 107001, NULL
    100000, the default context or a dead one 107002 to destroy_context, a dead one 107000 to
    set_context (8.5.0 takes it)."""
    default, ret = acl.rt.get_context()
    assert (type(default), ret) == (int, 0) and default != 0
    context, ret = acl.rt.create_context(0)
    assert (type(context), ret) == (int, 0) and context not in (0, default)
    assert acl.rt.get_context() == (context, 0)
    assert acl.rt.set_context(default) == 0
    assert acl.rt.get_context() == (default, 0)
    count, ret = acl.rt.get_device_count()
    assert ret == 0
    assert acl.rt.create_context(count) == (0, 107001)
    assert [acl.rt.destroy_context(0), acl.rt.set_context(0)] == [100000, 100000]
    assert acl.rt.destroy_context(default) == 107002
    assert acl.rt.destroy_context(context) == 0
    assert acl.rt.destroy_context(context) == 107002
    assert acl.rt.set_context(context) == (107000 if since(cann, "9.0.1") else 0)
    assert acl.rt.set_context(default) == 0
    assert acl.rt.get_context() == (default, 0)


def test_pyacl_destroying_the_current_context_leaves_none(dev, cann):
    """docs/runtime-model.md §3.3: after ``destroy_context`` of the thread's current context
    the thread has no context: ``get_context()`` is ``(0, 107002)`` (8.5.0: ``(0, 0)``) and a
    new thread never has one; ``set_device`` brings back the default context."""
    default, _ = acl.rt.get_context()
    context, ret = acl.rt.create_context(0)
    assert ret == 0
    assert acl.rt.destroy_context(context) == 0
    no_context = (0, 107002 if since(cann, "9.0.1") else 0)
    assert acl.rt.get_context() == no_context
    assert raise_from_fresh_thread(acl.rt.get_context) == no_context
    assert acl.rt.set_device(0) == 0
    assert acl.rt.get_context() == (default, 0)
    assert acl.rt.reset_device(0) == 0


def test_pyacl_streams_belong_to_their_context(dev):
    """docs/runtime-model.md §3.3: a stream created under one context, used while another is
    current, gives 107003 (synchronize_stream, record_event); after ``set_context`` back it
    works; destroying the context takes its streams with it."""
    first, ret = acl.rt.create_context(0)
    assert ret == 0
    stream, ret = acl.rt.create_stream()
    assert ret == 0
    second, ret = acl.rt.create_context(0)
    assert ret == 0
    event, ret = acl.rt.create_event()
    assert ret == 0
    assert acl.rt.synchronize_stream(stream) == 107003
    assert acl.rt.record_event(event, stream) == 107003
    assert acl.rt.set_context(first) == 0
    assert acl.rt.record_event(event, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert [acl.rt.destroy_event(event), acl.rt.destroy_context(second),
            acl.rt.destroy_context(first)] == [0, 0, 0]


def test_pyacl_event_orders_two_streams(dev):
    """docs/runtime-model.md §3.15: a copy on one stream, ``record_event`` there,
    ``stream_wait_event`` on a second stream, then a copy out on the second: the second copy
    sees the first one's bytes after ``synchronize_stream`` of the second stream alone."""
    producer, ret = acl.rt.create_stream()
    assert ret == 0
    consumer, ret = acl.rt.create_stream()
    assert ret == 0
    data = np.random.default_rng(5).integers(0, 255, 1 << 20, dtype=np.uint8).tobytes()
    size = len(data)
    src, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    dst, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    out, ret = acl.rt.malloc_host(size)
    assert ret == 0
    assert acl.rt.memcpy(src, size, acl.util.bytes_to_ptr(data), size,
                         ACL_MEMCPY_HOST_TO_DEVICE) == 0
    event, ret = acl.rt.create_event_with_flag(ACL_EVENT_SYNC)
    assert ret == 0 and event != 0
    assert acl.rt.memcpy_async(dst, size, src, size, ACL_MEMCPY_DEVICE_TO_DEVICE, producer) == 0
    assert acl.rt.record_event(event, producer) == 0
    assert acl.rt.stream_wait_event(consumer, event) == 0
    assert acl.rt.memcpy_async(out, size, dst, size, ACL_MEMCPY_DEVICE_TO_HOST, consumer) == 0
    assert acl.rt.synchronize_stream(consumer) == 0
    assert acl.util.ptr_to_bytes(out, size) == data
    assert acl.rt.query_event_status(event) == (RECORDED_COMPLETE, 0)
    assert [acl.rt.destroy_event(event), acl.rt.free(src), acl.rt.free(dst),
            acl.rt.free_host(out), acl.rt.destroy_stream(producer),
            acl.rt.destroy_stream(consumer)] == [0] * 6


def test_pyacl_event_status_and_elapsed_time(dev):
    """docs/runtime-model.md §3.15: ``status, ret = acl.rt.query_event_status(event)`` is
    NOT_READY (0) before any record, COMPLETE (1) after ``synchronize_event``, NOT_READY again
    after ``reset_event``; the deprecated ``query_event`` reports COMPLETE as 0; a polling
    loop ends; ``ms, ret = acl.rt.event_elapsed_time(start, end)`` is a non-negative C float."""
    start, ret = acl.rt.create_event()
    assert (type(start), ret) == (int, 0) and start != 0
    end, ret = acl.rt.create_event()
    assert ret == 0
    assert acl.rt.query_event_status(start) == (RECORDED_NOT_READY, 0)
    assert acl.rt.query_event(start) == (STATUS_COMPLETE, 0)
    assert acl.rt.record_event(start, 0) == 0
    assert acl.rt.record_event(end, 0) == 0
    assert acl.rt.synchronize_event(end) == 0
    assert acl.rt.query_event_status(end) == (RECORDED_COMPLETE, 0)
    assert acl.rt.query_event(end) == (STATUS_COMPLETE, 0)
    ms, ret = acl.rt.event_elapsed_time(start, end)
    assert ret == 0 and type(ms) is float and ms >= 0.0 and ms == float(np.float32(ms))
    assert acl.rt.record_event(end, 0) == 0
    for _ in range(1000):
        status, ret = acl.rt.query_event_status(end)
        assert ret == 0 and status in (RECORDED_NOT_READY, RECORDED_COMPLETE)
        if status == RECORDED_COMPLETE:
            break
        time.sleep(0.001)
    else:
        raise AssertionError("query_event_status never reported COMPLETE")
    synced, ret = acl.rt.create_event_with_flag(ACL_EVENT_SYNC)
    assert ret == 0
    assert acl.rt.record_event(synced, 0) == 0
    assert acl.rt.reset_event(synced, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    assert acl.rt.query_event_status(synced) == (RECORDED_NOT_READY, 0)
    assert [acl.rt.destroy_event(e) for e in (start, end, synced)] == [0, 0, 0]


def test_pyacl_event_failures_are_zero_and_a_code(dev):
    """docs/runtime-model.md §3.15: on failure the outputs are 0 (0.0 for the milliseconds):
    flag 0 or DEVICE_USE_ONLY alone 107000, a wait on a TIME_LINE-only event 207000, on a
    never-recorded create_event event 107000, reset_event and query_event of an ExWithFlag
    event 207000, elapsed time of a never-recorded event 507000, NULL handles 100000."""
    assert acl.rt.create_event_with_flag(0) == (0, 107000)
    assert acl.rt.create_event_ex_with_flag(ACL_EVENT_DEVICE_USE_ONLY) == (0, 107000)
    event, ret = acl.rt.create_event()
    assert ret == 0
    timed, ret = acl.rt.create_event_with_flag(ACL_EVENT_TIME_LINE)
    assert ret == 0
    reusable, ret = acl.rt.create_event_ex_with_flag(ACL_EVENT_SYNC)
    assert ret == 0
    assert acl.rt.query_event_status(reusable) == (RECORDED_COMPLETE, 0)
    assert acl.rt.stream_wait_event(0, reusable) == 0           # never recorded: no wait
    assert acl.rt.stream_wait_event(0, timed) == 207000
    assert acl.rt.stream_wait_event(0, event) == 107000
    assert acl.rt.reset_event(reusable, 0) == 207000
    assert acl.rt.query_event(reusable) == (0, 207000)
    ms, ret = acl.rt.event_elapsed_time(event, timed)
    assert (type(ms), ms, ret) == (float, 0.0, 507000)
    assert [acl.rt.record_event(0, 0), acl.rt.reset_event(0, 0), acl.rt.stream_wait_event(0, 0),
            acl.rt.synchronize_event(0), acl.rt.destroy_event(0)] == [100000] * 5
    assert [acl.rt.query_event_status(0), acl.rt.query_event(0)] == [(0, 100000)] * 2
    assert acl.rt.event_elapsed_time(0, 0) == (0.0, 100000)
    assert [acl.rt.destroy_event(e) for e in (event, timed, reusable)] == [0, 0, 0]


def test_pyacl_events_need_a_context(dev):
    """docs/runtime-model.md §3.15: creating an event in a thread without a context gives
    ``(0, 107002)``; ``synchronize_event`` there needs none and returns 0."""
    event, ret = acl.rt.create_event()
    assert ret == 0
    assert raise_from_fresh_thread(acl.rt.create_event) == (0, 107002)
    assert raise_from_fresh_thread(lambda: acl.rt.create_event_ex_with_flag(ACL_EVENT_SYNC)) \
        == (0, 107002)
    assert raise_from_fresh_thread(lambda: acl.rt.synchronize_event(event)) == 0
    assert acl.rt.destroy_event(event) == 0


@pytest.mark.cann("9.1.0")  # 8.5.0 and 9.0.1 use a destroyed event unchecked (undefined)
def test_pyacl_destroyed_event_is_107017(dev):
    """docs/runtime-model.md §3.15: a destroyed event handle gives 107017 to every event
    call, with the outputs 0 (0.0)."""
    event, ret = acl.rt.create_event()
    assert ret == 0
    assert acl.rt.destroy_event(event) == 0
    assert [acl.rt.destroy_event(event), acl.rt.record_event(event, 0),
            acl.rt.synchronize_event(event)] == [107017] * 3
    assert acl.rt.query_event_status(event) == (0, 107017)
    assert acl.rt.event_elapsed_time(event, event) == (0.0, 107017)
