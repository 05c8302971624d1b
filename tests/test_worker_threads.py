"""A worker thread that only uses objects made elsewhere needs nothing special: each call
makes the object's device context current there (acl_mem/_context.py), without adding a
device reference, and never switches away a context the thread already has."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest

import acl_mem
from acl_mem import Device, ExpandablePool, SegmentPool, raw
from acl_mem._lifecycle import state
from acl_mem.conformance.checks.helpers import raise_from_fresh_thread
from acl_mem.errors import ContextNullError, FreedBufferError
from acl_mem.vmm import (
    ExpandableSegment,
    MappedMemory,
    PhysicalMemory,
    VirtualRange,
    granularity,
)

pytestmark = pytest.mark.fake_only("threads against the fake's per-thread contexts")


#: A worker that never set a device, its result or exception handed back.
in_worker = raise_from_fresh_thread


def test_a_worker_copies_into_a_buffer_of_the_main_thread(fake, dev):
    buf = dev.malloc(64)
    pinned = dev.malloc_host(64)

    def work() -> tuple[bytes, bytes, bytes]:
        buf.copy_from(b"\x07" * 64)
        first = buf.read()
        buf.memset(0x11, 32)
        buf.copy_to(pinned)
        out = bytearray(64)
        buf.copy_to(out)
        return first, bytes(out), bytes(pinned.view())

    first, out, host = in_worker(work)
    assert first == b"\x07" * 64
    assert out == host == b"\x11" * 32 + b"\x07" * 32
    buf.free()
    pinned.free()


def test_a_worker_adds_no_device_reference(fake):
    # The end of the block releases the device although a worker used its memory.
    with Device(0) as dev:
        buf = dev.malloc(64)
        refs = state.set_count(0)
        in_worker(lambda: buf.copy_from(bytes(64)))
        assert state.set_count(0) == refs
    with pytest.raises(FreedBufferError):
        buf.read()


def test_arrays_streams_and_events_in_a_worker(fake, dev):
    array = dev.to_device(np.arange(16, dtype=np.int32))
    stream = dev.stream()

    def work() -> tuple[Any, bool]:
        array.copy_from_host(np.arange(16, dtype=np.int32) * 2, stream=stream)
        event = stream.record()
        event.synchronize()
        done = event.query()
        stream.wait(event)
        stream.synchronize()
        event.destroy()
        return array.copy_to_host(), done

    values, done = in_worker(work)
    assert done
    assert values.tolist() == list(range(0, 32, 2))
    stream.destroy()
    array.free()


def test_an_event_made_in_the_main_thread_in_a_worker(fake, dev):
    event = dev.default_stream.record()
    in_worker(event.synchronize)
    assert in_worker(event.query)
    in_worker(event.destroy)
    assert event.destroyed


def test_pools_grow_and_trim_in_a_worker(fake, dev):
    with SegmentPool(dev, block_size=1 << 20) as pool:
        def work() -> bytes:
            segment = pool.allocate(100)
            segment.copy_from(b"\x05" * 100)
            data = segment.read()
            segment.free()
            pool.release_unused()
            return data

        assert in_worker(work) == b"\x05" * 100
        assert pool.stats().reserved == 0
    chunk = granularity(dev)
    with ExpandablePool(dev, 4 * chunk) as expandable:
        segment = in_worker(lambda: expandable.allocate(chunk + 1))
        in_worker(lambda: segment.memset(3))
        assert segment.read(4) == b"\x03" * 4
        segment.free()


def test_vmm_objects_in_a_worker(fake, dev):
    chunk = granularity(dev)
    with MappedMemory(chunk, device=dev) as memory:
        in_worker(lambda: memory.write(b"abc", 8))
        assert in_worker(lambda: memory.read(3, 8)) == b"abc"
        in_worker(memory.offload)
        in_worker(memory.restore)
        assert memory.read(3, 8) == b"abc"
    with VirtualRange(chunk) as rng, PhysicalMemory(chunk, device=dev) as physical:
        mapping = in_worker(lambda: rng.map(physical))
        in_worker(lambda: rng.write(b"xyz", 1))
        assert in_worker(lambda: mapping.read(3, 1)) == b"xyz"
        mapping.close()
    with ExpandableSegment(2 * chunk, device=dev) as segment:
        in_worker(lambda: segment.grow(chunk))
        assert segment.size == chunk


def test_a_thread_on_another_device_is_not_switched(fake, dev):
    if Device.count() < 2:
        pytest.skip("needs two devices")
    buf = dev.malloc(64)

    def work() -> int:
        with Device(1):
            out = bytearray(64)
            # Whatever the runtime answers for another device's memory, as before.
            with contextlib.suppress(acl_mem.AclError):
                buf.copy_to(out)
            return raw.aclrtGetDevice()

    assert in_worker(work) == 1
    buf.free()


def test_a_context_set_outside_acl_mem_is_kept(fake, dev):
    """A handle the mirror cannot place (set behind acl_mem's back) stays current."""
    buf = dev.malloc(64)

    def work() -> int:
        handle = raw.aclrtCreateContext(0)
        try:
            # Forget what the raw layer told the mirror, as for a context set from C.
            del state._local.current, state._local.context, state._local.foreign
            buf.copy_from(bytes(64))
            return raw.aclrtGetCurrentContext() - handle
        finally:
            raw.aclrtDestroyContext(handle)

    assert in_worker(work) == 0
    buf.free()


def test_a_device_only_a_created_context_holds(fake):
    context = Device(0).context()
    buf = Device(0).malloc(64)
    assert in_worker(lambda: (buf.copy_from(b"\x01" * 64), buf.read())[1]) == b"\x01" * 64
    buf.free()
    context.destroy()
    with pytest.raises(ContextNullError):
        raw.aclrtGetDevice()
