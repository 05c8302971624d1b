"""A new fake (``acl_mem.fake.reset()``) or another backend installed while a worker thread
is learning its device's default context: the worker's handle belongs to the engine
being replaced, and must not be taken for the new one's."""

from __future__ import annotations

import threading

import pytest
from interleave import Meanwhile

import acl_mem
from acl_mem import _backend, _context
from acl_mem.errors import AclError, BackendError, FreedBufferError

FAKE_ONLY = "a fake replaced under a worker thread"


def _read_in_a_new_thread(buffer: acl_mem.DeviceBuffer) -> list[object]:
    """What a thread with no context gets reading ``buffer`` (it adopts the buffer's
    device's default context first)."""
    out: list[object] = []

    def read() -> None:
        try:
            out.append(buffer.read(8))
        except (AclError, BackendError, FreedBufferError) as exc:  # its fake went
            out.append(exc)

    worker = threading.Thread(target=read)
    worker.start()
    worker.join(30)
    return out


@pytest.mark.fake_only(FAKE_ONLY)
def test_a_reset_racing_a_worker_that_learns_the_default_context(backend, monkeypatch):
    acl_mem.Device(0).use()
    old = acl_mem.Device(0).malloc(64)
    # The reset lands after the worker learnt the old engine's context, before it notes it.
    meanwhile = Meanwhile(acl_mem.fake.reset, after=True)
    monkeypatch.setattr(_context.raw, "aclrtResetDevice",
                        meanwhile.wrap(_context.raw.aclrtResetDevice))
    first = _read_in_a_new_thread(old)
    monkeypatch.undo()
    assert len(first) == 1  # the old buffer's bytes, or a clear error: never a crash
    assert meanwhile.finish() is None
    assert _backend.get().name == "fake"
    # The new engine: a worker adopting device 0's context gets the new one's.
    acl_mem.Device(0).use()
    fresh = acl_mem.Device(0).malloc(64)
    fresh.copy_from(b"new fake" * 8)
    assert _read_in_a_new_thread(fresh) == [b"new fake"]
