"""A hazard or checker finding is reported in the thread whose call made it: the library
tags each queued finding with its thread, and the binding leaves another live Python
thread's findings for that thread's next call (a finding of a thread that ended, or of a
C thread, is reported by whichever thread drains it)."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

import pytest

import acl_mem
from acl_mem import MemAttr, raw
from acl_mem.errors import HazardWarning

FAKE_ONLY = "hazards are the fake's own diagnostics"


def _hazard_warnings(call: Callable[[], object]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(w.message) for w in caught if issubclass(w.category, HazardWarning)]


def _free_behind_the_binding(fake: object, ptr: int) -> None:
    """aclrtFree straight through the library: the hazard it makes is queued, and no
    binding code runs after it to report it."""
    lib, ffi = fake.lib, fake.ffi  # type: ignore[attr-defined]
    assert lib.aclrtFree(ffi.cast("void *", ptr)) == 0


def _synchronize_the_freed_work(stream: int) -> None:
    found = _hazard_warnings(lambda: raw.aclrtSynchronizeStream(stream))
    assert len(found) == 1 and "queued-work-on-freed-memory" in found[0]
    raw.aclrtDestroyStream(stream)


def _queued_block() -> tuple[int, int]:
    stream = raw.aclrtCreateStream()
    ptr = raw.aclrtMalloc(4096, 0)
    raw.aclrtMemsetAsync(ptr, 4096, 1, 4096, stream)
    return ptr, stream


@pytest.mark.fake_only(FAKE_ONLY)
def test_a_finding_waits_for_the_live_thread_that_made_it(fake, dev):
    acl_mem.fake.configure(hazards="warn")
    ptr, stream = _queued_block()
    made, go = threading.Event(), threading.Event()
    in_worker: list[str] = []

    def worker() -> None:
        raw.aclrtSetDevice(0)
        _free_behind_the_binding(fake, ptr)
        made.set()
        go.wait(10)
        in_worker.extend(_hazard_warnings(raw.aclrtGetDevice))
        raw.aclrtResetDevice(0)

    thread = threading.Thread(target=worker)
    thread.start()
    assert made.wait(10)
    try:
        assert _hazard_warnings(lambda: raw.aclrtGetMemInfo(MemAttr.HBM_MEM)) == []
    finally:
        go.set()
        thread.join(10)
    assert len(in_worker) == 1 and "free-while-queued" in in_worker[0]
    _synchronize_the_freed_work(stream)


@pytest.mark.fake_only(FAKE_ONLY)
def test_a_finding_of_a_thread_that_ended_is_reported_by_the_next_call(fake, dev):
    acl_mem.fake.configure(hazards="warn")
    ptr, stream = _queued_block()

    def worker() -> None:  # no call through the binding: the thread reports nothing
        assert fake.lib.aclrtSetDevice(0) == 0
        _free_behind_the_binding(fake, ptr)
        assert fake.lib.aclrtResetDevice(0) == 0

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(10)
    found = _hazard_warnings(lambda: raw.aclrtGetMemInfo(MemAttr.HBM_MEM))
    assert len(found) == 1 and "free-while-queued" in found[0]
    _synchronize_the_freed_work(stream)
