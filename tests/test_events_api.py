"""The Pythonic contexts and events (docs/runtime-model.md §3.3, §3.15), on every backend."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import acl_mem
from acl_mem import raw
from acl_mem.errors import (
    ContextNullError,
    DestroyedStreamError,
    EventTimestampInvalidError,
    InvalidHandleError,
)

MiB = 1 << 20


def test_a_wait_orders_two_streams(dev):
    """Work after stream B's wait sees what stream A wrote before its record point."""
    data = np.arange(MiB // 4, dtype=np.uint32)
    pinned = dev.malloc_host(MiB)  # pinned: the copy is queued, not done at once
    pinned.numpy(np.uint32)[:] = data
    first, second = dev.malloc(MiB), dev.malloc(MiB)
    out = np.zeros_like(data)
    with dev.stream() as a, dev.stream() as b:
        first.copy_from_async(pinned, stream=a)
        done = a.record()
        b.wait(done)
        second.copy_from_async(first, stream=b)
        b.synchronize()
        second.copy_to(out)
        done.destroy()
    assert (out == data).all()


def test_event_timing_and_queries(dev):
    with dev.stream() as stream:
        start = stream.record()
        end = stream.record()
        with pytest.raises(EventTimestampInvalidError) as caught:
            start.elapsed(end)
        assert caught.value.code == 107006
        stream.synchronize()
        assert start.query() and end.query()
        assert start.elapsed(end) >= 0.0
        end.synchronize()
        for event in (start, end):
            event.destroy()
            event.destroy()  # a second destroy does nothing
            assert event.destroyed


def test_polling_ends(dev):
    """A polling loop on a pending record ends (the device makes progress)."""
    with dev.stream() as stream, acl_mem.Event() as event:
        buf = dev.malloc(MiB)
        buf.memset_async(0, stream=stream)
        event.record(stream)
        for _ in range(100):
            if event.query():
                break
        assert event.query()


def test_an_event_never_recorded(dev):
    with acl_mem.Event() as event:
        assert not event.query()  # NOT_READY, unlike CUDA
        event.synchronize()  # returns at once
    with pytest.raises(ValueError):
        _ = event.handle


def test_a_forgotten_event_is_destroyed(dev):
    event = acl_mem.Event()
    handle = event.handle
    del event
    gc.collect()
    with pytest.raises(InvalidHandleError) as caught:
        raw.aclrtDestroyEvent(handle)
    assert caught.value.code == 107017


def test_a_context_keeps_its_device_open(dev):
    """A created context holds the device: memory allocated in it survives the default
    context's reset, and destroying the context leaves the thread without one."""
    with acl_mem.Device(1) as other:
        ctx = other.context()
        assert raw.aclrtGetDevice() == 1
        buf = raw.aclrtMalloc(4096, 0)
        raw.aclrtMemset(buf, 4096, 7, 4096)
    # Device(1)'s default context was reset to zero references; ctx still holds it.
    ctx.use()
    out = bytearray(16)
    raw.aclrtMemcpy(np.frombuffer(out, np.uint8).ctypes.data, 16, buf, 16, 2)
    assert out == bytes([7]) * 16
    raw.aclrtFree(buf)
    assert repr(ctx).startswith("<Context handle=")
    ctx.destroy()
    ctx.destroy()
    assert ctx.destroyed
    with pytest.raises(ContextNullError) as caught:
        raw.aclrtCreateStream()
    assert caught.value.code == 107002
    dev.set_current()  # the fixture's reset needs device 0 current
    dev.reset()
    dev.set_current()


def test_an_event_outlives_acl_finalize(backend, mocker):
    """aclFinalize ends every event: destroying one afterwards (a with-block ending, say)
    passes no dead handle to the runtime (undefined there) and does not raise."""
    raw.aclrtSetDevice(0)
    event = acl_mem.Event()
    raw.aclFinalize()
    destroy = mocker.spy(raw, "aclrtDestroyEvent")
    event.destroy()
    assert event.destroyed
    assert destroy.call_count == 0


@pytest.mark.parametrize("end", ["finalize", "reset"])
def test_an_event_ended_by_the_runtime_is_refused(backend, mocker, end):
    """After aclFinalize, or a reset of its device to zero references, an event is
    destroyed: every use raises ValueError without handing the dead handle to the runtime
    (undefined there), and destroy() does nothing."""
    raw.aclrtSetDevice(0)
    event = acl_mem.Event()
    if end == "finalize":
        raw.aclFinalize()
    else:
        raw.aclrtResetDevice(0)
    calls = [mocker.spy(raw, name) for name in (
        "aclrtQueryEventStatus", "aclrtRecordEvent", "aclrtSynchronizeEvent",
        "aclrtDestroyEvent", "aclrtEventElapsedTime")]
    assert event.destroyed
    for use in (event.query, event.record, event.synchronize,
                lambda: event.elapsed(event), lambda: event.handle):
        with pytest.raises(ValueError):
            use()
    event.destroy()
    assert all(spy.call_count == 0 for spy in calls)


def test_a_context_ended_by_acl_finalize_is_refused(backend, mocker):
    raw.aclrtSetDevice(0)
    ctx = acl_mem.Device(0).context()
    raw.aclFinalize()
    assert ctx.destroyed
    setter = mocker.spy(raw, "aclrtSetCurrentContext")
    with pytest.raises(ValueError):
        ctx.use()
    assert setter.call_count == 0
    ctx.destroy()


def test_a_stream_goes_with_its_created_context(dev):
    """docs/runtime-model.md §3.3: aclrtDestroyContext takes the context's streams with it;
    the Stream objects say so and refuse, as after a reset, and their destroy() does
    nothing. A stream of the default context stays."""
    kept = dev.stream()
    ctx = dev.context()
    gone = dev.stream()
    pinned, buf = dev.malloc_host(64), dev.malloc(64)
    ctx.destroy()
    dev.set_current()
    assert gone.destroyed and not kept.destroyed
    for use in (gone.synchronize, lambda: gone.record(),
                lambda: buf.copy_from_async(pinned, stream=gone)):
        with pytest.raises(DestroyedStreamError):
            use()
    gone.destroy()
    gone.destroy()
    buf.copy_from_async(pinned, stream=kept)
    kept.synchronize()
    kept.destroy()
    buf.free()
    pinned.free()
    dev.reset()
