"""Virtual-memory objects used from several threads: a close, offload, shrink or map of
another thread lands exactly inside the window of a copy, map, offload or grow (the
window is found by wrapping a call the first one makes after its checks), and nothing
is written into memory that is no longer the object's, lost, or left half-changed."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from interleave import Meanwhile

import acl_mem
from acl_mem import vmm
from acl_mem.errors import FreedBufferError
from acl_mem.vmm import ExpandableSegment, MappedMemory, PhysicalMemory, VirtualRange

MiB = 1 << 20
@pytest.fixture
def chunk(dev: acl_mem.Device) -> Iterator[int]:
    yield vmm.granularity(dev)


def test_a_write_racing_a_close_and_a_new_mapping_there_stays_its_own(dev, chunk,
                                                                        monkeypatch):
    memory = MappedMemory(chunk)
    after: list[MappedMemory] = []

    def close_and_remap() -> None:
        memory.close()
        new = MappedMemory(chunk)
        new.write(b"\x22" * chunk)
        after.append(new)

    meanwhile = Meanwhile(close_and_remap)
    monkeypatch.setattr(vmm, "ensure_context", meanwhile.wrap(vmm.ensure_context))
    memory.write(b"\x11" * chunk)  # passed its check before the other thread's close
    monkeypatch.undo()
    assert meanwhile.finish() is None
    try:
        assert after[0].read(chunk) == b"\x22" * chunk
    finally:
        after[0].close()


def test_a_mapping_write_racing_its_close_stays_its_own(dev, chunk, monkeypatch):
    rng = VirtualRange(chunk)
    physical = PhysicalMemory(chunk)
    mapping = rng.map(physical)
    others: list[Any] = []

    def unmap_and_map_other() -> None:
        mapping.close()
        other = PhysicalMemory(chunk)
        again = rng.map(other)
        again.write(b"\x22" * chunk)
        others.extend([again, other])

    meanwhile = Meanwhile(unmap_and_map_other)
    monkeypatch.setattr(acl_mem.buffers.DeviceBuffer, "from_ptr",
                        meanwhile.wrap(acl_mem.buffers.DeviceBuffer.from_ptr))
    try:
        rng.write(b"\x11" * chunk)
        monkeypatch.undo()
        assert meanwhile.finish() is None
        assert others[0].read(chunk) == b"\x22" * chunk
    finally:
        for part in (*others, physical, rng):
            part.close()


def test_a_write_racing_an_offload_is_kept_or_refused(dev, chunk, monkeypatch):
    memory = MappedMemory(chunk)
    memory.write(b"\x00" * chunk)
    outcome: list[object] = []

    def write() -> None:
        try:
            memory.write(b"\x33" * 16)
            outcome.append("written")
        except ValueError:  # offloaded: refused, nothing lost silently
            outcome.append("refused")

    meanwhile = Meanwhile(write, after=True)
    monkeypatch.setattr(vmm.raw, "aclrtMemcpy", meanwhile.wrap(vmm.raw.aclrtMemcpy))
    memory.offload()  # the write comes right after its copy to host
    monkeypatch.undo()
    assert meanwhile.finish() is None
    memory.restore()
    try:
        kept = memory.read(16) == b"\x33" * 16
        assert outcome == (["written"] if kept else ["refused"])
    finally:
        memory.close()


def test_a_shrink_racing_a_grow_leaves_whole_chunks(dev, chunk, monkeypatch):
    segment = ExpandableSegment(4 * chunk)
    segment.grow(chunk)
    meanwhile = Meanwhile(lambda: segment.shrink(0))
    monkeypatch.setattr(VirtualRange, "map", meanwhile.wrap(VirtualRange.map))
    try:
        segment.grow(3 * chunk)
        monkeypatch.undo()
        assert meanwhile.finish() is None
        assert segment.size == 0  # the grow whole, then the shrink whole
        segment.grow(2 * chunk)
        segment.write(b"\x44" * (2 * chunk))
        assert segment.read(2 * chunk) == b"\x44" * (2 * chunk)
    finally:
        segment.close()


def test_a_close_racing_a_map_is_refused_not_half_done(dev, chunk, monkeypatch):
    rng = VirtualRange(chunk)
    physical = PhysicalMemory(chunk)
    meanwhile = Meanwhile(rng.close)
    monkeypatch.setattr(vmm, "ensure_context", meanwhile.wrap(vmm.ensure_context))
    mapping = rng.map(physical)
    monkeypatch.undo()
    failure = meanwhile.finish()
    # The close came after the map: refused while mapped, and the range still usable.
    assert isinstance(failure, ValueError), failure
    mapping.write(b"\x55" * 8)
    assert rng.read(8) == b"\x55" * 8
    mapping.close()
    physical.close()
    rng.close()
    with pytest.raises(FreedBufferError):
        rng.read(8)


def test_closing_a_mapped_memory_while_another_thread_closes_its_range(dev, chunk,
                                                                         monkeypatch):
    """The composite closes its parts (physical memory, mapping, range) while the other
    thread closes the range it reached through ``memory.range``: no deadlock, and the
    range refuses while its mapping is live."""
    memory = MappedMemory(chunk)
    rng = memory.range
    meanwhile = Meanwhile(rng.close)
    monkeypatch.setattr(vmm.raw, "aclrtFreePhysical", meanwhile.wrap(vmm.raw.aclrtFreePhysical))
    closer = threading.Thread(target=memory.close, daemon=True)  # (a deadlock fails, not hangs)
    closer.start()
    closer.join(30)
    assert not closer.is_alive(), "the two closes wait for each other"
    monkeypatch.undo()
    failure = meanwhile.finish()
    assert failure is None or isinstance(failure, (ValueError, acl_mem.AclError)), failure
    assert memory.closed and rng.closed


def test_a_range_write_holds_its_mapping_until_the_copy_is_done(dev, chunk, monkeypatch):
    """Another thread drops the last reference to the mapping a range's write found: the
    mapping (its finalizer unmaps) stays until the copy is done."""
    rng = VirtualRange(chunk)
    physical = PhysicalMemory(chunk)
    holder = {"mapping": rng.map(physical)}
    meanwhile = Meanwhile(lambda: holder.clear())
    monkeypatch.setattr(acl_mem.buffers.DeviceBuffer, "from_ptr",
                        meanwhile.wrap(acl_mem.buffers.DeviceBuffer.from_ptr))
    try:
        rng.write(b"\x11" * 16)  # not 107000 from a copy into an unmapped range
        monkeypatch.undo()
        assert meanwhile.finish() is None
        with pytest.raises(ValueError):  # the mapping went with its last reference
            rng.read(16)
    finally:
        physical.close()
        rng.close()


def test_a_composite_collected_where_a_release_step_runs_takes_no_lock(dev, chunk,
                                                                       monkeypatch):
    """A MappedMemory in a reference cycle, collected inside another thread's release
    step, while a third holds its range's lock waiting for that step: its parts release
    themselves, taking no object lock, so nothing waits for ever."""
    gc.disable()
    try:
        memory = MappedMemory(chunk)
        memory.cycle = memory  # type: ignore[attr-defined]  # only the collector frees it
        rng = memory.range
        del memory
        spare = PhysicalMemory(chunk)
        mapping_started, step_running = threading.Event(), threading.Event()

        def ensure(device: int) -> None:  # inside VirtualRange.map, under the range's lock
            if threading.current_thread().name == "mapper":
                mapping_started.set()
                step_running.wait(5)
            original_ensure(device)

        def allocate(*args: Any) -> Any:  # inside an acquisition step
            if threading.current_thread().name == "allocator":
                mapping_started.wait(5)
                step_running.set()
                gc.collect()
            return original_allocate(*args)

        original_ensure, original_allocate = vmm.ensure_context, vmm.raw.aclrtMallocPhysical
        monkeypatch.setattr(vmm, "ensure_context", ensure)
        monkeypatch.setattr(vmm.raw, "aclrtMallocPhysical", allocate)
        made: list[Any] = []

        def map_spare() -> None:
            acl_mem.Device(0).use()
            with contextlib.suppress(Exception):
                made.append(rng.map(spare, 0))

        def allocate_one() -> None:
            acl_mem.Device(0).use()
            made.append(PhysicalMemory(chunk))

        threads = [threading.Thread(target=map_spare, name="mapper", daemon=True),
                   threading.Thread(target=allocate_one, name="allocator", daemon=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not any(thread.is_alive() for thread in threads), "deadlock"
        monkeypatch.undo()
        for part in reversed(made):
            part.close()
        spare.close()
    finally:
        gc.enable()
