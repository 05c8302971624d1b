"""The process has one fake engine (acl_mem's library) and one private second engine: a
newer fake takes the engine from an older one, which then refuses its calls instead of
acting on the newer one's memory; a fake made active again starts afresh; a private fake
leaves the active one alone."""

from __future__ import annotations

import pytest

import acl_mem
from acl_mem import _backend, raw
from acl_mem.errors import BackendError, FreedBufferError
from acl_mem.fake import make_backend


def test_a_newer_fake_takes_the_engine_and_the_older_refuses_its_calls():
    older = make_backend()
    assert older.aclrtSetDevice(0) == 0
    rc, ptr = older.aclrtMalloc(4096, 0)
    assert rc == 0
    newer = make_backend()
    assert older.superseded and not newer.superseded
    for call in (lambda: older.aclrtFree(ptr), lambda: older.aclrtMalloc(64, 0),
                 older.live_blocks, lambda: older.inject_fault("aclrtMalloc")):
        with pytest.raises(BackendError):
            call()
    # The newer fake's device is fresh: the older one's block is not there to free.
    assert newer.aclrtSetDevice(0) == 0
    assert newer.live_blocks() == []


def test_the_active_fake_made_active_again_starts_afresh():
    with _backend.using_backend(make_backend()):
        dev = acl_mem.Device(0).use()
        buf = dev.malloc(4096)
        active = _backend.get()
        with _backend.using_backend(make_backend()):  # takes the engine
            assert active.superseded
        assert not active.superseded  # restored: a fresh device
        assert active.live_blocks() == []
        with pytest.raises(FreedBufferError):
            buf.copy_from(bytes(16))  # released from Python's side, not freed twice
        raw.aclrtSetDevice(0)
        raw.aclrtFree(raw.aclrtMalloc(64))
        raw.aclrtResetDevice(0)


def test_a_private_fake_leaves_the_active_fake_alone():
    with _backend.using_backend(make_backend()), acl_mem.Device(0) as dev:
        buf = dev.malloc(4096)
        buf.copy_from(b"kept" * 1024)
        private = make_backend(private=True)
        assert private.aclrtSetDevice(0) == 0
        rc, ptr = private.aclrtMalloc(4096, 0)
        assert rc == 0
        # Its own bytes, whatever its addresses (without a fixed window of its own, e.g.
        # under AddressSanitizer, they may be the first engine's numbers).
        assert private.aclrtMemset(ptr, 4096, 9, 4096) == 0
        # Its DVPP calls reach its own engine, not the first one's.
        rc, dvpp = private.acldvppMalloc(4096)
        assert rc == 0
        assert {b.api for b in private.live_blocks()} == {"aclrtMalloc", "acldvppMalloc"}
        assert private.acldvppFree(dvpp) == 0 and private.aclrtFree(ptr) == 0
        assert not _backend.get().superseded
        assert buf.read() == b"kept" * 1024
        assert [b.start for b in _backend.get().live_blocks()] == [buf.ptr]
        buf.free()


def test_a_newer_private_fake_takes_the_private_engine():
    first = make_backend(private=True)
    second = make_backend(private=True)
    assert first.superseded and not second.superseded
    with pytest.raises(BackendError):
        first.aclrtSetDevice(0)
    assert not _backend.get().superseded


def test_an_in_process_replay_leaves_the_active_fake_alone(tmp_path):
    from acl_mem.trace import read_trace, record, replay_trace

    path = tmp_path / "run.jsonl"
    with _backend.using_backend(make_backend()), acl_mem.Device(0) as dev:
        with record(path):
            dev.malloc(100).free()
        buf = dev.malloc(4096)
        buf.copy_from(b"mine" * 1024)
        report = replay_trace(read_trace(path))
        assert report.differences == 0 and report.replayed == report.calls > 0
        assert not _backend.get().superseded
        assert buf.read() == b"mine" * 1024
        buf.free()


def test_the_private_engine_is_an_unnamed_copy_no_other_user_can_swap(tmp_path):
    """The second engine is loaded from an unnamed file of the process: nothing is
    written to TMPDIR (a shared directory there could let another user replace the copy
    before it is loaded)."""
    import os
    import subprocess
    import sys

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    script = ("import acl_mem\n"
              "fake = acl_mem.fake.make_backend(private=True)\n"
              "assert fake.aclrtSetDevice(0) == 0\n"
              "print(fake.path)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "TMPDIR": str(shared)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("/proc/self/fd/")
    assert list(shared.iterdir()) == []


@pytest.mark.fake_only("reconfigures the fake inside a device block")
def test_a_device_block_across_a_fake_reset_ends_quietly():
    """fake.reset() inside ``with Device(0):`` released the block's reference with every
    device: the block's end resets nothing (no ContextReleaseError), and a block entered
    after the reset pairs its set and reset as usual, nested ones too."""
    from acl_mem import fake

    with acl_mem.Device(0) as dev:
        buf = dev.malloc(64)
        fake.reset()
        assert buf.freed
    with pytest.raises(acl_mem.ContextNullError):
        acl_mem.Device.current()
    with acl_mem.Device(0):
        with acl_mem.Device(0):
            pass
        assert acl_mem.Device.current() == acl_mem.Device(0)  # the outer reference holds
    with pytest.raises(acl_mem.ContextNullError):
        acl_mem.Device.current()
