"""Regressions from a hostile review that must hold on every backend: device activation
across threads (docs/runtime-model.md §3.2), borrowed host memory (§3.7, §4.8, §4.9)."""

from __future__ import annotations

import acl_mem

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
