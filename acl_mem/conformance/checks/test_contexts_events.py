"""Conformance: contexts (docs/runtime-model.md §3.3) and events (§3.15), through acl_mem.raw.

Every expected code, flag and status is written out by hand from the runtime model. Check
order of the event calls: NULL arguments (100000) -> handles (107017, event before stream)
-> flags -> current context (107002) -> the stream's context (107003).

Release differences (§0.1): 8.5.0 takes a dead context in aclrtSetCurrentContext (0) and
answers aclrtGetCurrentContext without a context with 0 and NULL; 8.5.0 and 9.0.1 do not
validate event or stream handles, so checks of destroyed handles hold on 9.1.0 on every
backend, and on the fake only for the older releases (docs/fidelity.md rows 66 and 69).

On a device the moment queued work lands is up to the device. Checks that need a record
still pending hold their stream behind a wait on an ACL_EVENT_SYNC event that is recorded
only later (§3.15: such a wait waits for a later record), so they hold on hardware too;
checks of stale data without a wait are ``fake_only``.

Every check destroys the contexts it creates and drops every device reference it takes:
the autouse ``created`` fixture fails a passing check that left either behind.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from acl_mem import raw
from acl_mem.enums import MemAttr, MemcpyKind
from acl_mem.errors import (
    AclError,
    ContextNullError,
    ContextReleaseError,
    EventTimestampInvalidError,
    FeatureNotSupportError,
    InternalError,
    InvalidDeviceIdError,
    InvalidHandleError,
    InvalidParamError,
    RtParamInvalidError,
    StreamContextError,
    check,
)

from .helpers import (
    THREAD_TIMEOUT,
    in_fresh_thread,
    need_two_devices,
    raise_from_fresh_thread,
    since,
)

H2D = MemcpyKind.HOST_TO_DEVICE
D2H = MemcpyKind.DEVICE_TO_HOST
D2D = MemcpyKind.DEVICE_TO_DEVICE

N = 64
MiB = 1 << 20

# aclrtCreateEventWithFlag / aclrtCreateEventExWithFlag flags (docs/runtime-model.md §3.15).
SYNC = 0x1
CAPTURE_STREAM_PROGRESS = 0x2
TIME_LINE = 0x8
DEVICE_USE_ONLY = 0x10
EXTERNAL = 0x20
IPC = 0x40
# aclrtEventRecordedStatus (aclrtQueryEventStatus).
NOT_READY, COMPLETE = 0, 1
# aclrtEventStatus (the deprecated aclrtQueryEvent): the other way round.
OLD_COMPLETE, OLD_NOT_READY = 0, 1

#: Why checks of a destroyed event handle on 8.5.0 / 9.0.1 run on the fake only.
STALE_EVENT_BEFORE_9_1 = ("8.5.0 and 9.0.1 use a destroyed event handle unchecked (undefined "
                          "behaviour, it may crash); the fake answers 107017 on every release "
                          "(docs/fidelity.md row 69)")
_DEFERRED = ("on hardware timing decides when queued work lands; only the fake defers it to "
             "the synchronisation deterministically")


# -- fixtures and helpers --------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def created(request: pytest.FixtureRequest, backend) -> Iterator[list[int]]:
    """The contexts a check creates (it appends each handle). At the end every one is
    destroyed (a created context keeps its device open across aclrtResetDevice, §3.3), and
    no device may keep a reference: aclrtResetDevice of each answers 507007. A check that
    passed but left a context or a device reference behind fails here; a failed check is
    reported once, by itself."""
    handles: list[int] = []
    failed = request.session.testsfailed
    yield handles
    alive = []
    for handle in handles:
        try:
            raw.aclrtDestroyContext(handle)
        except ContextNullError:
            continue  # the check destroyed it, as it should
        alive.append(handle)
    held = []
    for device in range(raw.aclrtGetDeviceCount()):
        try:
            raw.aclrtResetDevice(device)
        except ContextReleaseError:
            continue
        held.append(device)
    if request.session.testsfailed == failed:
        assert not alive, f"the check left contexts alive: {[hex(h) for h in alive]}"
        assert not held, f"the check left references to devices {held}"


def pattern(n: int, seed: int = 1) -> bytes:
    return ((np.arange(n, dtype=np.uint32) * 7 + seed) % 251).astype(np.uint8).tobytes()


def dev_bytes(ptr: int, n: int) -> bytes:
    """Device bytes read back with a synchronous D2H copy into pageable memory."""
    out = np.zeros(n, dtype=np.uint8)
    raw.aclrtMemcpy(out.ctypes.data, n, ptr, n, D2H)
    return out.tobytes()


def device_with(data: bytes) -> int:
    """Device memory holding ``data`` (written with a synchronous H2D copy)."""
    ptr = raw.aclrtMalloc(len(data))
    src = np.frombuffer(bytearray(data), dtype=np.uint8)
    raw.aclrtMemcpy(ptr, len(data), src.ctypes.data, len(data), H2D)
    return ptr


def pinned_with(data: bytes) -> int:
    """Pinned host memory holding ``data``: an async copy from it is queued, not done at once
    (a copy from pageable memory is done on return, §3.10)."""
    ptr = raw.aclrtMallocHost(len(data))
    ctypes.memmove(ptr, data, len(data))
    return ptr


def hbm_free() -> int:
    """Free bytes of the device's memory, huge and normal pages (ACL_HBM_MEM; a DDR chip
    answers for its DDR, §3.12)."""
    return raw.aclrtGetMemInfo(MemAttr.HBM_MEM)[0]


def hold(stream: int) -> int:
    """Make ``stream``'s later work wait for an ACL_EVENT_SYNC event not recorded yet: on a
    device nothing queued on it after this runs before :func:`release` (§3.15); the fake runs
    nothing before a synchronisation anyway. Returns the gate event."""
    gate = raw.aclrtCreateEventWithFlag(SYNC)
    raw.aclrtStreamWaitEvent(stream, gate)
    return gate


def release(gate: int) -> None:
    """Record the gate of :func:`hold` (on the default stream) and destroy it."""
    raw.aclrtRecordEvent(gate, 0)
    raw.aclrtSynchronizeEvent(gate)
    raw.aclrtDestroyEvent(gate)


def dead_event() -> int:
    """The handle of an event created and destroyed in the current context."""
    event = raw.aclrtCreateEvent()
    raw.aclrtDestroyEvent(event)
    return event


def dead_stream() -> int:
    """The handle of a stream created and destroyed in the current context."""
    stream = raw.aclrtCreateStream()
    raw.aclrtDestroyStream(stream)
    return stream


# -- §3.3 NULL arguments ---------------------------------------------------------------------------
_CONTEXT_NULLS: dict[str, Callable[..., int]] = {
    "aclrtCreateContext(NULL, 0)": lambda b: b.aclrtCreateContext(0, null_outputs=1)[0],
    "aclrtCreateContext(NULL, bad device)":
        lambda b: b.aclrtCreateContext(1 << 20, null_outputs=1)[0],
    "aclrtDestroyContext(NULL)": lambda b: b.aclrtDestroyContext(0),
    "aclrtSetCurrentContext(NULL)": lambda b: b.aclrtSetCurrentContext(0),
    "aclrtGetCurrentContext(NULL)": lambda b: b.aclrtGetCurrentContext(null_outputs=1)[0],
}


@pytest.mark.parametrize("call", sorted(_CONTEXT_NULLS))
def test_spec_3_3_null_argument_is_100000_with_or_without_a_context(backend, call):
    """docs/runtime-model.md §3.3 / §1.2: a NULL context or output -> 100000 (ACL layer), before
    the device id and without a current context too."""
    fn = _CONTEXT_NULLS[call]
    with pytest.raises(InvalidParamError) as e1:
        raise_from_fresh_thread(lambda: check(fn(backend), call))
    assert e1.value.code == 100000
    raw.aclrtSetDevice(0)
    try:
        with pytest.raises(InvalidParamError) as e2:
            check(fn(backend), call)
        assert e2.value.code == 100000
        assert raw.aclrtGetDevice() == 0
    finally:
        raw.aclrtResetDevice(0)


def test_spec_3_3_raw_null_handles_are_100000(dev):
    """docs/runtime-model.md §3.3: aclrtDestroyContext(NULL) and aclrtSetCurrentContext(NULL) ->
    100000; the thread keeps its context."""
    default = raw.aclrtGetCurrentContext()
    with pytest.raises(InvalidParamError) as e1:
        raw.aclrtDestroyContext(0)
    assert e1.value.code == 100000
    with pytest.raises(InvalidParamError) as e2:
        raw.aclrtSetCurrentContext(0)
    assert e2.value.code == 100000
    assert raw.aclrtGetCurrentContext() == default


# -- §3.3 aclrtCreateContext -----------------------------------------------------------------------
def test_spec_3_3_create_context_on_a_bad_device_is_107001(backend):
    """docs/runtime-model.md §3.3: aclrtCreateContext with a device id outside [0, count) ->
    107001, with or without a current context; nothing changes (the current context stays,
    a thread without one still has none)."""
    count = raw.aclrtGetDeviceCount()
    raw.aclrtSetDevice(0)
    try:
        default = raw.aclrtGetCurrentContext()
        for bad in (count, -1, 1 << 20):
            with pytest.raises(InvalidDeviceIdError) as e:
                raw.aclrtCreateContext(bad)
            assert e.value.code == 107001
        assert raw.aclrtGetCurrentContext() == default
    finally:
        raw.aclrtResetDevice(0)

    def in_thread() -> AclError | None:
        try:
            raw.aclrtCreateContext(count)
        except InvalidDeviceIdError as exc:
            assert exc.code == 107001
        else:
            raise AssertionError(f"aclrtCreateContext({count}) succeeded")
        try:
            raw.aclrtCreateStream()
        except AclError as exc:
            return exc
        return None

    error = raise_from_fresh_thread(in_thread)
    assert isinstance(error, ContextNullError), error
    assert error.code == 107002


def test_spec_3_3_created_context_is_current_without_set_device(backend, created):
    """docs/runtime-model.md §3.3: aclrtCreateContext needs no aclrtSetDevice: the context holds
    the device open, becomes current (aclrtGetCurrentContext, aclrtGetDevice) and has a default
    stream; aclrtResetDevice of a device only a created context holds -> 507007."""
    context = raw.aclrtCreateContext(0)
    created.append(context)
    assert context != 0
    assert raw.aclrtGetCurrentContext() == context
    assert raw.aclrtGetDevice() == 0
    ptr = device_with(pattern(N, 3))
    raw.aclrtMemsetAsync(ptr, N, 0x5A, 8, 0)
    raw.aclrtSynchronizeStream(0)
    assert dev_bytes(ptr, N) == b"\x5a" * 8 + pattern(N, 3)[8:]
    stream = raw.aclrtCreateStream()
    raw.aclrtSynchronizeStream(stream)
    raw.aclrtDestroyStream(stream)
    with pytest.raises(ContextReleaseError) as e:
        raw.aclrtResetDevice(0)
    assert e.value.code == 507007
    raw.aclrtFree(ptr)
    raw.aclrtDestroyContext(context)


def test_spec_3_3_every_create_is_a_new_context_and_the_last_is_current(dev, created):
    """docs/runtime-model.md §3.3: a process may hold any number of contexts; each
    aclrtCreateContext gives a new handle, distinct from the default context, and the one
    created last is current."""
    default = raw.aclrtGetCurrentContext()
    first = raw.aclrtCreateContext(0)
    created.append(first)
    second = raw.aclrtCreateContext(0)
    created.append(second)
    assert len({default, first, second}) == 3
    assert 0 not in (first, second)
    assert raw.aclrtGetCurrentContext() == second
    raw.aclrtSetCurrentContext(first)
    assert raw.aclrtGetCurrentContext() == first
    raw.aclrtSetCurrentContext(default)
    raw.aclrtDestroyContext(first)
    raw.aclrtDestroyContext(second)
    assert raw.aclrtGetCurrentContext() == default


# -- §3.3 aclrtDestroyContext ----------------------------------------------------------------------
def test_spec_3_3_destroying_the_default_context_is_107002(dev):
    """docs/runtime-model.md §3.3: aclrtDestroyContext of a device's default context -> 107002;
    the context stays current and usable."""
    default = raw.aclrtGetCurrentContext()
    with pytest.raises(ContextNullError) as e:
        raw.aclrtDestroyContext(default)
    assert e.value.code == 107002
    assert raw.aclrtGetCurrentContext() == default
    raw.aclrtDestroyStream(raw.aclrtCreateStream())


def test_spec_3_3_destroying_a_context_twice_is_107002(dev, created):
    """docs/runtime-model.md §3.3: aclrtDestroyContext of a handle already destroyed -> 107002."""
    default = raw.aclrtGetCurrentContext()
    context = raw.aclrtCreateContext(0)
    created.append(context)
    raw.aclrtSetCurrentContext(default)
    raw.aclrtDestroyContext(context)
    with pytest.raises(ContextNullError) as e:
        raw.aclrtDestroyContext(context)
    assert e.value.code == 107002
    assert raw.aclrtGetCurrentContext() == default


def test_spec_3_3_destroying_the_current_context_leaves_the_thread_without_one(dev, cann, created):
    """docs/runtime-model.md §3.3: destroying the calling thread's current context leaves it with
    no context (no fall back to the default context, still alive): aclrtCreateStream and
    aclrtGetDevice -> 107002, aclrtGetCurrentContext -> 107002 (8.5.0: 0 and NULL) until
    aclrtSetDevice makes the default context current again."""
    default = raw.aclrtGetCurrentContext()
    context = raw.aclrtCreateContext(0)
    created.append(context)
    raw.aclrtDestroyContext(context)
    with pytest.raises(ContextNullError) as e1:
        raw.aclrtCreateStream()
    assert e1.value.code == 107002
    with pytest.raises(ContextNullError) as e2:
        raw.aclrtGetDevice()
    assert e2.value.code == 107002
    if since(cann, "9.0.1"):
        with pytest.raises(ContextNullError) as e3:
            raw.aclrtGetCurrentContext()
        assert e3.value.code == 107002
    else:
        assert raw.aclrtGetCurrentContext() == 0
    raw.aclrtSetDevice(0)
    try:
        assert raw.aclrtGetCurrentContext() == default
        raw.aclrtDestroyStream(raw.aclrtCreateStream())
    finally:
        raw.aclrtResetDevice(0)


def test_spec_3_3_another_thread_keeps_the_dead_handle(backend, created):
    """docs/runtime-model.md §3.3: a thread that had a context current when another thread
    destroyed it keeps the dead handle: aclrtGetCurrentContext reports it (no liveness check),
    calls that need a context -> 107002."""
    context = raw.aclrtCreateContext(0)
    created.append(context)
    adopted, destroyed = threading.Event(), threading.Event()

    def other() -> tuple[int, AclError | None]:
        raw.aclrtSetCurrentContext(context)
        adopted.set()
        assert destroyed.wait(THREAD_TIMEOUT), "the context was never destroyed"
        handle = raw.aclrtGetCurrentContext()
        try:
            raw.aclrtCreateStream()
        except AclError as exc:
            return handle, exc
        return handle, None

    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(other)
        try:
            assert adopted.wait(THREAD_TIMEOUT), "the other thread never set the context"
            raw.aclrtDestroyContext(context)
        finally:
            destroyed.set()
        handle, error = future.result(timeout=THREAD_TIMEOUT)
    assert handle == context
    assert isinstance(error, ContextNullError), error
    assert error.code == 107002


@pytest.mark.cann("9.1.0")
def test_spec_3_3_destroying_a_context_destroys_its_streams(dev, created):
    """docs/runtime-model.md §3.3: a context's streams go with it: aclrtSynchronizeStream and
    aclrtDestroyStream of one -> 107017 (from 9.1.0; 8.5.0 and 9.0.1 do not validate stream
    handles, §3.4)."""
    default = raw.aclrtGetCurrentContext()
    context = raw.aclrtCreateContext(0)
    created.append(context)
    stream = raw.aclrtCreateStream()
    raw.aclrtSetCurrentContext(default)
    raw.aclrtDestroyContext(context)
    with pytest.raises(InvalidHandleError) as e1:
        raw.aclrtSynchronizeStream(stream)
    assert e1.value.code == 107017
    with pytest.raises(InvalidHandleError) as e2:
        raw.aclrtDestroyStream(stream)
    assert e2.value.code == 107017


# -- §3.3 device lifetime --------------------------------------------------------------------------
def test_spec_3_3_created_context_keeps_device_memory_across_reset(backend, created):
    """docs/runtime-model.md §3.3: aclrtResetDevice releases only the default context; a created
    context keeps the device and its memory alive: after the last reset the block still reads
    back, aclrtGetMemInfo still counts it as used, it can be freed, and a further reset ->
    507007."""
    data = pattern(2 * MiB, 5)
    raw.aclrtSetDevice(0)
    free_before = hbm_free()
    ptr = device_with(data)
    taken = free_before - hbm_free()
    assert taken >= len(data)
    context = raw.aclrtCreateContext(0)
    created.append(context)
    raw.aclrtResetDevice(0)  # the last reference of the default context
    assert raw.aclrtGetCurrentContext() == context
    assert raw.aclrtGetDevice() == 0
    assert dev_bytes(ptr, len(data)) == data
    with pytest.raises(ContextReleaseError) as e:
        raw.aclrtResetDevice(0)
    assert e.value.code == 507007
    # Still counted as used: freeing it now gives back what allocating it took (compared
    # within the created context, whatever the contexts themselves hold).
    free_after_reset = hbm_free()
    raw.aclrtFree(ptr)
    assert hbm_free() - free_after_reset == taken
    raw.aclrtDestroyContext(context)


# -- §3.3 aclrtSetCurrentContext / aclrtGetCurrentContext ------------------------------------------
def test_spec_3_3_context_of_another_device_switches_the_device(dev, created):
    """docs/runtime-model.md §3.3: a context of another device may be made current; the thread's
    device (aclrtGetDevice) changes with it, both ways."""
    need_two_devices()
    default = raw.aclrtGetCurrentContext()
    other = raw.aclrtCreateContext(1)
    created.append(other)
    assert raw.aclrtGetDevice() == 1
    raw.aclrtSetCurrentContext(default)
    assert raw.aclrtGetDevice() == 0
    raw.aclrtSetCurrentContext(other)
    assert raw.aclrtGetDevice() == 1
    assert raw.aclrtGetCurrentContext() == other
    raw.aclrtSetCurrentContext(default)
    raw.aclrtDestroyContext(other)
    assert raw.aclrtGetDevice() == 0


def test_spec_3_3_set_device_switches_back_to_the_default_context(dev, created):
    """docs/runtime-model.md §3.3: aclrtSetDevice makes the device's default context current
    again, replacing a created one; destroying the created context then leaves the default
    current."""
    default = raw.aclrtGetCurrentContext()
    context = raw.aclrtCreateContext(0)
    created.append(context)
    assert raw.aclrtGetCurrentContext() == context
    raw.aclrtSetDevice(0)
    try:
        assert raw.aclrtGetCurrentContext() == default
        raw.aclrtDestroyContext(context)
        assert raw.aclrtGetCurrentContext() == default
        raw.aclrtDestroyStream(raw.aclrtCreateStream())
    finally:
        raw.aclrtResetDevice(0)


def test_spec_3_3_set_dead_context_depends_on_the_release(dev, cann, created):
    """docs/runtime-model.md §3.3 Releases: aclrtSetCurrentContext of a destroyed context -> 107000
    and the current context is unchanged (9.0.1, 9.1.0); 8.5.0 takes it (0), reports it back,
    and calls that need a context then get 107002."""
    default = raw.aclrtGetCurrentContext()
    context = raw.aclrtCreateContext(0)
    created.append(context)
    raw.aclrtSetCurrentContext(default)
    raw.aclrtDestroyContext(context)
    if since(cann, "9.0.1"):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtSetCurrentContext(context)
        assert e.value.code == 107000
        assert raw.aclrtGetCurrentContext() == default
        raw.aclrtDestroyStream(raw.aclrtCreateStream())
    else:
        raw.aclrtSetCurrentContext(context)
        assert raw.aclrtGetCurrentContext() == context
        with pytest.raises(ContextNullError) as e2:
            raw.aclrtCreateStream()
        assert e2.value.code == 107002


def test_spec_3_3_get_current_context_without_one_depends_on_the_release(backend, cann):
    """docs/runtime-model.md §3.3 Releases: aclrtGetCurrentContext in a thread without a context
    -> 107002 (9.0.1, 9.1.0); 8.5.0 answers 0 and NULL."""
    if since(cann, "9.0.1"):
        with pytest.raises(ContextNullError) as e:
            raise_from_fresh_thread(raw.aclrtGetCurrentContext)
        assert e.value.code == 107002
    else:
        assert raise_from_fresh_thread(raw.aclrtGetCurrentContext) == 0


# -- §3.3 / §3.4 streams of another context --------------------------------------------------------
def test_spec_3_3_stream_of_another_context_is_107003(dev, created):
    """docs/runtime-model.md §3.3, §3.15: a stream belongs to the context current when it was
    created; given to a call under another context of the same device -> 107003
    (aclrtRecordEvent, aclrtStreamWaitEvent, aclrtSynchronizeStream, aclrtDestroyStream). Back
    in its own context it works, with an event of the other context (the event's context is
    not checked against the stream's)."""
    default = raw.aclrtGetCurrentContext()
    context = raw.aclrtCreateContext(0)
    created.append(context)
    stream = raw.aclrtCreateStream()
    raw.aclrtSetCurrentContext(default)
    event = raw.aclrtCreateEvent()
    raw.aclrtRecordEvent(event, 0)
    raw.aclrtSynchronizeEvent(event)
    calls: dict[str, Callable[[], None]] = {
        "aclrtRecordEvent": lambda: raw.aclrtRecordEvent(event, stream),
        "aclrtStreamWaitEvent": lambda: raw.aclrtStreamWaitEvent(stream, event),
        "aclrtSynchronizeStream": lambda: raw.aclrtSynchronizeStream(stream),
        "aclrtDestroyStream": lambda: raw.aclrtDestroyStream(stream),
    }
    for name, call in calls.items():
        with pytest.raises(StreamContextError) as e:
            call()
        assert e.value.code == 107003, name
    raw.aclrtSetCurrentContext(context)
    raw.aclrtStreamWaitEvent(stream, event)
    raw.aclrtRecordEvent(event, stream)
    raw.aclrtSynchronizeStream(stream)
    assert raw.aclrtQueryEventStatus(event) == COMPLETE
    raw.aclrtDestroyStream(stream)
    raw.aclrtSetCurrentContext(default)
    raw.aclrtDestroyEvent(event)
    raw.aclrtDestroyContext(context)


# -- §3.15 NULL arguments --------------------------------------------------------------------------
_EVENT_NULLS: dict[str, Callable[..., int]] = {
    "aclrtCreateEvent(NULL)": lambda b, e: b.aclrtCreateEvent(null_outputs=1)[0],
    "aclrtCreateEventWithFlag(NULL, SYNC)":
        lambda b, e: b.aclrtCreateEventWithFlag(SYNC, null_outputs=1)[0],
    "aclrtCreateEventWithFlag(NULL, 0)":
        lambda b, e: b.aclrtCreateEventWithFlag(0, null_outputs=1)[0],
    "aclrtCreateEventExWithFlag(NULL, SYNC)":
        lambda b, e: b.aclrtCreateEventExWithFlag(SYNC, null_outputs=1)[0],
    "aclrtCreateEventExWithFlag(NULL, 0)":
        lambda b, e: b.aclrtCreateEventExWithFlag(0, null_outputs=1)[0],
    "aclrtDestroyEvent(NULL)": lambda b, e: b.aclrtDestroyEvent(0),
    "aclrtRecordEvent(NULL, default stream)": lambda b, e: b.aclrtRecordEvent(0, 0),
    "aclrtResetEvent(NULL, default stream)": lambda b, e: b.aclrtResetEvent(0, 0),
    "aclrtStreamWaitEvent(default stream, NULL)": lambda b, e: b.aclrtStreamWaitEvent(0, 0),
    "aclrtSynchronizeEvent(NULL)": lambda b, e: b.aclrtSynchronizeEvent(0),
    "aclrtQueryEventStatus(NULL, status)": lambda b, e: b.aclrtQueryEventStatus(0)[0],
    "aclrtQueryEventStatus(event, NULL)":
        lambda b, e: b.aclrtQueryEventStatus(e, null_outputs=1)[0],
    "aclrtQueryEvent(NULL, status)": lambda b, e: b.aclrtQueryEvent(0)[0],
    "aclrtQueryEvent(event, NULL)": lambda b, e: b.aclrtQueryEvent(e, null_outputs=1)[0],
    "aclrtEventElapsedTime(NULL, start, end)":
        lambda b, e: b.aclrtEventElapsedTime(e, e, null_outputs=1)[0],
    "aclrtEventElapsedTime(ms, NULL, end)": lambda b, e: b.aclrtEventElapsedTime(0, e)[0],
    "aclrtEventElapsedTime(ms, start, NULL)": lambda b, e: b.aclrtEventElapsedTime(e, 0)[0],
}


@pytest.mark.parametrize("call", sorted(_EVENT_NULLS))
def test_spec_3_15_null_argument_is_100000_first(backend, dev, call):
    """docs/runtime-model.md §3.15: a NULL event or output -> 100000, checked before the flags, the
    record state and the current context (also from a thread without one)."""
    fn = _EVENT_NULLS[call]
    event = raw.aclrtCreateEvent()  # never recorded
    with pytest.raises(InvalidParamError) as e1:
        check(fn(backend, event), call)
    assert e1.value.code == 100000
    with pytest.raises(InvalidParamError) as e2:
        raise_from_fresh_thread(lambda: check(fn(backend, event), call))
    assert e2.value.code == 100000
    raw.aclrtDestroyEvent(event)


# -- §3.15 creation --------------------------------------------------------------------------------
_WITH_FLAG_REFUSED = [0, IPC, 0x80, 0x100, 0xFFFFFFFF, IPC | SYNC, DEVICE_USE_ONLY | SYNC,
                      EXTERNAL | SYNC, EXTERNAL | TIME_LINE]
_WITH_FLAG_TAKEN = [SYNC, CAPTURE_STREAM_PROGRESS, TIME_LINE, DEVICE_USE_ONLY, EXTERNAL,
                    SYNC | TIME_LINE, SYNC | CAPTURE_STREAM_PROGRESS | TIME_LINE]
_EX_REFUSED = [0, DEVICE_USE_ONLY, EXTERNAL, DEVICE_USE_ONLY | EXTERNAL, 0x80, 0x100,
               0xFFFFFFFF, DEVICE_USE_ONLY | SYNC, EXTERNAL | TIME_LINE, IPC | SYNC,
               IPC | TIME_LINE, IPC | DEVICE_USE_ONLY]
_EX_TAKEN = [SYNC, CAPTURE_STREAM_PROGRESS, TIME_LINE, IPC, SYNC | TIME_LINE,
             SYNC | CAPTURE_STREAM_PROGRESS | TIME_LINE]


@pytest.mark.parametrize("flag", _WITH_FLAG_REFUSED, ids=hex)
def test_spec_3_15_create_with_flag_refuses(dev, flag):
    """docs/runtime-model.md §3.15: aclrtCreateEventWithFlag refuses a flag with no bit of 0x3F or
    a bit above it (0, ACL_EVENT_IPC) and DEVICE_USE_ONLY or EXTERNAL with other bits ->
    107000."""
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtCreateEventWithFlag(flag)
    assert e.value.code == 107000


def test_spec_3_15_create_with_flag_refuses_device_use_only_with_external(dev):
    """docs/runtime-model.md §3.15: DEVICE_USE_ONLY or EXTERNAL combined with other bits -> 107000,
    so DEVICE_USE_ONLY | EXTERNAL too."""
    with pytest.raises(RtParamInvalidError) as e:
        event = raw.aclrtCreateEventWithFlag(DEVICE_USE_ONLY | EXTERNAL)
        raw.aclrtDestroyEvent(event)
    assert e.value.code == 107000


@pytest.mark.parametrize("flag", _WITH_FLAG_TAKEN, ids=hex)
def test_spec_3_15_create_with_flag_takes(dev, flag):
    """docs/runtime-model.md §3.15: aclrtCreateEventWithFlag takes SYNC, CAPTURE_STREAM_PROGRESS
    and TIME_LINE in any combination, DEVICE_USE_ONLY and EXTERNAL alone: a new event."""
    event = raw.aclrtCreateEventWithFlag(flag)
    assert event != 0
    raw.aclrtDestroyEvent(event)


@pytest.mark.parametrize("flag", _EX_REFUSED, ids=hex)
def test_spec_3_15_create_ex_with_flag_refuses(dev, flag):
    """docs/runtime-model.md §3.15: aclrtCreateEventExWithFlag refuses a flag with no bit of 0x4F
    or a bit above it (so DEVICE_USE_ONLY and EXTERNAL alone) and DEVICE_USE_ONLY, EXTERNAL or
    IPC with other bits -> 107000."""
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtCreateEventExWithFlag(flag)
    assert e.value.code == 107000


@pytest.mark.parametrize("flag", _EX_TAKEN, ids=hex)
def test_spec_3_15_create_ex_with_flag_takes(dev, flag):
    """docs/runtime-model.md §3.15: aclrtCreateEventExWithFlag takes SYNC,
    CAPTURE_STREAM_PROGRESS and TIME_LINE in any combination, and IPC alone."""
    event = raw.aclrtCreateEventExWithFlag(flag)
    assert event != 0
    raw.aclrtDestroyEvent(event)


def test_spec_3_15_create_needs_a_context_checked_after_the_flags(backend):
    """docs/runtime-model.md §3.15: creating an event needs a current context (107002); a bad flag
    is reported first (107000)."""
    creates: dict[str, Callable[[], int]] = {
        "aclrtCreateEvent": raw.aclrtCreateEvent,
        "aclrtCreateEventWithFlag(SYNC)": lambda: raw.aclrtCreateEventWithFlag(SYNC),
        "aclrtCreateEventExWithFlag(SYNC)": lambda: raw.aclrtCreateEventExWithFlag(SYNC),
    }
    for name, create in creates.items():
        with pytest.raises(ContextNullError) as e1:
            raise_from_fresh_thread(create)
        assert e1.value.code == 107002, name
    bad: list[Callable[[], int]] = [lambda: raw.aclrtCreateEventWithFlag(0),
                                    lambda: raw.aclrtCreateEventExWithFlag(DEVICE_USE_ONLY)]
    for create in bad:
        with pytest.raises(RtParamInvalidError) as e2:
            raise_from_fresh_thread(create)
        assert e2.value.code == 107000


def test_spec_3_15_events_are_distinct_handles(dev):
    """docs/runtime-model.md §3.15: each create gives a new non-NULL handle."""
    events = [raw.aclrtCreateEvent(), raw.aclrtCreateEvent(), raw.aclrtCreateEventWithFlag(SYNC),
              raw.aclrtCreateEventExWithFlag(SYNC)]
    assert 0 not in events
    assert len(set(events)) == len(events)
    for event in events:
        raw.aclrtDestroyEvent(event)


# -- §3.15 aclrtRecordEvent / aclrtStreamWaitEvent -------------------------------------------------
def test_spec_3_15_record_of_a_device_use_only_event_is_107000(dev):
    """docs/runtime-model.md §3.15: aclrtRecordEvent of a DEVICE_USE_ONLY event -> 107000."""
    event = raw.aclrtCreateEventWithFlag(DEVICE_USE_ONLY)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtRecordEvent(event, 0)
    assert e.value.code == 107000
    raw.aclrtDestroyEvent(event)


def test_spec_3_15_wait_on_a_never_recorded_default_event_is_107000(dev):
    """docs/runtime-model.md §3.15: aclrtStreamWaitEvent on an aclrtCreateEvent event never
    recorded -> 107000, on the default and on a created stream."""
    event = raw.aclrtCreateEvent()
    stream = raw.aclrtCreateStream()
    for target in (0, stream):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtStreamWaitEvent(target, event)
        assert e.value.code == 107000
    raw.aclrtDestroyStream(stream)
    raw.aclrtDestroyEvent(event)


def test_spec_3_15_wait_on_a_never_recorded_ex_event_does_not_wait(dev):
    """docs/runtime-model.md §3.15: aclrtStreamWaitEvent on an aclrtCreateEventExWithFlag event
    never recorded -> 0, and the stream does not wait: its later work completes."""
    event = raw.aclrtCreateEventExWithFlag(SYNC)
    stream = raw.aclrtCreateStream()
    ptr = device_with(bytes(N))
    raw.aclrtStreamWaitEvent(stream, event)
    raw.aclrtMemsetAsync(ptr, N, 0x7E, N, stream)
    raw.aclrtSynchronizeStream(stream)
    assert dev_bytes(ptr, N) == b"\x7e" * N
    raw.aclrtFree(ptr)
    raw.aclrtDestroyStream(stream)
    raw.aclrtDestroyEvent(event)


@pytest.mark.parametrize(("create", "flag"), [
    ("aclrtCreateEventWithFlag", TIME_LINE),
    ("aclrtCreateEventWithFlag", CAPTURE_STREAM_PROGRESS),
    ("aclrtCreateEventWithFlag", TIME_LINE | CAPTURE_STREAM_PROGRESS),
    ("aclrtCreateEventExWithFlag", TIME_LINE),
], ids=["with-flag-time-line", "with-flag-capture", "with-flag-both", "ex-time-line"])
def test_spec_3_15_wait_on_an_event_without_sync_bits_is_207000(dev, create, flag):
    """docs/runtime-model.md §3.15: aclrtStreamWaitEvent on an event without SYNC, the device-sync
    bit, EXTERNAL or IPC (TIME_LINE alone, for instance) -> 207000, recorded or not, and before
    the context check (a thread without a context gets 207000 too)."""
    event = getattr(raw, create)(flag)
    stream = raw.aclrtCreateStream()
    with pytest.raises(FeatureNotSupportError) as e1:
        raw.aclrtStreamWaitEvent(stream, event)
    assert e1.value.code == 207000
    raw.aclrtRecordEvent(event, 0)
    raw.aclrtSynchronizeStream(0)
    for target in (stream, 0):
        with pytest.raises(FeatureNotSupportError) as e2:
            raw.aclrtStreamWaitEvent(target, event)
        assert e2.value.code == 207000
    with pytest.raises(FeatureNotSupportError) as e3:
        raise_from_fresh_thread(lambda: raw.aclrtStreamWaitEvent(0, event))
    assert e3.value.code == 207000
    raw.aclrtDestroyStream(stream)
    raw.aclrtDestroyEvent(event)


# -- §3.15 cross-stream order ----------------------------------------------------------------------
def test_spec_3_15_a_wait_orders_work_across_streams(dev):
    """docs/runtime-model.md §3.15: work queued on stream B after aclrtStreamWaitEvent(B, event)
    sees what stream A did before aclrtRecordEvent(event, A): an H2D copy on A, a record, a wait
    on B, a D2D copy on B from that memory, synchronising only B -> the copy holds the source."""
    data = pattern(MiB, 9)
    src = pinned_with(data)
    first, second = device_with(bytes(MiB)), device_with(bytes(MiB))
    a, b = raw.aclrtCreateStream(), raw.aclrtCreateStream()
    event = raw.aclrtCreateEvent()
    raw.aclrtMemcpyAsync(first, MiB, src, MiB, H2D, a)
    raw.aclrtRecordEvent(event, a)
    raw.aclrtStreamWaitEvent(b, event)
    raw.aclrtMemcpyAsync(second, MiB, first, MiB, D2D, b)
    raw.aclrtSynchronizeStream(b)
    assert dev_bytes(second, MiB) == data
    raw.aclrtSynchronizeStream(a)
    assert raw.aclrtQueryEventStatus(event) == COMPLETE
    raw.aclrtDestroyEvent(event)
    for stream in (a, b):
        raw.aclrtDestroyStream(stream)
    for ptr in (first, second):
        raw.aclrtFree(ptr)
    raw.aclrtFreeHost(src)


def test_spec_3_15_a_wait_for_a_completed_record_does_not_wait(dev):
    """docs/runtime-model.md §3.15: a record already complete means no wait: the waiting stream's
    later work runs and sees the recording stream's earlier work."""
    data = pattern(N, 21)
    src = pinned_with(data)
    first, second = device_with(bytes(N)), device_with(bytes(N))
    a, b = raw.aclrtCreateStream(), raw.aclrtCreateStream()
    event = raw.aclrtCreateEventWithFlag(SYNC)
    raw.aclrtMemcpyAsync(first, N, src, N, H2D, a)
    raw.aclrtRecordEvent(event, a)
    raw.aclrtSynchronizeEvent(event)
    raw.aclrtStreamWaitEvent(b, event)
    raw.aclrtMemcpyAsync(second, N, first, N, D2D, b)
    raw.aclrtSynchronizeStream(b)
    assert dev_bytes(second, N) == data
    raw.aclrtDestroyEvent(event)
    for stream in (a, b):
        raw.aclrtDestroyStream(stream)
    for ptr in (first, second):
        raw.aclrtFree(ptr)
    raw.aclrtFreeHost(src)


@pytest.mark.fake_only(_DEFERRED)
def test_spec_3_15_fake_without_the_wait_the_copy_reads_stale_data(fake, dev):
    """docs/runtime-model.md §3.15 (docs/fidelity.md row 70): without the wait, synchronising
    only stream B runs its D2D copy before stream A's H2D copy: the copy holds the old bytes, as
    on a device that has not run A yet; A's copy lands when A is synchronised."""
    data = pattern(MiB, 9)
    src = pinned_with(data)
    first, second = device_with(bytes(MiB)), device_with(bytes(MiB))
    a, b = raw.aclrtCreateStream(), raw.aclrtCreateStream()
    event = raw.aclrtCreateEvent()
    raw.aclrtMemcpyAsync(first, MiB, src, MiB, H2D, a)
    raw.aclrtRecordEvent(event, a)
    raw.aclrtMemcpyAsync(second, MiB, first, MiB, D2D, b)
    raw.aclrtSynchronizeStream(b)
    assert dev_bytes(second, MiB) == bytes(MiB)
    raw.aclrtSynchronizeStream(a)
    assert dev_bytes(first, MiB) == data
    assert dev_bytes(second, MiB) == bytes(MiB)
    raw.aclrtDestroyEvent(event)
    for stream in (a, b):
        raw.aclrtDestroyStream(stream)
    for ptr in (first, second):
        raw.aclrtFree(ptr)
    raw.aclrtFreeHost(src)


# -- §3.15 aclrtSynchronizeEvent -------------------------------------------------------------------
def test_spec_3_15_synchronize_of_a_never_recorded_event_returns(dev):
    """docs/runtime-model.md §3.15: aclrtSynchronizeEvent of an event never recorded -> 0 at once,
    for every kind of event, and needs no current context."""
    events = [raw.aclrtCreateEvent(), raw.aclrtCreateEventWithFlag(SYNC),
              raw.aclrtCreateEventWithFlag(TIME_LINE), raw.aclrtCreateEventExWithFlag(SYNC)]
    for event in events:
        raw.aclrtSynchronizeEvent(event)
        raise_from_fresh_thread(functools.partial(raw.aclrtSynchronizeEvent, event))
        raw.aclrtDestroyEvent(event)


def test_spec_3_15_synchronize_event_waits_for_the_work_before_the_record(dev):
    """docs/runtime-model.md §3.15: aclrtSynchronizeEvent blocks until the latest record
    completed, which is when the stream's earlier work has run: the memset queued before the
    record has landed, the record is COMPLETE. A thread without a context may synchronise it."""
    ptr = device_with(bytes(N))
    stream = raw.aclrtCreateStream()
    event = raw.aclrtCreateEvent()
    raw.aclrtMemsetAsync(ptr, N, 0x3D, N, stream)
    raw.aclrtRecordEvent(event, stream)
    raise_from_fresh_thread(lambda: raw.aclrtSynchronizeEvent(event))
    assert raw.aclrtQueryEventStatus(event) == COMPLETE
    assert dev_bytes(ptr, N) == b"\x3d" * N
    raw.aclrtDestroyStream(stream)
    raw.aclrtDestroyEvent(event)
    raw.aclrtFree(ptr)


# -- §3.15 aclrtQueryEventStatus / aclrtQueryEvent -------------------------------------------------
@pytest.mark.parametrize(("create", "flag", "status"), [
    ("aclrtCreateEvent", None, NOT_READY),
    ("aclrtCreateEventWithFlag", SYNC, NOT_READY),
    ("aclrtCreateEventWithFlag", TIME_LINE, NOT_READY),
    ("aclrtCreateEventExWithFlag", SYNC, COMPLETE),
    ("aclrtCreateEventExWithFlag", TIME_LINE, COMPLETE),
], ids=["default", "with-flag-sync", "with-flag-time-line", "ex-sync", "ex-time-line"])
def test_spec_3_15_query_status_of_a_never_recorded_event(dev, create, flag, status):
    """docs/runtime-model.md §3.15: aclrtQueryEventStatus of an event never recorded: NOT_READY (0)
    for aclrtCreateEvent and WithFlag events (unlike CUDA), COMPLETE (1) for ExWithFlag
    events."""
    event = getattr(raw, create)() if flag is None else getattr(raw, create)(flag)
    assert raw.aclrtQueryEventStatus(event) == status
    raw.aclrtDestroyEvent(event)


def test_spec_3_15_deprecated_query_of_never_recorded_events(dev):
    """docs/runtime-model.md §3.15: the deprecated aclrtQueryEvent reports an event never recorded
    as COMPLETE (ACL_EVENT_STATUS_COMPLETE = 0) and refuses ExWithFlag events -> 207000."""
    event = raw.aclrtCreateEvent()
    assert raw.aclrtQueryEvent(event) == OLD_COMPLETE
    ex = raw.aclrtCreateEventExWithFlag(SYNC)
    with pytest.raises(FeatureNotSupportError) as e:
        raw.aclrtQueryEvent(ex)
    assert e.value.code == 207000
    raw.aclrtDestroyEvent(event)
    raw.aclrtDestroyEvent(ex)


def test_spec_3_15_query_of_a_pending_record_is_not_ready_until_it_completes(dev):
    """docs/runtime-model.md §3.15: while the latest record is pending aclrtQueryEventStatus says
    NOT_READY (aclrtQueryEvent: 1); once it completed, COMPLETE (aclrtQueryEvent: 0). The
    records are held back behind a wait for an ACL_EVENT_SYNC event recorded only later; each
    is queried once while pending (the fake lets the device run up to a record it reported
    NOT_READY, docs/fidelity.md row 70, and does not hold a stream for such a wait, row 71)."""
    stream = raw.aclrtCreateStream()
    gate = hold(stream)
    first, second = raw.aclrtCreateEvent(), raw.aclrtCreateEvent()
    raw.aclrtRecordEvent(first, stream)
    raw.aclrtRecordEvent(second, stream)
    assert raw.aclrtQueryEventStatus(first) == NOT_READY
    assert raw.aclrtQueryEvent(second) == OLD_NOT_READY
    release(gate)
    raw.aclrtSynchronizeStream(stream)
    for event in (first, second):
        assert raw.aclrtQueryEventStatus(event) == COMPLETE
        assert raw.aclrtQueryEvent(event) == OLD_COMPLETE
        raw.aclrtDestroyEvent(event)
    raw.aclrtDestroyStream(stream)


def test_spec_3_15_the_latest_record_counts(dev):
    """docs/runtime-model.md §3.15: the latest record counts: an event whose first record
    completed is NOT_READY again while a second record is pending."""
    a, b = raw.aclrtCreateStream(), raw.aclrtCreateStream()
    event = raw.aclrtCreateEvent()
    raw.aclrtRecordEvent(event, a)
    raw.aclrtSynchronizeStream(a)
    assert raw.aclrtQueryEventStatus(event) == COMPLETE
    gate = hold(b)
    raw.aclrtRecordEvent(event, b)
    assert raw.aclrtQueryEventStatus(event) == NOT_READY
    release(gate)
    raw.aclrtSynchronizeEvent(event)
    assert raw.aclrtQueryEventStatus(event) == COMPLETE
    raw.aclrtDestroyEvent(event)
    for stream in (a, b):
        raw.aclrtDestroyStream(stream)


def test_spec_3_15_polling_the_status_ends_in_complete(dev):
    """docs/runtime-model.md §3.15: a loop polling aclrtQueryEventStatus for a record behind
    queued work ends (at most 100 polls, 10 ms apart) with COMPLETE, and the work before the
    record has landed then."""
    ptr = device_with(bytes(MiB))
    stream = raw.aclrtCreateStream()
    event = raw.aclrtCreateEvent()
    raw.aclrtMemsetAsync(ptr, MiB, 0x6B, MiB, stream)
    raw.aclrtRecordEvent(event, stream)
    status = NOT_READY
    for _ in range(100):
        status = raw.aclrtQueryEventStatus(event)
        if status == COMPLETE:
            break
        time.sleep(0.01)
    assert status == COMPLETE
    assert dev_bytes(ptr, MiB) == b"\x6b" * MiB
    raw.aclrtDestroyEvent(event)
    raw.aclrtDestroyStream(stream)
    raw.aclrtFree(ptr)


@pytest.mark.fake_only(_DEFERRED)
def test_spec_3_15_fake_first_query_of_a_pending_record_is_not_ready(fake, dev):
    """docs/runtime-model.md §3.15 (docs/fidelity.md row 70): the first query of a pending record
    reports NOT_READY and lets the device run up to it, so the next query reports COMPLETE (for
    aclrtQueryEventStatus and the deprecated aclrtQueryEvent alike)."""
    ptr = device_with(bytes(N))
    stream = raw.aclrtCreateStream()
    event = raw.aclrtCreateEvent()
    raw.aclrtMemsetAsync(ptr, N, 0x19, N, stream)
    raw.aclrtRecordEvent(event, stream)
    assert raw.aclrtQueryEventStatus(event) == NOT_READY
    assert raw.aclrtQueryEventStatus(event) == COMPLETE
    assert dev_bytes(ptr, N) == b"\x19" * N
    raw.aclrtRecordEvent(event, stream)
    assert raw.aclrtQueryEvent(event) == OLD_NOT_READY
    assert raw.aclrtQueryEvent(event) == OLD_COMPLETE
    raw.aclrtDestroyEvent(event)
    raw.aclrtDestroyStream(stream)
    raw.aclrtFree(ptr)


# -- §3.15 aclrtEventElapsedTime -------------------------------------------------------------------
def test_spec_3_15_elapsed_time_with_a_never_recorded_event_is_507000(dev):
    """docs/runtime-model.md §3.15: aclrtEventElapsedTime with either event never recorded ->
    507000."""
    start, end = raw.aclrtCreateEvent(), raw.aclrtCreateEvent()
    with pytest.raises(InternalError) as e1:
        raw.aclrtEventElapsedTime(start, end)
    assert e1.value.code == 507000
    raw.aclrtRecordEvent(start, 0)
    raw.aclrtSynchronizeStream(0)
    for pair in ((start, end), (end, start)):
        with pytest.raises(InternalError) as e2:
            raw.aclrtEventElapsedTime(*pair)
        assert e2.value.code == 507000
    raw.aclrtDestroyEvent(start)
    raw.aclrtDestroyEvent(end)


def test_spec_3_15_elapsed_time_before_the_records_completed_is_107006(dev):
    """docs/runtime-model.md §3.15: aclrtEventElapsedTime while a record has not completed ->
    107006 ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID (the records are held behind a wait for an
    ACL_EVENT_SYNC event recorded only later); once they completed, a time."""
    stream = raw.aclrtCreateStream()
    gate = hold(stream)
    start, end = raw.aclrtCreateEvent(), raw.aclrtCreateEvent()
    raw.aclrtRecordEvent(start, stream)
    raw.aclrtRecordEvent(end, stream)
    with pytest.raises(EventTimestampInvalidError) as e:
        raw.aclrtEventElapsedTime(start, end)
    assert e.value.code == 107006
    release(gate)
    raw.aclrtSynchronizeStream(stream)
    assert raw.aclrtEventElapsedTime(start, end) >= 0.0
    raw.aclrtDestroyEvent(start)
    raw.aclrtDestroyEvent(end)
    raw.aclrtDestroyStream(stream)


@pytest.mark.parametrize("wait", ["aclrtSynchronizeStream", "aclrtSynchronizeEvent"])
def test_spec_3_15_elapsed_time_after_synchronize_is_a_float(dev, wait):
    """docs/runtime-model.md §3.15: once both records completed (synchronising the stream, or the
    end event), aclrtEventElapsedTime gives milliseconds as a float: >= 0 from start to end,
    <= 0 the other way round, 0 from an event to itself."""
    ptr = device_with(bytes(MiB))
    stream = raw.aclrtCreateStream()
    start, end = raw.aclrtCreateEvent(), raw.aclrtCreateEvent()
    raw.aclrtRecordEvent(start, stream)
    raw.aclrtMemsetAsync(ptr, MiB, 0x42, MiB, stream)
    raw.aclrtRecordEvent(end, stream)
    if wait == "aclrtSynchronizeStream":
        raw.aclrtSynchronizeStream(stream)
    else:
        raw.aclrtSynchronizeEvent(end)
    forward = raw.aclrtEventElapsedTime(start, end)
    assert isinstance(forward, float)
    assert forward >= 0.0
    backward = raw.aclrtEventElapsedTime(end, start)
    assert isinstance(backward, float)
    assert backward <= 0.0
    assert raw.aclrtEventElapsedTime(start, start) == 0.0
    raw.aclrtDestroyEvent(start)
    raw.aclrtDestroyEvent(end)
    raw.aclrtDestroyStream(stream)
    raw.aclrtFree(ptr)


# -- §3.15 aclrtResetEvent -------------------------------------------------------------------------
def test_spec_3_15_reset_makes_a_sync_event_never_recorded(dev):
    """docs/runtime-model.md §3.15: aclrtResetEvent queues a reset: once it ran, an ACL_EVENT_SYNC
    event counts as never recorded again (NOT_READY); an ExWithFlag event -> 207000."""
    stream = raw.aclrtCreateStream()
    event = raw.aclrtCreateEventWithFlag(SYNC)
    raw.aclrtRecordEvent(event, stream)
    raw.aclrtSynchronizeStream(stream)
    assert raw.aclrtQueryEventStatus(event) == COMPLETE
    raw.aclrtResetEvent(event, stream)
    raw.aclrtSynchronizeStream(stream)
    assert raw.aclrtQueryEventStatus(event) == NOT_READY
    ex = raw.aclrtCreateEventExWithFlag(SYNC)
    with pytest.raises(FeatureNotSupportError) as e:
        raw.aclrtResetEvent(ex, stream)
    assert e.value.code == 207000
    raw.aclrtDestroyEvent(ex)
    raw.aclrtDestroyEvent(event)
    raw.aclrtDestroyStream(stream)


# -- §3.15 destroyed event handles -----------------------------------------------------------------
def _destroyed_event_is_107017_everywhere() -> None:
    """A destroyed event -> 107017 from every call that takes it, a second destroy included;
    the handle is checked before the stream and before the current context."""
    dead = dead_event()
    live = raw.aclrtCreateEvent()
    raw.aclrtRecordEvent(live, 0)
    raw.aclrtSynchronizeEvent(live)
    calls: dict[str, Callable[[], object]] = {
        "aclrtDestroyEvent": lambda: raw.aclrtDestroyEvent(dead),
        "aclrtRecordEvent": lambda: raw.aclrtRecordEvent(dead, 0),
        "aclrtRecordEvent(dead stream)": lambda: raw.aclrtRecordEvent(dead, dead_stream()),
        "aclrtResetEvent": lambda: raw.aclrtResetEvent(dead, 0),
        "aclrtStreamWaitEvent": lambda: raw.aclrtStreamWaitEvent(0, dead),
        "aclrtSynchronizeEvent": lambda: raw.aclrtSynchronizeEvent(dead),
        "aclrtQueryEventStatus": lambda: raw.aclrtQueryEventStatus(dead),
        "aclrtQueryEvent": lambda: raw.aclrtQueryEvent(dead),
        "aclrtEventElapsedTime(dead, live)": lambda: raw.aclrtEventElapsedTime(dead, live),
        "aclrtEventElapsedTime(live, dead)": lambda: raw.aclrtEventElapsedTime(live, dead),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidHandleError) as e:
            call()
        assert e.value.code == 107017, name
    for name in ("aclrtRecordEvent", "aclrtStreamWaitEvent", "aclrtDestroyEvent"):
        _, error = in_fresh_thread(calls[name])
        assert isinstance(error, InvalidHandleError), (name, error)
        assert error.code == 107017, name
    raw.aclrtDestroyEvent(live)


@pytest.mark.cann("9.1.0")
def test_spec_3_15_destroyed_event_is_107017(dev):
    """docs/runtime-model.md §3.15: aclrtDestroyEvent twice -> 107017, and every other call
    given a destroyed event -> 107017, before the stream and the current context are looked
    at."""
    _destroyed_event_is_107017_everywhere()


@pytest.mark.fake_only(STALE_EVENT_BEFORE_9_1)
@pytest.mark.cann("8.5.0", "9.0.1")
def test_spec_3_15_destroyed_event_is_107017_on_the_fake_before_9_1(fake, dev):
    """docs/runtime-model.md §3.15 Releases (docs/fidelity.md row 69): 8.5.0 and 9.0.1 do not
    validate event handles; the fake answers 107017 for a destroyed event as on 9.1.0."""
    _destroyed_event_is_107017_everywhere()


@pytest.mark.cann("9.1.0")
def test_spec_3_15_destroyed_stream_is_107017_before_the_flags(dev):
    """docs/runtime-model.md §3.15: the handles are checked before the flags: a wait of a
    destroyed stream on a TIME_LINE-only event -> 107017, not 207000; a record on it -> 107017
    (from 9.1.0, which validates stream handles, §3.4)."""
    event = raw.aclrtCreateEventWithFlag(TIME_LINE)
    stream = dead_stream()
    with pytest.raises(InvalidHandleError) as e1:
        raw.aclrtStreamWaitEvent(stream, event)
    assert e1.value.code == 107017
    with pytest.raises(InvalidHandleError) as e2:
        raw.aclrtRecordEvent(event, stream)
    assert e2.value.code == 107017
    raw.aclrtDestroyEvent(event)


def test_spec_3_15_record_and_wait_without_a_context_are_107002(dev):
    """docs/runtime-model.md §3.15: NULL as the stream means the current context's default
    stream: aclrtRecordEvent / aclrtStreamWaitEvent with it from a thread without a context ->
    107002."""
    event = raw.aclrtCreateEvent()
    raw.aclrtRecordEvent(event, 0)
    raw.aclrtSynchronizeEvent(event)
    calls: list[Callable[[], None]] = [lambda: raw.aclrtRecordEvent(event, 0),
                                       lambda: raw.aclrtStreamWaitEvent(0, event)]
    for call in calls:
        with pytest.raises(ContextNullError) as e:
            raise_from_fresh_thread(call)
        assert e.value.code == 107002
    raw.aclrtDestroyEvent(event)
