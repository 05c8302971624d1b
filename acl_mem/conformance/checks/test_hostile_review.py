"""Regressions from a hostile review that must hold on every backend: device activation
across threads (docs/runtime-model.md §3.2), borrowed host memory (§3.7, §4.8, §4.9)."""

from __future__ import annotations

import pytest

import acl_mem
from acl_mem import HostBuffer, MallocPolicy, raw

from .helpers import raise_from_fresh_thread


def test_a_device_another_thread_released_is_made_current_again_spec_3_2(backend):
    """docs/runtime-model.md §3.2: a reset that drops a device's last reference releases it
    for every thread. A Device call in a thread that had it current then finds no device
    current, so it makes the device current again (as in a fresh thread) instead of
    failing with 107002."""
    dev = acl_mem.Device(0)

    def body() -> bytes:
        first = dev.malloc(64)  # makes device 0 current here, and keeps it
        raise_from_fresh_thread(dev.reset)  # drops that last reference from elsewhere
        assert first.freed
        try:
            with dev.malloc(64) as again:
                again.copy_from(b"back")
                return again.read(4)
        finally:
            dev.reset()

    assert raise_from_fresh_thread(body) == b"back"


def test_host_from_ptr_refuses_device_memory_spec_4_9(dev):
    """docs/runtime-model.md §4.9: aclrtPointerGetAttributes says where memory is.
    HostBuffer.from_ptr over device memory is refused (ValueError) before anything can view
    it: the host touching a device address would crash the interpreter."""
    ptr = raw.aclrtMalloc(4096, MallocPolicy.HUGE_FIRST)
    try:
        with pytest.raises(ValueError):
            HostBuffer.from_ptr(ptr, 4096)
        with pytest.raises(ValueError):
            HostBuffer.from_ptr(ptr + 64, 64)
    finally:
        raw.aclrtFree(ptr)


@pytest.mark.cann("9.0.1", "9.1.0")  # aclrtMemGetAddressRange exists from 9.0.1
def test_host_from_ptr_refuses_a_size_past_the_block_spec_4_8(dev):
    """docs/runtime-model.md §4.8: aclrtMemGetAddressRange gives the aclrtMallocHost block
    holding an address. A borrowed HostBuffer larger than what is left of the block is
    refused (views of it would read unmapped memory); up to the block's end it works."""
    ptr = raw.aclrtMallocHost(4096)
    try:
        base, size = raw.aclrtMemGetAddressRange(ptr)
        with pytest.raises(ValueError):
            HostBuffer.from_ptr(ptr, base + size - ptr + 1)
        with pytest.raises(ValueError):
            HostBuffer.from_ptr(ptr + 128, 1 << 40)
        whole = HostBuffer.from_ptr(ptr + 128, base + size - ptr - 128)
        memoryview(whole)[-1:] = b"z"
        assert whole.read(1, whole.size - 1) == b"z"
        whole.free()
    finally:
        raw.aclrtFreeHost(ptr)
