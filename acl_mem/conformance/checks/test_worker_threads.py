"""Conformance: a worker thread uses objects another thread made (docs/runtime-model.md §3.2,
§3.3).

A new thread has no context (107002 from raw calls). The Pythonic layer gives it the
object's device context for a call on an existing buffer, stream or event: the device's
default context, shared by every thread that sets the device, made current without a
reference of its own, so the block that set the device still releases it at its end.
"""

from __future__ import annotations

from typing import Any

import acl_mem
from acl_mem import raw
from acl_mem.errors import ContextNullError, ContextReleaseError, FreedBufferError

from .helpers import in_fresh_thread, raise_from_fresh_thread


def test_a_worker_copies_into_another_threads_buffer_spec_3_2(dev):
    """§3.2: threads that set a device share its default context: a worker's copy into a
    buffer of the main thread works, and the worker adds no device reference."""
    buf = dev.malloc(256)
    pinned = dev.malloc_host(256)
    stream = dev.stream()
    _, raw_error = in_fresh_thread(lambda: raw.aclrtMemset(buf.ptr, 256, 0, 256))

    def work() -> tuple[Any, ...]:
        buf.copy_from(b"\x2a" * 256)
        buf.memset(0x01, 16)
        buf.copy_to_async(pinned, stream=stream)
        event = stream.record()
        event.synchronize()
        stream.synchronize()
        return buf.read(), bytes(pinned.view()), raw.aclrtGetDevice()

    data, host, device = raise_from_fresh_thread(work)
    assert isinstance(raw_error, ContextNullError)
    assert raw_error.code == 107002
    assert data == host == b"\x01" * 16 + b"\x2a" * 240
    assert device == 0
    stream.destroy()
    pinned.free()
    buf.free()


def test_a_worker_keeps_no_device_open_spec_3_2(backend):
    """§3.2: the reset at the end of the block drops the last reference although a worker
    used the device's memory inside it: the memory is released, nothing is left to reset."""
    with acl_mem.Device(0) as dev:
        buf = dev.malloc(64)
        raise_from_fresh_thread(lambda: buf.copy_from(bytes(64)))
    error = None
    try:
        buf.read()
    except FreedBufferError as exc:
        error = exc
    assert isinstance(error, FreedBufferError)
    _, reset = in_fresh_thread(lambda: raw.aclrtResetDevice(0))
    assert isinstance(reset, ContextReleaseError)
    assert reset.code == 507007
