"""A forked child and the fake: fresh locks, no inherited context, the parent's memory not
reachable (docs/fidelity.md), and a child that sets its device works normally."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import acl_mem
from acl_mem import MemcpyKind, raw
from acl_mem._hostbuf import ffi

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

FAKE_ONLY = "the fake's behaviour in a forked child; real hardware forbids device use there"


def _in_child(body: Callable[[], dict[str, object]], timeout: float = 10.0) -> dict[str, object]:
    """Run ``body`` in a forked child; its JSON result, or fail on a hang or a crash."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_end)
        try:
            result = body()
        except BaseException as exc:
            result = {"unexpected": repr(exc)}
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            os.close(read_end)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    data = os.read(read_end, 1 << 16)
    os.close(read_end)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status}"
    result: dict[str, object] = json.loads(data)
    assert "unexpected" not in result, result["unexpected"]
    return result


def _address(buffer: bytearray) -> int:
    return int(ffi.cast("uintptr_t", ffi.from_buffer(buffer)))


def _code(call: Callable[[], object]) -> int:
    try:
        call()
    except acl_mem.AclError as exc:
        return exc.code
    return 0


@contextlib.contextmanager
def _held_by_another_thread(lock: Any) -> Iterator[None]:
    """``lock`` held by another thread for the duration of the block."""
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            inside.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(5)
    try:
        yield
    finally:
        release.set()
        holder.join()


@pytest.mark.fake_only(FAKE_ONLY)
def test_child_does_not_hang_when_another_thread_held_the_fake(fake, dev):
    """The binding loads the DVPP libraries under a lock of its own (and takes it on each
    DVPP call): a child forked while another thread held it still makes DVPP calls."""
    def child() -> dict[str, object]:
        raw.aclrtSetDevice(0)
        ptr = raw.aclrtMalloc(4096, 0)
        raw.aclrtFree(ptr)
        raw.acldvppFree(raw.acldvppMalloc(4096))
        return {"ok": True}

    with _held_by_another_thread(fake._lock):
        assert _in_child(child) == {"ok": True}


@pytest.mark.fake_only(FAKE_ONLY)
def test_children_forked_while_threads_allocate_with_the_checker_on(fake):
    """The checker keeps Python stacks under a lock the allocating threads take all the
    time: each of 20 children forked meanwhile allocates, checks and frees in time."""
    acl_mem.fake.configure(check=True, hazards="count")
    stop = threading.Event()

    def busy() -> None:
        with acl_mem.Device(0) as mine:
            while not stop.is_set():
                mine.malloc(4096).free()

    workers = [threading.Thread(target=busy) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        def child() -> dict[str, object]:
            with acl_mem.Device(0) as mine:
                mine.malloc(100).free()
            return {"findings": len(acl_mem.check())}

        for _ in range(20):
            assert _in_child(child) == {"findings": 0}
    finally:
        stop.set()
        for worker in workers:
            worker.join()
        acl_mem.fake.reset()


@pytest.mark.fake_only(FAKE_ONLY)
def test_child_does_not_hang_when_another_thread_held_a_vmm_release_step(fake, dev):
    """A VMM release step holds a module lock while it decides a release: a child forked
    while another thread held it closes its inherited objects and makes new ones."""
    from acl_mem import vmm

    inherited = vmm.reserve_and_map(vmm.granularity(dev))

    def child() -> dict[str, object]:
        inherited.close()  # the parent's: nothing to give back here
        with acl_mem.Device(0) as mine:
            fresh = vmm.reserve_and_map(vmm.granularity(mine))
            fresh.write(b"child")
            fresh.close()
        return {"ok": True}

    with _held_by_another_thread(vmm._steps_lock):
        assert _in_child(child) == {"ok": True}
    inherited.close()


@pytest.mark.fake_only(FAKE_ONLY)
def test_child_does_not_hang_on_a_vmm_object_another_thread_was_using(fake, dev):
    """A VMM object's own lock (held through each copy and change) taken by another
    thread at the fork: the child closes the object it inherited all the same."""
    from acl_mem import vmm

    inherited = vmm.reserve_and_map(vmm.granularity(dev))

    def child() -> dict[str, object]:
        inherited.close()
        return {"closed": inherited.closed}

    with _held_by_another_thread(inherited._lock):
        assert _in_child(child) == {"closed": True}
    inherited.close()


@pytest.mark.parametrize("where", ["acl_mem._hostbuf:_dlpack_lock",
                                   "acl_mem._fake.leak_report:_arm_lock",
                                   "acl_mem._fake.engine_fake:_bindings_lock"])
def test_module_locks_are_new_in_a_child(where):
    """Every module-level lock another thread may hold at a fork is made anew in the
    child (each guards a step a child takes again: a DLPack export, arming the exit
    report, loading a fake)."""
    import importlib

    module_name, name = where.split(":")
    module = importlib.import_module(module_name)

    def child() -> dict[str, object]:
        lock = getattr(module, name)
        got = lock.acquire(timeout=2)
        if got:
            lock.release()
        return {"acquired": got}

    with _held_by_another_thread(getattr(module, name)):
        assert _in_child(child) == {"acquired": True}


@pytest.mark.fake_only(FAKE_ONLY)
def test_child_does_not_hang_when_another_thread_held_the_stack_lock(fake):
    """The C engine's binding keeps Python stacks under a lock of its own while the
    checker is on: a child forked while another thread held it still allocates."""
    acl_mem.fake.configure(check=True, hazards="count")

    def child() -> dict[str, object]:
        with acl_mem.Device(0) as mine:
            mine.malloc(100).free()
        return {"ok": True}

    try:
        with _held_by_another_thread(fake._stacks_lock):
            assert _in_child(child) == {"ok": True}
    finally:
        acl_mem.fake.reset()


@pytest.mark.fake_only(FAKE_ONLY)
def test_child_has_no_context_and_cannot_reach_parent_memory(fake, dev):
    parent = raw.aclrtMalloc(4096, 0)
    raw.aclrtMemset(parent, 4096, 0x5A, 4096)
    pinned = raw.aclrtMallocHost(64)
    try:
        def child() -> dict[str, object]:
            out = bytearray(16)
            address = _address(out)
            return {
                "malloc": _code(lambda: raw.aclrtMalloc(64, 0)),
                "get_device": _code(raw.aclrtGetDevice),
                "set_device": _code(lambda: raw.aclrtSetDevice(0)),
                "read_parent": _code(lambda: raw.aclrtMemcpy(
                    address, 16, parent, 16, MemcpyKind.DEVICE_TO_HOST)),
                "free_parent": _code(lambda: raw.aclrtFree(parent)),
                "free_parent_pinned": _code(lambda: raw.aclrtFreeHost(pinned)),
                "bytes_read": out.hex(),
            }

        result = _in_child(child)
        assert result["malloc"] == 107002
        assert result["get_device"] == 107002
        assert result["set_device"] == 0
        assert result["read_parent"] == 107000
        assert result["free_parent"] == 107000
        assert result["free_parent_pinned"] == 107000
        assert result["bytes_read"] == "00" * 16
        # The parent is untouched by anything the child did.
        out = bytearray(4)
        raw.aclrtMemcpy(_address(out), 4, parent, 4, MemcpyKind.DEVICE_TO_HOST)
        assert out == b"ZZZZ"
    finally:
        raw.aclrtFree(parent)
        raw.aclrtFreeHost(pinned)


@pytest.mark.fake_only(FAKE_ONLY)
def test_child_works_normally_after_set_device(fake, dev):
    free_before = raw.aclrtGetMemInfo(acl_mem.MemAttr.HBM_MEM)[0]
    held = raw.aclrtMalloc(64 << 20, 0)
    try:
        def child() -> dict[str, object]:
            raw.aclrtSetDevice(0)
            total_free = raw.aclrtGetMemInfo(acl_mem.MemAttr.HBM_MEM)[0]
            with acl_mem.Device(0) as device, device.malloc(1000) as buf:
                buf.copy_from(b"x" * 1000)
                data = buf.read(3)
            return {"free": total_free, "data": data.decode()}

        result = _in_child(child)
        # The child's device starts empty: the parent's 64 MiB are not its own.
        assert result["free"] == free_before
        assert result["data"] == "xxx"
    finally:
        raw.aclrtFree(held)
