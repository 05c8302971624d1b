"""The fake's memory checker: each finding provoked on purpose and reported.

On hardware these overwrites corrupt data silently; only the fake can show them.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import pytest

import acl_mem
from acl_mem import raw

REASON = "the memory checker is part of the fake device model"
pytestmark = pytest.mark.fake_only(REASON)


def address(buffer: bytearray) -> int:
    return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))


def kinds() -> list[str]:
    return [kind for kind, _ in acl_mem.check()]


def test_writing_into_the_padding_is_reported_at_once_and_by_the_canary(checking):
    with acl_mem.Device(0) as dev:
        buf = dev.malloc(100)  # 160 bytes really reserved (docs/runtime-model.md §3.5)
        data = bytearray(b"x" * 120)
        raw.aclrtMemcpy(buf.ptr, 160, address(data), 120, 1)  # the runtime allows it
        found = acl_mem.check()
        assert [k for k, _ in found] == ["boundary-crossed", "canary-overwritten"]
        assert f"{buf.ptr:#x}" in found[1][1] and "offsets 100..119" in found[1][1]
        assert "test_checker.py" in found[1][1]  # where it was allocated
        buf.free()
        assert kinds().count("canary-overwritten") == 2  # verified again at free


def test_a_memset_into_the_next_block_names_both_neighbours(checking):
    with acl_mem.Device(0) as dev:
        first = dev.malloc_align32(4096)   # exactly one page: blocks are back to back
        second = dev.malloc_align32(4096)
        assert second.ptr == first.ptr + 4096
        raw.aclrtMemset(first.ptr, 8192, 0, 4100)
        message = acl_mem.check()[0][1]
        assert f"{first.ptr:#x}" in message and f"{second.ptr:#x}" in message
        first.free()
        second.free()


def test_memory_is_poisoned_on_allocation(checking):
    with acl_mem.Device(0) as dev:
        buf = dev.malloc(64)
        assert buf.read(8) == b"\xa5" * 8  # read before write shows
        buf.free()


def test_freed_addresses_are_quarantined(checking):
    with acl_mem.Device(0) as dev:
        first = dev.malloc(4096)
        address_of_first = first.ptr
        first.free()
        second = dev.malloc(4096)
        assert second.ptr != address_of_first
        with pytest.raises(acl_mem.RtParamInvalidError) as e:
            raw.aclrtMemset(address_of_first, 64, 0, 64)  # use after free fails loudly
        assert e.value.code == 107000
        second.free()


def test_pool_segments_get_canaries_and_poison(checking):
    fake = acl_mem._backend.get()  # the checking fake configure() installed
    with acl_mem.Device(0) as dev:
        block = dev.malloc(1 << 20)
        segment = block.ptr + 4096
        fake.checker_segment_allocated(block.ptr, segment, 100, 160)
        data = bytearray(b"y" * 110)
        raw.aclrtMemcpy(segment, 160, address(data), 110, 1)
        found = kinds()
        assert found == ["boundary-crossed", "canary-overwritten"]
        fake.checker_segment_freed(segment)
        assert kinds().count("canary-overwritten") == 2
        poisoned = bytearray(4)
        raw.aclrtMemcpy(address(poisoned), 4, segment, 4, 2)
        assert poisoned == b"\xdd" * 4  # use after free of a segment shows
        block.free()


def test_raise_mode_raises_memory_check_error(fake):
    acl_mem.fake.configure(check=True, hazards="raise")
    try:
        with acl_mem.Device(0) as dev:
            buf = dev.malloc(32)
            data = bytearray(40)
            with pytest.raises(acl_mem.MemoryCheckError):
                raw.aclrtMemcpy(buf.ptr, 64, address(data), 40, 1)
    finally:
        acl_mem.fake.reset()


def test_checker_is_off_by_default_and_reports_nothing(fake, dev):
    buf = dev.malloc(100)
    data = bytearray(120)
    raw.aclrtMemcpy(buf.ptr, 160, address(data), 120, 1)
    assert acl_mem.check() == []
    buf.free()


def test_leaks_lists_live_allocations_with_their_stacks(checking):
    with acl_mem.Device(0) as dev:
        kept = dev.malloc(1000)
        listed = [leak for leak in acl_mem.fake.leaks() if leak.address == kept.ptr]
        assert len(listed) == 1 and listed[0].size == 1000
        assert "test_checker.py" in listed[0].stack
        kept.free()
        assert all(leak.address != kept.ptr for leak in acl_mem.fake.leaks())


def test_the_pytest_fixture_fails_a_leaking_test(tmp_path, backend):
    test_file = tmp_path / "test_leaky.py"
    test_file.write_text(textwrap.dedent('''
        import acl_mem
        KEEP = []

        def test_leaks(acl_mem_no_leaks):
            with acl_mem.Device(0) as dev:
                dev.set_current()  # keep the device alive after the with block
                KEEP.append(dev.malloc(1234))

        def test_clean(acl_mem_no_leaks):
            with acl_mem.Device(0) as dev:
                dev.malloc(64).free()
                dev.malloc(64)  # dropped: its finalizer frees it
    '''))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(test_file)], capture_output=True, text=True, cwd=tmp_path,
                          env={**__import__("os").environ, "ACL_MEM_BACKEND": "fake",
                               "ACL_MEM_CHECK": "1"})
    # The fixture fails the leaking test at teardown; the clean one passes.
    assert "2 passed, 1 error" in done.stdout, done.stdout
    assert "ERROR at teardown of test_leaks" in done.stdout
    assert "1234 bytes" in done.stdout
    assert "test_leaky.py" in done.stdout


def test_a_damaged_pool_segment_still_returns_to_the_pool_in_raise_mode(fake):
    acl_mem.fake.configure(check=True, hazards="raise")
    try:
        with acl_mem.Device(0) as dev, acl_mem.SegmentPool(dev) as pool:
            segment = pool.allocate(100)
            data = bytearray(104)
            with pytest.raises(acl_mem.MemoryCheckError):  # refused before copying
                raw.aclrtMemcpy(segment.ptr, 160, address(data), 104, 1)
            acl_mem.fake.configure(hazards="count")  # keeps the memory
            raw.aclrtMemcpy(segment.ptr, 160, address(data), 104, 1)  # damage the canary
            acl_mem.fake.configure(hazards="raise")
            with pytest.raises(acl_mem.MemoryCheckError):
                segment.free()
            assert pool.stats().in_use == 0
            assert pool.release_unused() > 0
    finally:
        acl_mem.fake.reset()
