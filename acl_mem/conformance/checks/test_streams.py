"""Conformance: streams (docs/runtime-model.md §3.4), aclrtMemcpyAsync (§3.10) and aclrtMemsetAsync
(§3.11).

Every expected code, count and byte is written out by hand from the runtime model. The check
order of aclrtMemcpyAsync on 9.1.0 is: count 0 (success) -> NULL (100000) -> kind (100000)
-> stream handle (107017) -> count > destMax (107000) -> context (107002) -> kind correction
by location (107000 / 207000 for H2H) -> dst == src (success). 8.5.0 and 9.0.1 refuse count 0
with count > destMax (107000), look the context up after the locations, and do not validate
stream handles at all: checks of a destroyed handle hold on 9.1.0, and on the fake
(docs/fidelity.md row 66) for the older releases (docs/runtime-model.md §0.1, §3.4).

Locations in the correction table: HOST = pinned memory from aclrtMallocHost,
DEVICE = aclrtMalloc memory, UNREG = pageable host memory (a numpy array).

The host-to-host refusal (207000) is EP mode's: in RC mode (aclrtGetRunMode ACL_DEVICE, a
program on a board's control CPU, docs/runtime-model.md §3.16) host kinds run as
device-to-device and the same copies are accepted, so those checks ask the runtime its mode.

Checks that take ``backend`` / ``dev`` run on every backend; checks that need the
fake's deferred execution or its hazard reports are marked ``fake_only``: on hardware
the moment queued work lands is up to the device, so stale data and races cannot be
shown deterministically there.
"""

from __future__ import annotations

import ctypes
import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import acl_mem
from acl_mem import raw
from acl_mem.enums import MemcpyKind
from acl_mem.errors import (
    AclError,
    ContextNullError,
    DestroyedStreamError,
    FeatureNotSupportError,
    HazardError,
    HazardWarning,
    InvalidHandleError,
    InvalidParamError,
    NoStreamResourceError,
    RtParamInvalidError,
    StreamContextError,
)

from .helpers import (
    STALE_HANDLE_BEFORE_9_1,
    in_fresh_thread,
    need_two_devices,
    raise_from_fresh_thread,
    rc_mode,
    since,
)

H2H = MemcpyKind.HOST_TO_HOST
H2D = MemcpyKind.HOST_TO_DEVICE
D2H = MemcpyKind.DEVICE_TO_HOST
D2D = MemcpyKind.DEVICE_TO_DEVICE
DEFAULT = MemcpyKind.DEFAULT

OK = 0
N = 64


# -- helpers ---------------------------------------------------------------------------------------
def pattern(n: int, seed: int = 1) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(n))


def dev_bytes(ptr: int, n: int) -> bytes:
    """Device bytes read back with a synchronous D2H copy into pageable memory."""
    out = np.zeros(n, dtype=np.uint8)
    raw.aclrtMemcpy(out.ctypes.data, n, ptr, n, D2H)
    return out.tobytes()


def upload(ptr: int, data: bytes) -> None:
    """Synchronous H2D copy of ``data`` to device memory."""
    src = np.frombuffer(bytearray(data), dtype=np.uint8)
    raw.aclrtMemcpy(ptr, len(data), src.ctypes.data, len(data), H2D)


def put(ptr: int, data: bytes) -> None:
    """Write pinned host memory directly (no runtime call)."""
    ctypes.memmove(ptr, data, len(data))


def get(ptr: int, n: int) -> bytes:
    """Read host memory (pinned or pageable) directly (no runtime call)."""
    return ctypes.string_at(ptr, n)


def device_with(data: bytes) -> int:
    ptr = raw.aclrtMalloc(len(data))
    upload(ptr, data)
    return ptr


def pinned_with(data: bytes) -> int:
    ptr = raw.aclrtMallocHost(len(data))
    put(ptr, data)
    return ptr


def dead_stream() -> int:
    """The handle of a stream created and destroyed in the current context."""
    stream = raw.aclrtCreateStream()
    raw.aclrtDestroyStream(stream)
    return stream


def max_streams(soc: str) -> int:
    """Streams per device, the default stream included (docs/runtime-model.md §3.4)."""
    if soc.startswith("Ascend310P"):  # Atlas inference
        return 1024
    if soc.startswith("Ascend310B"):  # Atlas 200I/500 A2
        return 512
    if soc == "Ascend310":
        # Atlas 200 DK and the other Atlas 200/300/500 inference products: §3.4 does not list
        # them. The open-source runtime gives this chip (CHIP_MINI) the stream macros of the
        # Atlas inference chip (CHIP_DC, Ascend310P: maxAllocStreamNum 992, baseAicpuStreamId
        # 1024; src/runtime/feature/platform/{mini,dc}/dev_info_proc_func.cc), so it is held
        # to the Atlas inference limit, as the fake's atlas-200dk profile is.
        return 1024
    return 1984  # Ascend 950, Atlas A2 (910B), Atlas A3 (910_93)


class Endpoint:
    """One side of a copy: pinned host, device or pageable host memory holding ``data``."""

    def __init__(self, where: str, data: bytes) -> None:
        self.where = where
        self.keep: Any = None
        if where == "device":
            self.ptr = device_with(data)
        elif where == "host":
            self.ptr = pinned_with(data)
        else:
            self.keep = np.frombuffer(bytearray(data), dtype=np.uint8)
            self.ptr = self.keep.ctypes.data

    def read(self, n: int) -> bytes:
        return dev_bytes(self.ptr, n) if self.where == "device" else get(self.ptr, n)

    def free(self) -> None:
        if self.where == "device":
            raw.aclrtFree(self.ptr)
        elif self.where == "host":
            raw.aclrtFreeHost(self.ptr)


# -- §3.4 aclrtCreateStream ------------------------------------------------------------------------
def test_spec_3_4_create_stream_null_output_is_100000(backend):
    """docs/runtime-model.md §3.4: aclrtCreateStream(NULL) -> 100000, also without a context (ACL
    layer)."""
    with acl_mem.Device(0):
        rc, _ = backend.aclrtCreateStream(null_outputs=1)
        assert rc == 100000
    rc2, _ = raise_from_fresh_thread(lambda: backend.aclrtCreateStream(null_outputs=1))
    assert rc2 == 100000


def test_spec_3_4_create_stream_without_context_is_107002(backend):
    """docs/runtime-model.md §3.4: aclrtCreateStream in a thread with no current context ->
    107002."""
    with pytest.raises(ContextNullError) as e:
        raise_from_fresh_thread(raw.aclrtCreateStream)
    assert e.value.code == 107002


def test_spec_3_4_created_streams_are_distinct_non_null_handles(dev):
    """docs/runtime-model.md §3.4: each aclrtCreateStream gives a new non-NULL handle."""
    handles = [raw.aclrtCreateStream() for _ in range(4)]
    try:
        assert 0 not in handles
        assert len(set(handles)) == 4
    finally:
        for handle in handles:
            raw.aclrtDestroyStream(handle)


def test_spec_3_4_stream_limit_per_device_includes_the_default_stream(dev):
    """docs/runtime-model.md §3.4: at most 1984 streams per device on A2 (512 / 1024 on 200I-500 A2
    / Atlas inference and Ascend310), the default stream included: the 1984th aclrtCreateStream
    -> 207008 ACL_ERROR_RT_NO_STREAM_RESOURCE ([HE]; §3.4 gives the limit, not the code)."""
    # Runs on hardware too: the expected limit follows the SoC the backend reports, so a
    # 310P or 310B host is held to its own documented number, not to the A2 one.
    limit = max_streams(raw.aclrtGetSocName())
    created: list[int] = []
    failure: NoStreamResourceError | None = None
    try:
        for _ in range(limit + 8):
            try:
                created.append(raw.aclrtCreateStream())
            except NoStreamResourceError as exc:
                failure = exc
                break
        assert failure is not None, f"created {len(created)} streams without an error"
        assert failure.code == 207008
        assert failure.name == "ACL_ERROR_RT_NO_STREAM_RESOURCE"
        assert len(created) == limit - 1
        assert len(set(created)) == limit - 1
        # Still full: a second attempt fails the same way.
        with pytest.raises(NoStreamResourceError) as e:
            raw.aclrtCreateStream()
        assert e.value.code == 207008
        # Destroying one frees one slot.
        raw.aclrtDestroyStream(created.pop())
        created.append(raw.aclrtCreateStream())
        with pytest.raises(NoStreamResourceError):
            raw.aclrtCreateStream()
        # The limit is per device: another device still has all of its streams.
        if raw.aclrtGetDeviceCount() >= 2:
            def on_device_1() -> None:
                raw.aclrtSetDevice(1)
                try:
                    raw.aclrtDestroyStream(raw.aclrtCreateStream())
                finally:
                    raw.aclrtResetDevice(1)

            raise_from_fresh_thread(on_device_1)
    finally:
        for handle in created:
            raw.aclrtDestroyStream(handle)
    # Every slot is back.
    raw.aclrtDestroyStream(raw.aclrtCreateStream())


# -- §3.4 aclrtDestroyStream -----------------------------------------------------------------------
def test_spec_3_4_destroy_stream_null_is_100000(dev):
    """docs/runtime-model.md §3.4: aclrtDestroyStream(NULL) -> 100000 (the default stream is not
    destroyable)."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtDestroyStream(0)
    assert e.value.code == 100000
    raw.aclrtSynchronizeStream(0)


def test_spec_3_4_destroy_stream_null_without_context_is_100000(backend):
    """docs/runtime-model.md §3.4 / §1.2: the ACL-layer NULL check runs before any context
    lookup."""
    with pytest.raises(InvalidParamError) as e:
        raise_from_fresh_thread(lambda: raw.aclrtDestroyStream(0))
    assert e.value.code == 100000


@pytest.mark.cann("9.1.0")
@pytest.mark.open_question(14)
def test_spec_3_4_double_destroy_is_107017(dev):
    """docs/runtime-model.md §3.4 / §8.14: destroying a stream twice -> 107017 (handle guard)."""
    stream = raw.aclrtCreateStream()
    raw.aclrtDestroyStream(stream)
    with pytest.raises(InvalidHandleError) as e:
        raw.aclrtDestroyStream(stream)
    assert e.value.code == 107017


@pytest.mark.cann("9.1.0")
def test_spec_3_4_stream_of_a_reset_context_is_107017(backend):
    """docs/runtime-model.md §3.4: a stream created in a context that was reset since is a dead
    handle: destroy, synchronize and async calls on it -> 107017."""
    raw.aclrtSetDevice(0)
    stream = raw.aclrtCreateStream()
    raw.aclrtResetDevice(0)
    raw.aclrtSetDevice(0)
    try:
        ptr = raw.aclrtMalloc(N)
        with pytest.raises(InvalidHandleError) as e1:
            raw.aclrtSynchronizeStream(stream)
        assert e1.value.code == 107017
        with pytest.raises(InvalidHandleError) as e2:
            raw.aclrtMemsetAsync(ptr, N, 1, N, stream)
        assert e2.value.code == 107017
        with pytest.raises(InvalidHandleError) as e3:
            raw.aclrtDestroyStream(stream)
        assert e3.value.code == 107017
        raw.aclrtFree(ptr)
    finally:
        raw.aclrtResetDevice(0)


@pytest.mark.parametrize("destroy", ["aclrtDestroyStream", "aclrtDestroyStreamForce"])
def test_spec_3_4_destroy_from_a_thread_on_another_device_is_107003(dev, destroy):
    """docs/runtime-model.md §3.4: the stream must belong to the current context: destroying a
    device-0 stream from a thread whose current device is 1 -> 107003 (force or not); the
    stream survives."""
    need_two_devices()
    stream = raw.aclrtCreateStream()

    def destroy_on_device_1() -> None:
        raw.aclrtSetDevice(1)
        try:
            getattr(raw, destroy)(stream)
        finally:
            raw.aclrtResetDevice(1)

    with pytest.raises(StreamContextError) as e:
        raise_from_fresh_thread(destroy_on_device_1)
    assert e.value.code == 107003
    raw.aclrtSynchronizeStream(stream)
    raw.aclrtDestroyStream(stream)


@pytest.mark.filterwarnings("ignore::acl_mem.errors.HazardWarning")
def test_spec_3_4_destroy_waits_for_queued_work(dev):
    """docs/runtime-model.md §3.4: aclrtDestroyStream waits for unfinished tasks: the queued copy
    and memset have run when it returns (no synchronize)."""
    host = pinned_with(pattern(N, 5))
    dst = device_with(bytes(N))
    stream = raw.aclrtCreateStream()
    raw.aclrtMemcpyAsync(dst, N, host, N, H2D, stream)
    raw.aclrtMemsetAsync(dst, N, 0x3C, 8, stream)
    raw.aclrtDestroyStream(stream)
    assert dev_bytes(dst, N) == b"\x3c" * 8 + pattern(N, 5)[8:]
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(host)


# -- §3.4 aclrtDestroyStreamForce ------------------------------------------------------------------
def test_spec_3_4_destroy_stream_force_null_is_100000(backend):
    """docs/runtime-model.md §3.4: aclrtDestroyStreamForce(NULL) -> 100000, before any context
    lookup (the ACL layer's NULL check)."""
    with pytest.raises(InvalidParamError) as e:
        raise_from_fresh_thread(lambda: raw.aclrtDestroyStreamForce(0))
    assert e.value.code == 100000


def test_spec_3_4_destroy_stream_force_ends_the_stream(dev):
    """docs/runtime-model.md §3.4: aclrtDestroyStreamForce destroys a stream, idle or with queued
    work; its slot is free again and the memory its work used can be freed."""
    idle = raw.aclrtCreateStream()
    raw.aclrtDestroyStreamForce(idle)
    host = pinned_with(pattern(N, 6))
    dst = device_with(bytes(N))
    busy = raw.aclrtCreateStream()
    raw.aclrtMemcpyAsync(dst, N, host, N, H2D, busy)
    raw.aclrtDestroyStreamForce(busy)
    raw.aclrtSynchronizeDevice()
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(host)


@pytest.mark.cann("9.1.0")
def test_spec_3_4_destroy_stream_force_twice_is_107017(dev):
    """docs/runtime-model.md §3.4: the handle is dead afterwards: a second force destroy, a plain
    destroy and a synchronize -> 107017."""
    stream = raw.aclrtCreateStream()
    raw.aclrtDestroyStreamForce(stream)
    for call in (raw.aclrtDestroyStreamForce, raw.aclrtDestroyStream, raw.aclrtSynchronizeStream):
        with pytest.raises(InvalidHandleError) as e:
            call(stream)
        assert e.value.code == 107017


@pytest.mark.fake_only("queued work and hazards are the fake's own model; hardware may have run "
                       "part of the work before recycling it")
def test_spec_3_4_fake_destroy_force_drops_queued_work(hazard_mode):
    """docs/runtime-model.md §3.4: the fake recycles queued work without running it and reports
    no hazard (the program asked for it); an event recorded behind the work completes, so
    nothing waits for ever."""
    hazard_mode("raise")
    stream, dst, src = _queued_h2d(pattern(N, 8))
    event = raw.aclrtCreateEvent()
    raw.aclrtRecordEvent(event, stream)
    raw.aclrtDestroyStreamForce(stream)
    raw.aclrtSynchronizeEvent(event)
    raw.aclrtSynchronizeDevice()
    assert dev_bytes(dst, N) == bytes(N)
    assert acl_mem.fake.hazards() == {}
    raw.aclrtDestroyEvent(event)
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(src)


# -- §3.4 aclrtSynchronizeStream / aclrtSynchronizeDevice ------------------------------------------
def test_spec_3_4_synchronize_null_is_the_default_stream(dev):
    """docs/runtime-model.md §3.4: aclrtSynchronizeStream(NULL) is legal and waits for the default
    stream."""
    host = pinned_with(pattern(N, 9))
    dst = device_with(bytes(N))
    raw.aclrtMemcpyAsync(dst, N, host, N, H2D, 0)
    raw.aclrtMemsetAsync(dst, N, 0xA5, 4, 0)
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(dst, N) == b"\xa5" * 4 + pattern(N, 9)[4:]
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(host)


@pytest.mark.cann("9.1.0")
def test_spec_3_4_synchronize_destroyed_stream_is_107017(dev):
    """docs/runtime-model.md §3.4: aclrtSynchronizeStream of a destroyed handle -> 107017."""
    with pytest.raises(InvalidHandleError) as e:
        raw.aclrtSynchronizeStream(dead_stream())
    assert e.value.code == 107017


def test_spec_3_4_synchronize_null_without_context_is_107002(backend):
    """docs/runtime-model.md §3.4: NULL means the current context's default stream; no context ->
    107002."""
    with pytest.raises(ContextNullError) as e:
        raise_from_fresh_thread(lambda: raw.aclrtSynchronizeStream(0))
    assert e.value.code == 107002


def test_spec_3_4_synchronize_device_without_context_is_107002(backend):
    """docs/runtime-model.md §3.4: aclrtSynchronizeDevice with no current context -> 107002."""
    with pytest.raises(ContextNullError) as e:
        raise_from_fresh_thread(raw.aclrtSynchronizeDevice)
    assert e.value.code == 107002


def test_spec_3_4_synchronize_device_runs_every_stream(dev):
    """docs/runtime-model.md §3.4: aclrtSynchronizeDevice waits for the default stream and every
    created one."""
    regions = [device_with(bytes(N)) for _ in range(3)]
    streams = [raw.aclrtCreateStream(), raw.aclrtCreateStream()]
    host = pinned_with(pattern(N, 11))
    raw.aclrtMemsetAsync(regions[0], N, 0x11, N, 0)
    raw.aclrtMemsetAsync(regions[1], N, 0x22, N, streams[0])
    raw.aclrtMemcpyAsync(regions[2], N, host, N, H2D, streams[1])
    raw.aclrtSynchronizeDevice()
    assert dev_bytes(regions[0], N) == b"\x11" * N
    assert dev_bytes(regions[1], N) == b"\x22" * N
    assert dev_bytes(regions[2], N) == pattern(N, 11)
    for stream in streams:
        raw.aclrtDestroyStream(stream)
    for ptr in regions:
        raw.aclrtFree(ptr)
    raw.aclrtFreeHost(host)


# -- §3.10 aclrtMemcpyAsync check order ------------------------------------------------------------
@pytest.mark.parametrize("kind", [6, 7, 8])
@pytest.mark.parametrize("count", [0, 16])
def test_spec_3_10_async_kind_out_of_range_is_100000_even_with_count_0(dev, cann, kind, count):
    """docs/runtime-model.md §3.10 step 1: kind 6 / 7 (INNER/INTER D2D) and above -> 100000,
    before the stream handle; on 9.1.0 count 0 is checked first and succeeds, on older
    releases count 0 is the runtime's business, after the kind."""
    dst = device_with(bytes(16))
    src = pinned_with(pattern(16))
    for d, s, stream in [(0, 0, 0), (dst, src, 0), (dst, src, dead_stream())]:
        if count == 0 and since(cann, "9.1.0"):
            raw.aclrtMemcpyAsync(d, 16, s, count, kind, stream)
            continue
        with pytest.raises(InvalidParamError) as e:
            raw.aclrtMemcpyAsync(d, 16, s, count, kind, stream)
        assert e.value.code == 100000
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(dst, 16) == bytes(16)
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(src)


@pytest.mark.cann("9.1.0")
@pytest.mark.parametrize("kind", [0, 1, 2, 3, 4, 5])
def test_spec_3_10_async_count_0_succeeds_with_null_pointers(dev, kind):
    """docs/runtime-model.md §3.10 step 1 (9.1.0): count 0 -> success, nothing done, even with
    NULL dst/src, destMax 0 and a destroyed stream (the handle is checked later)."""
    raw.aclrtMemcpyAsync(0, 0, 0, 0, kind, 0)
    raw.aclrtMemcpyAsync(0, 16, 0, 0, kind, dead_stream())


@pytest.mark.cann("8.5.0", "9.0.1")
@pytest.mark.parametrize("kind", [0, 1, 2, 3, 4, 5])
def test_spec_3_10_async_count_0_is_refused_before_9_1(dev, kind):
    """docs/runtime-model.md §3.10 Releases: before 9.1.0 NULL dst/src are checked first
    (100000, whatever the stream), then the runtime refuses count 0 (107000) and copies
    nothing."""
    for stream in (0, dead_stream()):
        with pytest.raises(InvalidParamError) as e:
            raw.aclrtMemcpyAsync(0, 16, 0, 0, kind, stream)
        assert e.value.code == 100000
    dst = device_with(bytes(16))
    src = pinned_with(pattern(16))
    for dest_max in (16, 0):
        with pytest.raises(RtParamInvalidError) as e2:
            raw.aclrtMemcpyAsync(dst, dest_max, src, 0, kind, 0)
        assert e2.value.code == 107000
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(dst, 16) == bytes(16)
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(src)


def test_spec_3_10_async_null_pointer_is_100000(dev):
    """docs/runtime-model.md §3.10 step 3: NULL dst or src -> 100000, before the stream and destMax
    checks."""
    ptr = device_with(bytes(16))
    dead = dead_stream()
    for d, s in [(0, ptr), (ptr, 0), (0, 0)]:
        for stream, dest_max in [(0, 16), (dead, 16), (0, 0)]:
            with pytest.raises(InvalidParamError) as e:
                raw.aclrtMemcpyAsync(d, dest_max, s, 16, D2D, stream)
            assert e.value.code == 100000
    raw.aclrtFree(ptr)


@pytest.mark.cann("9.1.0")
def test_spec_3_10_async_destroyed_stream_is_107017_before_count_over_dest_max(dev):
    """docs/runtime-model.md §3.10 step 4 (async): the stream handle is validated first -> 107017,
    even when count > destMax would give 107000."""
    dst = device_with(bytes(N))
    src = pinned_with(pattern(N))
    dead = dead_stream()
    for dest_max in (N, N - 1, 0):
        with pytest.raises(InvalidHandleError) as e:
            raw.aclrtMemcpyAsync(dst, dest_max, src, N, H2D, dead)
        assert e.value.code == 107017
    raw.aclrtSynchronizeDevice()
    assert dev_bytes(dst, N) == bytes(N)
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(src)


@pytest.mark.parametrize("dest_max", [0, 1, N - 1])
def test_spec_3_10_async_count_over_dest_max_is_107000_and_copies_nothing(dev, dest_max):
    """docs/runtime-model.md §3.10 step 4: count > destMax (destMax 0 included) -> 107000, nothing
    copied."""
    dst = device_with(bytes(N))
    src = pinned_with(pattern(N))
    stream = raw.aclrtCreateStream()
    for s in (0, stream):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemcpyAsync(dst, dest_max, src, N, H2D, s)
        assert e.value.code == 107000
    raw.aclrtSynchronizeDevice()
    assert dev_bytes(dst, N) == bytes(N)
    # count == destMax is fine.
    raw.aclrtMemcpyAsync(dst, N, src, N, H2D, stream)
    raw.aclrtSynchronizeStream(stream)
    assert dev_bytes(dst, N) == pattern(N)
    raw.aclrtDestroyStream(stream)
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(src)


def test_spec_3_10_async_dest_max_is_not_compared_with_the_allocation(dev):
    """docs/runtime-model.md §3.10: destMax is only compared with count, not with the real block
    size."""
    dst = device_with(bytes(N))
    src = pinned_with(pattern(N))
    raw.aclrtMemcpyAsync(dst, 1 << 40, src, N, H2D, 0)
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(dst, N) == pattern(N)
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(src)


def test_spec_3_10_async_same_pointer_is_success(dev):
    """docs/runtime-model.md §3.10 step 4: dst == src (after the kind checks) -> success, data
    unchanged."""
    ptr = device_with(pattern(N))
    for kind in (D2D, DEFAULT, H2D):
        raw.aclrtMemcpyAsync(ptr, N, ptr, N, kind, 0)
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(ptr, N) == pattern(N)
    raw.aclrtFree(ptr)


def test_spec_3_10_async_same_pinned_pointer_follows_the_run_mode(dev):
    """docs/runtime-model.md §3.10: the location/kind check (pinned->pinned becomes H2H -> 207000
    in EP mode) runs before the dst == src shortcut. In RC mode (§3.16) the H2H copy is
    accepted, so the shortcut answers: 0, the bytes unchanged."""
    host = pinned_with(pattern(N))
    try:
        if rc_mode():
            raw.aclrtMemcpyAsync(host, N, host, N, H2H, 0)
            raw.aclrtSynchronizeStream(0)
            assert get(host, N) == pattern(N)
        else:
            with pytest.raises(FeatureNotSupportError) as e:
                raw.aclrtMemcpyAsync(host, N, host, N, H2H, 0)
            assert e.value.code == 207000
    finally:
        raw.aclrtFreeHost(host)


# -- §3.10 the kind auto-correction table ----------------------------------------------------------
E107 = 107000
E207 = 207000
#: (src, dst) -> outcome for kinds H2H, H2D, D2H, D2D, DEFAULT, written from docs/runtime-model.md
#: §3.10: forced pairs take any kind 0-3 and DEFAULT; the other pairs accept two kinds, DEFAULT
#: becomes the listed one, others -> 107000; a result of H2H -> 207000 (EP mode; in RC mode
#: the copy is accepted instead, §3.16: see expected_in_this_mode).
_TABLE: dict[tuple[str, str], tuple[int, int, int, int, int]] = {
    #                       H2H   H2D   D2H   D2D   DEFAULT
    ("host", "device"):   (OK,   OK,   OK,   OK,   OK),    # forced H2D
    ("device", "host"):   (OK,   OK,   OK,   OK,   OK),    # forced D2H
    ("device", "device"): (OK,   OK,   OK,   OK,   OK),    # forced D2D
    ("host", "host"):     (E207, E207, E207, E207, E207),  # forced H2H -> not supported
    ("unreg", "device"):  (E107, OK,   E107, OK,   OK),    # DEFAULT -> H2D
    ("device", "unreg"):  (E107, E107, OK,   OK,   OK),    # DEFAULT -> D2H
    ("host", "unreg"):    (E207, OK,   E107, E107, E207),  # accepts H2H/H2D, DEFAULT -> H2H
    ("unreg", "host"):    (E207, E107, OK,   E107, E207),  # accepts H2H/D2H, DEFAULT -> H2H
}
_KINDS = (H2H, H2D, D2H, D2D, DEFAULT)
_CASES = [pytest.param(src, dst, kind, outcome, id=f"{src}-{dst}-{kind.name}")
          for (src, dst), outcomes in _TABLE.items()
          for kind, outcome in zip(_KINDS, outcomes, strict=True)]
_ERRORS: dict[int, type[AclError]] = {E107: RtParamInvalidError, E207: FeatureNotSupportError}


def expected_in_this_mode(outcome: int) -> int:
    """A table outcome as the runtime under test answers it: the host-to-host refusal (207000)
    is EP mode's; in RC mode host kinds run as device-to-device and the copy is accepted
    (docs/runtime-model.md §3.16). Rejected kinds (107000) stay rejected in both modes."""
    return OK if outcome == E207 and rc_mode() else outcome


@pytest.mark.parametrize(("src_at", "dst_at", "kind", "outcome"), _CASES)
def test_spec_3_10_async_kind_correction_table(dev, src_at, dst_at, kind, outcome):
    """docs/runtime-model.md §3.10: aclrtMemcpyAsync classifies src/dst as HOST (pinned), DEVICE or
    UNREG and forces, accepts or rejects the kind (107000); a resulting H2H -> 207000 in EP mode,
    accepted in RC mode (§3.16). Accepted copies have the data after synchronize; rejected ones
    copy nothing."""
    outcome = expected_in_this_mode(outcome)
    data, before = pattern(N, 17), b"\xee" * N
    src, dst = Endpoint(src_at, data), Endpoint(dst_at, before)
    stream = raw.aclrtCreateStream()
    try:
        if outcome == OK:
            raw.aclrtMemcpyAsync(dst.ptr, N, src.ptr, N, kind, stream)
        else:
            with pytest.raises(_ERRORS[outcome]) as e:
                raw.aclrtMemcpyAsync(dst.ptr, N, src.ptr, N, kind, stream)
            assert e.value.code == outcome
        raw.aclrtSynchronizeStream(stream)
        assert dst.read(N) == (data if outcome == OK else before)
        assert src.read(N) == data
    finally:
        raw.aclrtDestroyStream(stream)
        src.free()
        dst.free()


@pytest.mark.open_question(10)  # the RC answer; EP's 207000 is §3.10's
@pytest.mark.parametrize("kind", [H2H, DEFAULT])
def test_spec_3_10_async_pageable_to_pageable_h2h_follows_the_run_mode(dev, kind):
    """docs/runtime-model.md §3.10: UNREG->UNREG: H2H stays and DEFAULT becomes H2H -> 207000 in
    EP mode, nothing copied. In RC mode (§3.16) the host-to-host copy is not refused; with
    pageable memory it is done at once like aclrtMemcpy (docs/fidelity.md row 35), which
    copies between two plain host addresses (§8.10)."""
    src = np.frombuffer(bytearray(pattern(N)), dtype=np.uint8)
    dst = np.zeros(N, dtype=np.uint8)
    if rc_mode():
        raw.aclrtMemcpyAsync(dst.ctypes.data, N, src.ctypes.data, N, kind, 0)
        assert dst.tobytes() == src.tobytes()
        return
    with pytest.raises(FeatureNotSupportError) as e:
        raw.aclrtMemcpyAsync(dst.ctypes.data, N, src.ctypes.data, N, kind, 0)
    assert e.value.code == 207000
    assert dst.tobytes() == bytes(N)


@pytest.mark.open_question(10)
@pytest.mark.parametrize("kind", [H2D, D2H, D2D])
def test_spec_3_10_async_pageable_to_pageable_other_kinds_copy_at_once(dev, kind):
    """docs/runtime-model.md §3.10 / §8.10: UNREG->UNREG accepts H2D/D2H/D2D as given and then
    copies synchronously, as aclrtMemcpy does between two plain host addresses: the bytes are
    there when the call returns."""
    src = np.frombuffer(bytearray(pattern(N)), dtype=np.uint8)
    dst = np.zeros(N, dtype=np.uint8)
    raw.aclrtMemcpyAsync(dst.ctypes.data, N, src.ctypes.data, N, kind, 0)
    assert dst.tobytes() == src.tobytes()


_PAGEABLE = [
    pytest.param("unreg", "device", H2D, id="unreg-device-H2D"),
    pytest.param("unreg", "device", DEFAULT, id="unreg-device-DEFAULT"),
    pytest.param("device", "unreg", D2H, id="device-unreg-D2H"),
    pytest.param("device", "unreg", D2D, id="device-unreg-D2D"),
    pytest.param("host", "unreg", H2D, id="host-unreg-H2D"),
    pytest.param("unreg", "host", D2H, id="unreg-host-D2H"),
]


@pytest.mark.parametrize(("src_at", "dst_at", "kind"), _PAGEABLE)
def test_spec_3_10_async_copy_with_pageable_memory_is_done_on_return(dev, src_at, dst_at, kind):
    """docs/runtime-model.md §3.10: with unregistered (pageable) memory the runtime synchronises the
    stream and copies synchronously: the data is there when the call returns, no synchronize."""
    data = pattern(N, 23)
    src, dst = Endpoint(src_at, data), Endpoint(dst_at, bytes(N))
    stream = raw.aclrtCreateStream()
    try:
        raw.aclrtMemcpyAsync(dst.ptr, N, src.ptr, N, kind, stream)
        assert dst.read(N) == data
    finally:
        raw.aclrtDestroyStream(stream)
        src.free()
        dst.free()


def test_spec_3_10_async_pageable_copy_first_runs_the_stream_queue(dev):
    """docs/runtime-model.md §3.10: the pageable copy synchronises its stream first, so work queued
    before it on that stream is in the copied data (FIFO), without any synchronize."""
    ptr = device_with(bytes(N))
    stream = raw.aclrtCreateStream()
    raw.aclrtMemsetAsync(ptr, N, 0x5A, N, stream)
    out = np.zeros(N, dtype=np.uint8)
    raw.aclrtMemcpyAsync(out.ctypes.data, N, ptr, N, D2H, stream)
    assert out.tobytes() == b"\x5a" * N
    # And the other direction: the queued memset must not land after the copy.
    raw.aclrtMemsetAsync(ptr, N, 0x66, N, stream)
    half = np.frombuffer(bytearray(pattern(N // 2)), dtype=np.uint8)
    raw.aclrtMemcpyAsync(ptr, N, half.ctypes.data, N // 2, H2D, stream)
    raw.aclrtSynchronizeStream(stream)
    assert dev_bytes(ptr, N) == pattern(N // 2) + b"\x66" * (N // 2)
    raw.aclrtDestroyStream(stream)
    raw.aclrtFree(ptr)


def test_spec_3_10_async_without_context_is_107002(dev):
    """docs/runtime-model.md §3.10 step 5: valid arguments in a thread with no current context ->
    107002."""
    dst = device_with(bytes(N))
    src = pinned_with(pattern(N))
    pageable = np.frombuffer(bytearray(pattern(N)), dtype=np.uint8)
    for s in (src, pageable.ctypes.data):
        with pytest.raises(ContextNullError) as e:
            raise_from_fresh_thread(functools.partial(raw.aclrtMemcpyAsync, dst, N, s, N, H2D, 0))
        assert e.value.code == 107002
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(dst, N) == bytes(N)
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(src)


def test_spec_3_10_async_parameter_errors_win_over_no_context(dev, cann):
    """docs/runtime-model.md §1.2 / §3.10: kind, NULL, stream handle (9.1.0) and count > destMax
    come before the context lookup: a thread without a context gets those codes. The
    host-to-host refusal (207000) comes after it on every release. 9.1.0 looks the context up
    before the memory locations, older releases after them: a kind the locations reject
    (pageable -> device as D2H) is 107002 on 9.1.0 and 107000 before."""
    newer = since(cann, "9.1.0")
    dst = device_with(bytes(N))
    src = pinned_with(pattern(N))
    other = pinned_with(bytes(N))
    pageable = np.frombuffer(bytearray(pattern(N)), dtype=np.uint8)
    cases: list[tuple[Callable[[], None], type[AclError], int]] = [
        (lambda: raw.aclrtMemcpyAsync(dst, N, src, N, 6, 0), InvalidParamError, 100000),
        (lambda: raw.aclrtMemcpyAsync(0, N, src, N, H2D, 0), InvalidParamError, 100000),
        (lambda: raw.aclrtMemcpyAsync(dst, N - 1, src, N, H2D, 0), RtParamInvalidError,
         107000),
        (lambda: raw.aclrtMemcpyAsync(other, N, src, N, H2H, 0), ContextNullError, 107002),
        (lambda: raw.aclrtMemcpyAsync(dst, N, pageable.ctypes.data, N, D2H, 0),
         *((ContextNullError, 107002) if newer else (RtParamInvalidError, 107000))),
    ]
    if newer:  # older releases do not check the handle (see the fake-only check below)
        dead = dead_stream()
        cases.append((lambda: raw.aclrtMemcpyAsync(dst, N, src, N, H2D, dead),
                      InvalidHandleError, 107017))
    for call, error, code in cases:
        _, exc = in_fresh_thread(call)
        assert isinstance(exc, error), (code, exc)
        assert exc.code == code
    # count 0 is a success even there on 9.1.0; older releases refuse it (107000).
    if newer:
        raise_from_fresh_thread(lambda: raw.aclrtMemcpyAsync(dst, N, src, 0, H2D, 0))
    else:
        _, exc = in_fresh_thread(lambda: raw.aclrtMemcpyAsync(dst, N, src, 0, H2D, 0))
        assert isinstance(exc, RtParamInvalidError) and exc.code == 107000
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(src)
    raw.aclrtFreeHost(other)


# -- §3.11 aclrtMemsetAsync ------------------------------------------------------------------------
@pytest.mark.cann("9.1.0")
def test_spec_3_11_async_memset_count_0_succeeds_with_null(dev):
    """docs/runtime-model.md §3.11 (9.1.0): count 0 -> success before any other check (NULL,
    maxCount 0, dead stream)."""
    raw.aclrtMemsetAsync(0, 0, 1, 0, 0)
    raw.aclrtMemsetAsync(0, 16, 1, 0, dead_stream())


@pytest.mark.cann("8.5.0", "9.0.1")
def test_spec_3_11_async_memset_count_0_is_refused_before_9_1(dev):
    """docs/runtime-model.md §3.11 Releases: before 9.1.0 NULL comes first (100000, whatever
    the stream), then the runtime refuses count 0 (107000) and writes nothing."""
    for stream in (0, dead_stream()):
        with pytest.raises(InvalidParamError) as e:
            raw.aclrtMemsetAsync(0, 16, 1, 0, stream)
        assert e.value.code == 100000
    ptr = device_with(bytes(N))
    for max_count in (N, 0):
        with pytest.raises(RtParamInvalidError) as e2:
            raw.aclrtMemsetAsync(ptr, max_count, 1, 0, 0)
        assert e2.value.code == 107000
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(ptr, N) == bytes(N)
    raw.aclrtFree(ptr)


def test_spec_3_11_async_memset_null_is_100000(dev):
    """docs/runtime-model.md §3.11: devPtr NULL -> 100000, before the stream and maxCount checks."""
    for stream, max_count in [(0, 16), (dead_stream(), 16), (0, 0)]:
        with pytest.raises(InvalidParamError) as e:
            raw.aclrtMemsetAsync(0, max_count, 1, 16, stream)
        assert e.value.code == 100000


@pytest.mark.cann("9.1.0")
def test_spec_3_11_async_memset_destroyed_stream_is_107017(dev):
    """docs/runtime-model.md §3.11: a destroyed stream -> 107017, before count > maxCount."""
    ptr = device_with(bytes(N))
    dead = dead_stream()
    for max_count in (N, N - 1):
        with pytest.raises(InvalidHandleError) as e:
            raw.aclrtMemsetAsync(ptr, max_count, 1, N, dead)
        assert e.value.code == 107017
    raw.aclrtSynchronizeDevice()
    assert dev_bytes(ptr, N) == bytes(N)
    raw.aclrtFree(ptr)


@pytest.mark.parametrize("max_count", [0, 1, N - 1])
def test_spec_3_11_async_memset_count_over_max_count_is_107000(dev, max_count):
    """docs/runtime-model.md §3.11: count > maxCount -> 107000, nothing written; count == maxCount
    is fine."""
    ptr = device_with(bytes(N))
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemsetAsync(ptr, max_count, 0x7F, N, 0)
    assert e.value.code == 107000
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(ptr, N) == bytes(N)
    raw.aclrtMemsetAsync(ptr, N, 0x7F, N, 0)
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(ptr, N) == b"\x7f" * N
    raw.aclrtFree(ptr)


def test_spec_3_11_async_memset_without_context_is_107002(dev, cann):
    """docs/runtime-model.md §3.11: no current context -> 107002, after the parameter checks
    (and, on 9.1.0, after the stream handle check)."""
    ptr = device_with(bytes(N))
    cases: list[tuple[Callable[[], None], type[AclError], int]] = [
        (lambda: raw.aclrtMemsetAsync(ptr, N, 1, N, 0), ContextNullError, 107002),
        (lambda: raw.aclrtMemsetAsync(0, N, 1, N, 0), InvalidParamError, 100000),
        (lambda: raw.aclrtMemsetAsync(ptr, N - 1, 1, N, 0), RtParamInvalidError, 107000),
    ]
    if since(cann, "9.1.0"):  # older releases do not check the handle (fake-only check below)
        dead = dead_stream()
        cases.append((lambda: raw.aclrtMemsetAsync(ptr, N, 1, N, dead), InvalidHandleError,
                      107017))
    for call, error, code in cases:
        _, exc = in_fresh_thread(call)
        assert isinstance(exc, error), (code, exc)
        assert exc.code == code
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(ptr, N) == bytes(N)
    raw.aclrtFree(ptr)


# -- stale stream handles before 9.1.0 (docs/fidelity.md row 66) --------------------------------
@pytest.mark.fake_only(STALE_HANDLE_BEFORE_9_1)
@pytest.mark.cann("8.5.0", "9.0.1")
def test_spec_3_4_stale_handle_is_107017_only_after_the_parameter_checks_before_9_1(fake, dev):
    """docs/runtime-model.md §3.4 Releases (docs/fidelity.md row 66): before 9.1.0 nothing
    validates a destroyed handle early, so the parameter checks win (count > destMax, destMax
    0, count 0 -> 107000); the fake then answers 107017 where it looks the stream up, for
    aclrtMemcpyAsync, aclrtMemsetAsync, aclrtSynchronizeStream and a second destroy."""
    dst = device_with(bytes(N))
    src = pinned_with(pattern(N))
    dead = dead_stream()
    for dest_max, count in [(N - 1, N), (0, N), (N, 0)]:
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemcpyAsync(dst, dest_max, src, count, H2D, dead)
        assert e.value.code == 107000
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemsetAsync(dst, dest_max, 1, count, dead)
        assert e.value.code == 107000
    late: list[Callable[[], None]] = [
        lambda: raw.aclrtMemcpyAsync(dst, N, src, N, H2D, dead),
        lambda: raw.aclrtMemsetAsync(dst, N, 1, N, dead),
        lambda: raw.aclrtSynchronizeStream(dead),
        lambda: raw.aclrtDestroyStream(dead),
    ]
    for call in late:
        with pytest.raises(InvalidHandleError) as e2:
            call()
        assert e2.value.code == 107017
    raw.aclrtSynchronizeDevice()
    assert dev_bytes(dst, N) == bytes(N)
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(src)


@pytest.mark.fake_only(STALE_HANDLE_BEFORE_9_1)
@pytest.mark.cann("8.5.0", "9.0.1")
def test_spec_3_4_stale_handle_without_context_is_107002_before_9_1(fake, dev):
    """docs/runtime-model.md §3.10, §3.11 Releases (docs/fidelity.md row 66): before 9.1.0 the
    runtime looks the context up before it uses a stream, so a thread without a context gets
    107002 for a destroyed handle where 9.1.0 says 107017."""
    dst = device_with(bytes(N))
    src = pinned_with(pattern(N))
    dead = dead_stream()
    calls: list[Callable[[], None]] = [
        lambda: raw.aclrtMemcpyAsync(dst, N, src, N, H2D, dead),
        lambda: raw.aclrtMemsetAsync(dst, N, 1, N, dead),
        lambda: raw.aclrtSynchronizeStream(dead),
    ]
    for call in calls:
        _, exc = in_fresh_thread(call)
        assert isinstance(exc, ContextNullError), exc
        assert exc.code == 107002
    raw.aclrtFree(dst)
    raw.aclrtFreeHost(src)


@pytest.mark.fake_only(STALE_HANDLE_BEFORE_9_1)
@pytest.mark.cann("8.5.0", "9.0.1")
def test_spec_3_4_stream_of_a_reset_context_before_9_1(backend):
    """docs/runtime-model.md §3.4 Releases (docs/fidelity.md row 66): a stream whose context was
    reset is a stale handle; before 9.1.0 the parameter checks come first (107000), then the
    fake answers 107017 for synchronize, async memset and destroy."""
    raw.aclrtSetDevice(0)
    stream = raw.aclrtCreateStream()
    raw.aclrtResetDevice(0)
    raw.aclrtSetDevice(0)
    try:
        ptr = raw.aclrtMalloc(N)
        with pytest.raises(RtParamInvalidError) as e0:
            raw.aclrtMemsetAsync(ptr, N - 1, 1, N, stream)
        assert e0.value.code == 107000
        calls: list[Callable[[], None]] = [
            lambda: raw.aclrtSynchronizeStream(stream),
            lambda: raw.aclrtMemsetAsync(ptr, N, 1, N, stream),
            lambda: raw.aclrtDestroyStream(stream),
        ]
        for call in calls:
            with pytest.raises(InvalidHandleError) as e:
                call()
            assert e.value.code == 107017
        raw.aclrtFree(ptr)
    finally:
        raw.aclrtResetDevice(0)


@pytest.mark.parametrize(("value", "byte"), [(0x1AB, 0xAB), (-1, 0xFF), (0x7FFFFF00, 0x00),
                                             (-0x80000000, 0x00), (0x12345678, 0x78)])
def test_spec_3_11_async_memset_writes_the_low_byte_only(dev, value, byte):
    """docs/runtime-model.md §3.11: only the low byte of value is written, over exactly count
    bytes."""
    ptr = device_with(b"\x11" * N)
    raw.aclrtMemsetAsync(ptr, N, value, 16, 0)
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(ptr, N) == bytes([byte]) * 16 + b"\x11" * (N - 16)
    raw.aclrtFree(ptr)


def test_spec_3_11_async_memset_of_pinned_host_memory(dev):
    """docs/runtime-model.md §3.11: host memory from ACL (aclrtMallocHost) is accepted too."""
    host = pinned_with(bytes(N))
    stream = raw.aclrtCreateStream()
    raw.aclrtMemsetAsync(host, N, 0xC3, N // 2, stream)
    raw.aclrtSynchronizeStream(stream)
    assert get(host, N) == b"\xc3" * (N // 2) + bytes(N // 2)
    raw.aclrtDestroyStream(stream)
    raw.aclrtFreeHost(host)


# -- §3.4 ordering within a stream -----------------------------------------------------------------
def test_spec_3_4_work_on_one_stream_runs_in_order(dev):
    """docs/runtime-model.md §3.4: one stream is FIFO: memset 1, copy, memset 2 on overlapping
    ranges end with the last writer's bytes; a D2D chain A->B->C delivers A."""
    ptr = device_with(bytes(N))
    host = pinned_with(pattern(N, 3))
    stream = raw.aclrtCreateStream()
    raw.aclrtMemsetAsync(ptr, N, 0x01, N, stream)
    raw.aclrtMemcpyAsync(ptr, N, host, N, H2D, stream)
    raw.aclrtMemsetAsync(ptr, N, 0x02, N // 2, stream)
    raw.aclrtSynchronizeStream(stream)
    assert dev_bytes(ptr, N) == b"\x02" * (N // 2) + pattern(N, 3)[N // 2:]

    a, b, c = device_with(pattern(N, 40)), device_with(bytes(N)), device_with(bytes(N))
    raw.aclrtMemcpyAsync(b, N, a, N, D2D, stream)
    raw.aclrtMemcpyAsync(c, N, b, N, D2D, stream)
    raw.aclrtMemsetAsync(a, N, 0xFF, N, stream)
    raw.aclrtSynchronizeStream(stream)
    assert dev_bytes(c, N) == pattern(N, 40)
    assert dev_bytes(b, N) == pattern(N, 40)
    assert dev_bytes(a, N) == b"\xff" * N
    raw.aclrtDestroyStream(stream)
    for p in (ptr, a, b, c):
        raw.aclrtFree(p)
    raw.aclrtFreeHost(host)


def test_spec_3_4_d2h_into_pinned_memory_is_there_after_synchronize(dev):
    """docs/runtime-model.md §3.4 / §3.10: a queued D2H into pinned memory has landed after
    synchronize."""
    ptr = device_with(pattern(N, 60))
    host = pinned_with(bytes(N))
    stream = raw.aclrtCreateStream()
    raw.aclrtMemcpyAsync(host, N, ptr, N, D2H, stream)
    raw.aclrtSynchronizeStream(stream)
    assert get(host, N) == pattern(N, 60)
    raw.aclrtDestroyStream(stream)
    raw.aclrtFree(ptr)
    raw.aclrtFreeHost(host)


# -- fake only: deferred execution and hazards -----------------------------------------------------
_DEFERRED = "on hardware timing decides when queued work lands; only the fake defers it " \
            "to the synchronisation deterministically"
_HAZARDS = "hazard reports are the fake's own diagnostics; the runtime reports nothing"


@pytest.fixture
def hazard_mode(fake: Any) -> Iterator[Callable[[str], None]]:
    """Call with "warn" / "raise" / "count": a fresh fake reporting hazards that way.

    Afterwards the fake goes back to its defaults; the configured one is dropped without
    resetting its devices, so leftovers report nothing.
    """

    def choose(mode: str) -> None:
        acl_mem.fake.configure(hazards=mode)

    yield choose
    acl_mem.fake.reset()


def _queued_h2d(data: bytes) -> tuple[int, int, int]:
    """Device 0 current; a device block with an H2D copy of ``data`` queued on a new stream
    (stream, dst, pinned src). The block held zeros before."""
    raw.aclrtSetDevice(0)
    dst = device_with(bytes(len(data)))
    src = pinned_with(data)
    stream = raw.aclrtCreateStream()
    raw.aclrtMemcpyAsync(dst, len(data), src, len(data), H2D, stream)
    return stream, dst, src


@pytest.mark.fake_only(_DEFERRED)
def test_spec_3_4_fake_queued_copy_is_stale_before_synchronize(hazard_mode):
    """docs/runtime-model.md §3.4: nothing queued is done before synchronize: a synchronous read of
    a block a queued H2D writes sees the old bytes (and is an access-before-synchronize hazard)."""
    hazard_mode("count")
    stream, dst, _ = _queued_h2d(pattern(N, 2))
    assert dev_bytes(dst, N) == bytes(N)
    assert acl_mem.fake.hazards() == {"access-before-synchronize": 1}
    raw.aclrtSynchronizeStream(stream)
    assert dev_bytes(dst, N) == pattern(N, 2)
    assert acl_mem.fake.hazards() == {"access-before-synchronize": 1}


@pytest.mark.fake_only(_DEFERRED)
def test_spec_3_4_fake_queued_d2h_into_pinned_memory_is_stale_before_synchronize(hazard_mode):
    """docs/runtime-model.md §3.4: a queued D2H leaves pinned memory untouched until synchronize."""
    hazard_mode("count")
    raw.aclrtSetDevice(0)
    ptr = device_with(pattern(N, 8))
    host = pinned_with(bytes(N))
    stream = raw.aclrtCreateStream()
    raw.aclrtMemcpyAsync(host, N, ptr, N, D2H, stream)
    raw.aclrtMemsetAsync(host, N, 0x44, 4, stream)
    assert get(host, N) == bytes(N)
    raw.aclrtSynchronizeStream(stream)
    assert get(host, N) == b"\x44" * 4 + pattern(N, 8)[4:]
    assert acl_mem.fake.hazards() == {}


@pytest.mark.fake_only(_DEFERRED)
def test_spec_3_4_fake_streams_are_independent(hazard_mode):
    """docs/runtime-model.md §3.4: synchronising one stream (or the default stream) does not run
    another stream's queued work; aclrtSynchronizeDevice runs it."""
    hazard_mode("count")
    raw.aclrtSetDevice(0)
    x, y, z = device_with(bytes(N)), device_with(bytes(N)), device_with(bytes(N))
    a, b = raw.aclrtCreateStream(), raw.aclrtCreateStream()
    raw.aclrtMemsetAsync(x, N, 0x11, N, a)
    raw.aclrtMemsetAsync(y, N, 0x22, N, b)
    raw.aclrtMemsetAsync(z, N, 0x33, N, 0)
    raw.aclrtSynchronizeStream(b)
    assert dev_bytes(y, N) == b"\x22" * N
    assert acl_mem.fake.hazards() == {}
    assert dev_bytes(x, N) == bytes(N)
    assert dev_bytes(z, N) == bytes(N)
    assert acl_mem.fake.hazards() == {"access-before-synchronize": 2}
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(z, N) == b"\x33" * N
    assert dev_bytes(x, N) == bytes(N)
    assert acl_mem.fake.hazards() == {"access-before-synchronize": 3}
    raw.aclrtSynchronizeDevice()
    assert dev_bytes(x, N) == b"\x11" * N
    assert acl_mem.fake.hazards() == {"access-before-synchronize": 3}


@pytest.mark.fake_only(_HAZARDS)
def test_spec_3_6_fake_free_while_queued_is_reported(hazard_mode):
    """docs/runtime-model.md §3.6: aclrtFree does not wait: freeing a block a queued copy writes, or
    one a queued copy reads, is a free-while-queued hazard; an untouched block is not."""
    hazard_mode("count")
    stream, dst, _ = _queued_h2d(pattern(N))
    untouched = device_with(bytes(N))
    raw.aclrtFree(untouched)
    assert acl_mem.fake.hazards() == {}
    raw.aclrtFree(dst)
    assert acl_mem.fake.hazards() == {"free-while-queued": 1}
    src = device_with(pattern(N))
    host = pinned_with(bytes(N))
    raw.aclrtMemcpyAsync(host, N, src, N, D2H, stream)
    raw.aclrtFree(src)
    assert acl_mem.fake.hazards()["free-while-queued"] == 2


@pytest.mark.fake_only(_HAZARDS)
def test_spec_3_7_fake_free_host_while_queued_is_reported(hazard_mode):
    """docs/runtime-model.md §3.7: aclrtFreeHost frees at once without synchronisation: freeing
    pinned memory a queued H2D still reads is a free-while-queued hazard (as for aclrtFree)."""
    hazard_mode("count")
    _, _, src = _queued_h2d(pattern(N))
    raw.aclrtFreeHost(src)
    assert acl_mem.fake.hazards() == {"free-while-queued": 1}


@pytest.mark.fake_only(_HAZARDS)
def test_spec_3_4_fake_destroy_with_pending_work_is_reported_and_waits(hazard_mode):
    """docs/runtime-model.md §3.4: destroying a stream with queued work reports
    destroy-with-pending-work; the work still ran (destroy waits)."""
    hazard_mode("count")
    stream, dst, _ = _queued_h2d(pattern(N, 4))
    raw.aclrtDestroyStream(stream)
    assert acl_mem.fake.hazards() == {"destroy-with-pending-work": 1}
    assert dev_bytes(dst, N) == pattern(N, 4)
    empty = raw.aclrtCreateStream()
    raw.aclrtDestroyStream(empty)
    assert acl_mem.fake.hazards() == {"destroy-with-pending-work": 1}


@pytest.mark.fake_only(_HAZARDS)
def test_spec_3_4_fake_access_before_synchronize_is_reported(hazard_mode):
    """docs/runtime-model.md §3.4: synchronous reads and writes of a range a queued op writes are
    access-before-synchronize hazards; disjoint ranges and ranges a queued op only reads
    are not."""
    hazard_mode("count")
    stream, dst, src = _queued_h2d(pattern(N))
    other = device_with(bytes(N))
    out = np.zeros(N, dtype=np.uint8)
    dev_bytes(other, N)                                            # disjoint
    raw.aclrtMemset(other, N, 1, N)                                # disjoint
    raw.aclrtMemcpy(out.ctypes.data, N, src, N, H2H)               # only read by the queue
    assert out.tobytes() == pattern(N)
    assert acl_mem.fake.hazards() == {}
    raw.aclrtMemcpy(out.ctypes.data, N, dst + 16, 8, D2H)          # read, overlapping
    assert acl_mem.fake.hazards() == {"access-before-synchronize": 1}
    raw.aclrtMemset(dst + N - 1, 1, 0, 1)                          # write, overlapping
    assert acl_mem.fake.hazards() == {"access-before-synchronize": 2}
    raw.aclrtSynchronizeStream(stream)
    dev_bytes(dst, N)
    assert acl_mem.fake.hazards() == {"access-before-synchronize": 2}


@pytest.mark.fake_only(_HAZARDS)
def test_spec_3_4_fake_host_buffer_view_under_queued_d2h_is_reported(hazard_mode):
    """docs/runtime-model.md §3.4: HostBuffer.view() of pinned memory a queued D2H writes is an
    access-before-synchronize hazard; a view of pinned memory a queued H2D only reads
    is not; after synchronize the view shows the data."""
    hazard_mode("count")
    with acl_mem.Device(0) as dev, dev.stream() as stream:
        source = dev.malloc(N)
        source.memset(0x77)
        staging = dev.malloc_host(N)
        staging.view()[:] = pattern(N)
        target = dev.malloc(N)
        target.copy_from_async(staging, stream=stream)              # reads staging
        view = staging.view()
        assert acl_mem.fake.hazards() == {}
        del view
        landing = dev.malloc_host(N)
        source.copy_to_async(landing, stream=stream)                # writes landing
        seen = landing.view()
        assert acl_mem.fake.hazards() == {"access-before-synchronize": 1}
        del seen
        stream.synchronize()
        assert bytes(landing.view()) == b"\x77" * N
        assert target.read() == pattern(N)
        assert acl_mem.fake.hazards() == {"access-before-synchronize": 1}


@pytest.mark.fake_only(_HAZARDS)
def test_spec_3_2_fake_reset_with_pending_work_is_reported(hazard_mode):
    """docs/runtime-model.md §3.2 / §3.4: releasing a device whose streams still have queued work
    reports reset-with-pending-work (that work never runs)."""
    hazard_mode("count")
    _queued_h2d(pattern(N))
    raw.aclrtMemsetAsync(device_with(bytes(N)), N, 1, N, 0)
    raw.aclrtResetDevice(0)
    assert acl_mem.fake.hazards() == {"reset-with-pending-work": 1}


def _situations() -> dict[str, Callable[[int, int, int], object]]:
    """Hazard kind -> an action racing with ``_queued_h2d``'s (stream, dst, src)."""
    return {
        "free-while-queued": lambda stream, dst, src: raw.aclrtFree(dst),
        "destroy-with-pending-work": lambda stream, dst, src: raw.aclrtDestroyStream(stream),
        "access-before-synchronize": lambda stream, dst, src: dev_bytes(dst, N),
        "reset-with-pending-work": lambda stream, dst, src: raw.aclrtResetDevice(0),
    }


@pytest.mark.fake_only(_HAZARDS)
@pytest.mark.parametrize("kind", sorted(_situations()))
def test_spec_3_4_fake_hazards_raise_in_raise_mode(hazard_mode, kind):
    """docs/runtime-model.md §3.4: with configure(hazards="raise") each hazard raises
    acl_mem.HazardError (and is still counted)."""
    hazard_mode("raise")
    stream, dst, src = _queued_h2d(pattern(N))
    with pytest.raises(HazardError):
        _situations()[kind](stream, dst, src)
    assert acl_mem.fake.hazards() == {kind: 1}


@pytest.mark.fake_only(_HAZARDS)
def test_spec_3_4_fake_host_buffer_view_raises_in_raise_mode(hazard_mode):
    """docs/runtime-model.md §3.4: HostBuffer.view() under a queued D2H raises HazardError in raise
    mode."""
    hazard_mode("raise")
    dev = acl_mem.Device(0).set_current()
    source = dev.malloc(N)
    landing = dev.malloc_host(N)
    source.copy_to_async(landing)
    with pytest.raises(HazardError):
        landing.view()
    assert acl_mem.fake.hazards() == {"access-before-synchronize": 1}


@pytest.mark.fake_only(_HAZARDS)
@pytest.mark.parametrize("kind", sorted(_situations()))
def test_spec_3_4_fake_hazards_warn_in_warn_mode(hazard_mode, kind):
    """docs/runtime-model.md §3.4: with configure(hazards="warn") each hazard warns
    acl_mem.HazardWarning and the call goes ahead."""
    hazard_mode("warn")
    stream, dst, src = _queued_h2d(pattern(N))
    with pytest.warns(HazardWarning):
        _situations()[kind](stream, dst, src)
    assert acl_mem.fake.hazards() == {kind: 1}


@pytest.mark.fake_only(_HAZARDS)
def test_spec_3_4_fake_hazards_warn_by_default(fake):
    """docs/runtime-model.md §3.4: an unconfigured fake warns HazardWarning; count mode stays
    silent."""
    with acl_mem.Device(0):
        stream, dst, _ = _queued_h2d(pattern(N))
        with pytest.warns(HazardWarning):
            dev_bytes(dst, N)
        assert acl_mem.fake.hazards() == {"access-before-synchronize": 1}
        raw.aclrtSynchronizeStream(stream)
        raw.aclrtDestroyStream(stream)
        raw.aclrtResetDevice(0)  # the reference _queued_h2d added


@pytest.mark.fake_only(_HAZARDS)
def test_spec_3_4_fake_count_mode_is_silent(hazard_mode):
    """docs/runtime-model.md §3.4: configure(hazards="count") neither warns nor raises; hazards()
    counts."""
    hazard_mode("count")
    stream, dst, _ = _queued_h2d(pattern(N))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dev_bytes(dst, N)
        raw.aclrtDestroyStream(stream)
    assert acl_mem.fake.hazards() == {"access-before-synchronize": 1,
                                      "destroy-with-pending-work": 1}


# -- the Pythonic layer ----------------------------------------------------------------------------
def test_spec_3_4_device_stream_context_manager_destroys(dev, cann):
    """docs/runtime-model.md §3.4: `with dev.stream() as s` destroys the stream at exit (a
    9.1.0 runtime then answers 107017 for its handle; older ones do not check handles)."""
    with dev.stream() as stream:
        handle = stream.handle
        assert handle != 0
        assert stream.device == dev
        assert not stream.destroyed
    assert stream.destroyed
    if since(cann, "9.1.0"):
        with pytest.raises(InvalidHandleError) as e:
            raw.aclrtSynchronizeStream(handle)
        assert e.value.code == 107017


def test_spec_3_4_stream_destroy_is_idempotent(dev):
    """docs/runtime-model.md §3.4: Stream.destroy() twice does not reach aclrtDestroyStream twice
    (no 107017)."""
    stream = dev.stream()
    stream.destroy()
    stream.destroy()
    assert stream.destroyed
    with stream:
        pass


def test_spec_3_4_stream_used_after_destroy_raises(dev):
    """docs/runtime-model.md §3.4: a destroyed Stream raises DestroyedStreamError wherever it is
    used."""
    buf = dev.malloc(N)
    stream = dev.stream()
    stream.destroy()
    uses: list[Callable[[], object]] = [
        lambda: stream.handle,
        stream.synchronize,
        lambda: buf.memset_async(1, stream=stream),
        lambda: buf.copy_from_async(b"x" * N, stream=stream),
        lambda: buf.copy_to_async(bytearray(N), stream=stream),
    ]
    for use in uses:
        with pytest.raises(DestroyedStreamError):
            use()
    buf.free()


def test_spec_3_4_stream_of_a_reset_device_is_destroyed(backend):
    """docs/runtime-model.md §3.2 / §3.4: resetting the device to zero references destroys its
    streams: the Stream reports destroyed, raises DestroyedStreamError, destroy() is a no-op."""
    with acl_mem.Device(0) as device:
        stream = device.stream()
    assert stream.destroyed
    with pytest.raises(DestroyedStreamError):
        stream.synchronize()
    with acl_mem.Device(0) as device:
        with pytest.raises(DestroyedStreamError):
            _ = stream.handle
        with pytest.raises(DestroyedStreamError):
            device.malloc(N).memset_async(1, stream=stream)
        stream.destroy()


def test_spec_3_4_default_stream_destroy_is_a_no_op(dev):
    """docs/runtime-model.md §3.4: the default stream (NULL) is never destroyed: destroy() does
    nothing and the stream keeps working."""
    default = dev.default_stream
    assert default.handle == 0
    default.destroy()
    default.destroy()
    assert not default.destroyed
    assert default.handle == 0
    buf = dev.malloc(N)
    buf.memset_async(0x42, stream=default)
    default.synchronize()
    assert buf.read() == b"\x42" * N
    with dev.default_stream:
        pass
    dev.default_stream.synchronize()
    buf.free()


def test_spec_3_10_buffer_async_methods_use_the_default_stream(dev):
    """docs/runtime-model.md §3.10 / §3.11: copy_from_async / copy_to_async / memset_async with
    stream=None queue on the default stream: synchronising the NULL stream completes them."""
    staging = dev.malloc_host(N)
    staging.view()[:] = pattern(N, 13)
    buf = dev.malloc(N)
    buf.copy_from_async(staging)
    raw.aclrtSynchronizeStream(0)
    assert buf.read() == pattern(N, 13)
    buf.memset_async(0x21, 8)
    raw.aclrtSynchronizeStream(0)
    assert buf.read() == b"\x21" * 8 + pattern(N, 13)[8:]
    landing = dev.malloc_host(N)
    buf.copy_to_async(landing)
    raw.aclrtSynchronizeStream(0)
    assert bytes(landing.view()) == b"\x21" * 8 + pattern(N, 13)[8:]
    buf.free()
    staging.free()
    landing.free()


def test_spec_3_10_buffer_async_with_a_created_stream(dev):
    """docs/runtime-model.md §3.10: the Pythonic async copies on a created stream; pageable sources
    and destinations (bytes, bytearray) are done on return."""
    with dev.stream() as stream:
        buf = dev.malloc(N)
        buf.copy_from_async(pattern(N, 31), stream=stream)
        assert buf.read() == pattern(N, 31)
        out = bytearray(N)
        buf.copy_to_async(out, stream=stream)
        assert bytes(out) == pattern(N, 31)
        other = dev.malloc(N)
        other.copy_from_async(buf, stream=stream)
        stream.synchronize()
        assert other.read() == pattern(N, 31)
        dev.synchronize()
        buf.free()
        other.free()


def test_spec_3_10_host_buffer_async_host_to_host_follows_the_run_mode(dev):
    """docs/runtime-model.md §3.10: a HostBuffer filled asynchronously from pageable or pinned host
    memory is an H2H async copy -> FeatureNotSupportError 207000 in EP mode. In RC mode
    (§3.16) both are accepted: the pageable copy is done on return, the pinned one after
    synchronize."""
    staging = dev.malloc_host(N)
    other = dev.malloc_host(N)
    try:
        if rc_mode():
            staging.copy_from_async(pattern(N, 5))
            assert bytes(staging.view()) == pattern(N, 5)
            other.view()[:] = pattern(N, 9)
            staging.copy_from_async(other)
            raw.aclrtSynchronizeStream(0)
            assert bytes(staging.view()) == pattern(N, 9)
        else:
            before = bytes(staging.view())
            for src in (b"x" * N, other):
                with pytest.raises(FeatureNotSupportError) as e:
                    staging.copy_from_async(src)
                assert e.value.code == 207000
            assert bytes(staging.view()) == before
    finally:
        staging.free()
        other.free()


@pytest.mark.parametrize("bad", [0, 1, "default", 1.5, object()])
def test_spec_3_4_stream_argument_of_the_wrong_type_is_type_error(dev, bad):
    """The stream argument must be an acl_mem.Stream or None: a raw handle or anything
    else -> TypeError, before any runtime call."""
    buf = dev.malloc(N)
    for use in (lambda: buf.memset_async(1, stream=bad),
                lambda: buf.copy_from_async(b"x" * N, stream=bad),
                lambda: buf.copy_to_async(bytearray(N), stream=bad)):
        with pytest.raises(TypeError):
            use()
    buf.free()


def test_spec_3_4_buffer_with_a_stream_of_another_device_is_107003(dev):
    """docs/runtime-model.md §3.4: a stream of device 1 used while device 0 is current -> 107003
    (ACL_ERROR_RT_STREAM_CONTEXT), nothing queued."""
    need_two_devices()
    buf = dev.malloc(N)
    buf.memset(0)
    staging = dev.malloc_host(N)
    staging.view()[:] = b"\x09" * N
    device_1 = acl_mem.Device(1)
    with device_1:
        stream_1 = device_1.stream()
        with dev:
            for use in (lambda: buf.memset_async(1, stream=stream_1),
                        lambda: buf.copy_from_async(staging, stream=stream_1)):
                with pytest.raises(AclError) as e:
                    use()
                assert e.value.code == 107003
                assert isinstance(e.value, StreamContextError)
        device_1.set_current()
        stream_1.destroy()
        device_1.reset()
    dev.set_current()
    dev.reset()
    raw.aclrtSynchronizeDevice()
    assert buf.read() == bytes(N)
    buf.free()
    staging.free()


@pytest.mark.fake_only("on hardware timing decides whether the queued copy already read it")
def test_spec_3_4_fake_overwriting_the_source_of_a_queued_copy_is_reported(hazard_mode):
    """docs/runtime-model.md §3.4: a synchronous write into memory a queued copy still reads (write
    after read) is an access-before-synchronize hazard; the queued copy then sees the new bytes."""
    hazard_mode("count")
    with acl_mem.Device(0) as dev, dev.stream() as stream:
        source = dev.malloc(N)
        source.memset(0x11)
        landing = dev.malloc_host(N)
        source.copy_to_async(landing, stream=stream)
        source.memset(0x22)
        assert acl_mem.fake.hazards() == {"access-before-synchronize": 1}
        stream.synchronize()
        assert bytes(landing.view()) == b"\x22" * N
