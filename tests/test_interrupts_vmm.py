"""A KeyboardInterrupt anywhere in the teardown of virtual memory leaves an object whose
next ``close()`` / ``shrink()`` finishes the job, and nothing leaked.

Each teardown is re-run once per line it executes in acl_mem outside the fake's engine
(the Pythonic layer and acl_mem.raw, up to and after the runtime call), interrupted
there (tests/injection.py); the engine's own calls are swept by
tests/test_interrupts_fake.py.
Before teardown was made a sequence of recorded steps, an interrupt that landed after
the runtime had unmapped (or freed, or released) but before the object noted it left a
close() that failed with 107000 for ever and the memory held with no owner, and
``acl_mem.fake.leaks()`` did not list virtual memory at all.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
from injection import interrupted_runs, is_unsignalled

import acl_mem
from acl_mem import FreedBufferError, MemAttr
from acl_mem.vmm import ExpandableSegment, MappedMemory, PhysicalMemory, VirtualRange

pytestmark = [
    pytest.mark.fake_only("re-runs each teardown once per line; the leak check reads the "
                          "fake's list of what the process still holds"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*__del__:pytest.PytestUnraisableExceptionWarning"),
]

MiB = 1 << 20


_ENGINE = os.path.join(os.path.dirname(os.path.abspath(acl_mem.__file__)), "_fake")


def _signalled(frame: FrameType) -> bool:
    return not frame.f_code.co_filename.startswith(_ENGINE) and not is_unsignalled(frame)


def _held() -> list[tuple[str, int]]:
    gc.collect()  # objects an interrupted run dropped are released by their finalizers
    return [(leak.api, leak.address) for leak in acl_mem.fake.leaks()]


def _sweep(dev: acl_mem.Device, build: Callable[[], tuple[Any, Callable[[], object]]],
           finish: Callable[[Any], None]) -> int:
    """Interrupt ``build()``'s teardown at each line in turn; ``finish`` runs it again,
    after which nothing may be held and the device's memory must be whole."""
    assert _held() == []
    free = dev.mem_info(MemAttr.HBM_MEM_HUGE).free
    made: list[Any] = []

    def setup() -> Callable[[], object]:
        obj, teardown = build()
        made.append(obj)
        return teardown

    runs = 0
    for n in interrupted_runs(setup, where=_signalled):
        obj = made.pop()
        finish(obj)
        del obj
        assert _held() == [], f"still held after an interrupt at line event {n}"
        assert dev.mem_info(MemAttr.HBM_MEM_HUGE).free == free, f"line event {n}"
        runs += 1
    assert runs > 20  # the teardown really ran through the layers
    return runs


def _close_again(obj: Any) -> None:
    obj.close()
    assert obj.closed
    obj.close()  # and a third call does nothing


def test_mapped_memory_close(dev):
    def build() -> tuple[MappedMemory, Callable[[], object]]:
        memory = MappedMemory(2 * MiB)
        memory.write(b"data")
        return memory, memory.close

    _sweep(dev, build, _close_again)


def test_mapped_memory_close_while_offloaded(dev):
    def build() -> tuple[MappedMemory, Callable[[], object]]:
        memory = MappedMemory(2 * MiB)
        memory.offload()
        return memory, memory.close

    _sweep(dev, build, _close_again)


def test_mapped_memory_offload_then_restore(dev):
    payload = bytes(range(256))

    def build() -> tuple[MappedMemory, Callable[[], object]]:
        memory = MappedMemory(2 * MiB)
        memory.write(payload, MiB)
        return memory, memory.offload

    def finish(memory: MappedMemory) -> None:
        memory.restore()  # finishes an interrupted offload, then maps the copy back
        assert memory.read(len(payload), MiB) == payload
        _close_again(memory)

    _sweep(dev, build, finish)


@pytest.mark.parametrize("keep", [0, 2 * MiB])
def test_expandable_segment_shrink(dev, keep):
    def build() -> tuple[ExpandableSegment, Callable[[], object]]:
        segment = ExpandableSegment(8 * MiB)
        segment.grow(6 * MiB)
        segment.write(b"head")
        return segment, lambda: segment.shrink(keep)

    def finish(segment: ExpandableSegment) -> None:
        segment.shrink(keep)
        assert segment.size == keep
        if keep:
            assert segment.read(4) == b"head"
        segment.grow(8 * MiB)  # the released chunks map again
        _close_again(segment)

    _sweep(dev, build, finish)


def test_expandable_segment_close(dev):
    def build() -> tuple[ExpandableSegment, Callable[[], object]]:
        segment = ExpandableSegment(8 * MiB)
        segment.grow(4 * MiB)
        return segment, segment.close

    _sweep(dev, build, _close_again)


@pytest.mark.parametrize("part", ["range", "physical", "mapping"])
def test_single_parts_close(dev, part):
    """The one-call teardowns, including the step whose outcome the interrupt hid."""
    def build() -> tuple[Any, Callable[[], object]]:
        rng = VirtualRange(2 * MiB)
        physical = PhysicalMemory(2 * MiB)
        if part == "range":
            physical.close()
            return rng, rng.close
        mapping = rng.map(physical)
        if part == "physical":
            mapping.close()
            rng.close()
            return physical, physical.close
        build.rest = (rng, physical)  # type: ignore[attr-defined]
        return mapping, mapping.close

    def finish(obj: Any) -> None:
        _close_again(obj)
        if part == "mapping":
            for rest in build.rest[::-1]:  # type: ignore[attr-defined]
                rest.close()

    _sweep(dev, build, finish)


def test_interrupted_close_refuses_use(dev):
    """Between the interrupt and the next close(), the half-released object is not used."""
    from injection import run_interrupted

    for n in range(1, 400):
        memory = MappedMemory(2 * MiB)
        if not run_interrupted(memory.close, n, _signalled):
            break
        if memory._closing and not memory.closed:
            with pytest.raises(FreedBufferError):
                memory.read(4)
            with pytest.raises(FreedBufferError):
                memory.write(b"x")
            break
        memory.close()
    else:
        pytest.fail("no interrupt landed inside close()")
    memory.close()
    assert _held() == []


def test_a_reused_value_settles_the_undecided_step(dev):
    """A release whose return an interrupt lost is proven done when the runtime hands the
    same value out again: the retry must not release the new owner's reservation."""
    from acl_mem import vmm

    first = VirtualRange(2 * MiB)
    base = first.address
    # What an interrupt after the runtime's release, before the object noted it, leaves.
    first._closing, first._step_started = True, True
    vmm._undecided[("range", base)] = first
    acl_mem.raw.aclrtReleaseMemAddress(base)
    second = VirtualRange(2 * MiB)
    assert second.address == base  # the fake hands the same base out again
    first.close()
    assert first.closed
    # The second reservation is still there: memory maps into it.
    with PhysicalMemory(2 * MiB) as physical, second.map(physical) as mapping:
        assert mapping.address == base
    second.close()
    assert _held() == []


def test_a_strict_mode_report_during_close_still_finishes_it(fake, dev):
    """Hazards in raise mode are raised after the unmap took effect: close() finishes the
    teardown first (before, the retry met 107000 for ever)."""
    acl_mem.fake.configure(hazards="raise")
    memory = MappedMemory(2 * MiB)
    stream = dev.stream()
    acl_mem.raw.aclrtMemsetAsync(memory.address, 2 * MiB, 1, 2 * MiB, stream.handle)
    with pytest.raises(acl_mem.HazardError):
        memory.close()
    assert memory.closed
    memory.close()
    assert _held() == []
    acl_mem.fake.configure(hazards="count")
    stream.synchronize()  # the queued memset, on unmapped memory, is skipped
