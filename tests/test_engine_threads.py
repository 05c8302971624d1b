"""Threads hammering the fake at once: copies run with its lock released, so frees of
pinned memory, allocations and copies interleave for real. Nothing may crash, leak or
lose bytes, and the pools must add up afterwards."""

from __future__ import annotations

import _thread
import random
import threading
from collections.abc import Callable

import pytest

import acl_mem
from acl_mem import MemAttr, MemcpyKind, raw
from acl_mem._hostbuf import ffi

THREADS = 4
ROUNDS = 150


def _address(buffer: bytearray) -> int:
    return int(ffi.cast("uintptr_t", ffi.from_buffer(buffer)))


@pytest.mark.fake_only("drives the fake's lock-free copy path from several threads")
def test_threads_allocate_copy_and_free_at_once(fake, dev):
    total = raw.aclrtGetMemInfo(MemAttr.HBM_MEM)[1]
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with acl_mem.Device(0):
                start.wait()
                for _ in range(ROUNDS):
                    size = rng.choice((64, 4096, 1 << 20))
                    fill = bytearray([seed + 1]) * size
                    back = bytearray(size)
                    device = raw.aclrtMalloc(size, 0)
                    pinned = raw.aclrtMallocHost(size)
                    raw.aclrtMemcpy(device, size, _address(fill), size,
                                    MemcpyKind.HOST_TO_DEVICE)
                    raw.aclrtMemcpy(pinned, size, device, size, MemcpyKind.DEVICE_TO_HOST)
                    raw.aclrtMemcpy(_address(back), size, pinned, size,
                                    MemcpyKind.HOST_TO_HOST)
                    assert back == fill
                    raw.aclrtFreeHost(pinned)
                    raw.aclrtFree(device)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a worker hung"
    assert errors == []
    assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM)[0] == total
    assert fake.live_blocks() == []


def _release_under_copies(dst: int, src: int, size: int, kind: int,
                          release: Callable[[], None]) -> list[int]:
    """Copy ``src`` to ``dst`` 20 times in a thread and call ``release`` (freeing or
    unmapping ``dst``) once the copies run; the outcome code of each copy."""
    copying = threading.Event()
    outcomes: list[int] = []

    def copier() -> None:
        with acl_mem.Device(0):
            for _ in range(20):
                copying.set()
                try:
                    raw.aclrtMemcpy(dst, size, src, size, kind)
                    outcomes.append(0)
                except acl_mem.AclError as exc:
                    outcomes.append(exc.code)

    thread = threading.Thread(target=copier)
    thread.start()
    copying.wait(5)
    release()
    thread.join(30)
    assert not thread.is_alive()
    return outcomes


@pytest.mark.fake_only("drives the fake's lock-free copy path from several threads")
def test_freeing_pinned_memory_under_a_running_copy_never_crashes(fake, dev):
    """The free waits for the copy moving bytes through that memory; copies issued after
    the free fail with 107000."""
    size = 32 << 20
    device = raw.aclrtMalloc(size, 0)
    pinned = raw.aclrtMallocHost(size)
    outcomes = _release_under_copies(pinned, device, size, MemcpyKind.DEVICE_TO_HOST,
                                     lambda: raw.aclrtFreeHost(pinned))
    assert outcomes and set(outcomes) <= {0, 107000}
    assert outcomes[-1] == 107000
    raw.aclrtFree(device)


@pytest.mark.fake_only("drives the fake's lock-free copy path from several threads")
def test_unmapping_under_a_running_copy_never_crashes(fake, dev):
    size = 32 << 20
    prop = raw.aclrtPhysicalMemProp(memAttr=MemAttr.HBM_MEM_HUGE,
                                    location=raw.aclrtMemLocation(id=0, type=1))
    base = raw.aclrtReserveMemAddress(size, 0, 0, 0)
    handle = raw.aclrtMallocPhysical(size, prop, 0)
    raw.aclrtMapMem(base, size, 0, handle, 0)
    device = raw.aclrtMalloc(size, 0)
    outcomes = _release_under_copies(base, device, size, MemcpyKind.DEVICE_TO_DEVICE,
                                     lambda: raw.aclrtUnmapMem(base))
    assert outcomes and set(outcomes) <= {0, 107000}
    assert outcomes[-1] == 107000
    raw.aclrtFreePhysical(handle)
    raw.aclrtReleaseMemAddress(base)
    raw.aclrtFree(device)


@pytest.mark.fake_only("drives the fake's lock-free copy path from several threads")
def test_free_waits_for_a_copy_in_a_thread_threading_does_not_know(fake, dev):
    """A copy running in a thread started with _thread (or by C code) is invisible to
    threading.enumerate(); the free used to take it for dead and unmap under it."""
    size = 256 << 20
    device = raw.aclrtMalloc(size, 0)
    pinned = raw.aclrtMallocHost(size)
    started, finished = threading.Event(), threading.Event()
    outcome: list[int] = []

    def copier() -> None:
        raw.aclrtSetDevice(0)
        started.set()
        try:
            raw.aclrtMemcpy(device, size, pinned, size, MemcpyKind.HOST_TO_DEVICE)
            outcome.append(0)
        except acl_mem.AclError as exc:
            outcome.append(exc.code)
        finally:
            raw.aclrtResetDevice(0)
            finished.set()

    _thread.start_new_thread(copier, ())
    started.wait(5)
    raw.aclrtFreeHost(pinned)
    assert finished.wait(30)
    assert outcome in ([0], [107000])
    raw.aclrtFree(device)
