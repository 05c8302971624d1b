"""An interrupt (Ctrl-C, a signal handler's exception) at any line of the fake's calls
leaves it consistent: the call completed or had no effect, no lock stays held, nothing
leaks, and the next call works.

Each operation is re-run with the exception injected at its first, second, ... line
(tests/injection.py): the lines are the binding's and the raw layer's, as the library's
C calls cannot be interrupted half-way.
"""

from __future__ import annotations

from collections.abc import Callable
from types import FrameType
from typing import Any

import cffi
import pytest
from injection import interrupted_runs, is_unsignalled, lock_is_free

import acl_mem
from acl_mem import MemAttr, MemcpyKind, raw
from acl_mem._cffi_lite import LiteFFI
from acl_mem._host_memory import ffi as hostmem_ffi
from acl_mem._hostbuf import ffi as hostbuf_ffi

FAKE_ONLY = "interrupt injection drives the fake's internals"


def _signalled(frame: FrameType) -> bool:
    return not is_unsignalled(frame)


def _address(buffer: Any) -> int:
    return int(hostbuf_ffi.cast("uintptr_t", hostbuf_ffi.from_buffer(buffer)))


def _free_everything(fake: Any) -> None:
    """Free whatever the interrupted operation left allocated (it may have completed)."""
    blocks = fake.live_blocks()
    for block in blocks:
        if block.device is None:
            assert fake.aclrtFreeHost(block.start) == 0
        elif block.api in ("acldvppMalloc", "hi_mpi_dvpp_malloc"):
            assert fake.acldvppFree(block.start) == 0
        else:
            assert fake.aclrtFree(block.start) == 0


def _assert_consistent(fake: Any) -> None:
    """Everything the interrupted operation left is freed, and everything works. The
    library's state cannot be interrupted half-way (a C call is not interrupted by a
    Python exception): what is interrupted is the binding's part, and what it may lose
    is a block the library still lists. The binding's own lock is never left held."""
    assert lock_is_free(fake._stacks_lock)
    _free_everything(fake)
    free, total = raw.aclrtGetMemInfo(MemAttr.HBM_MEM)
    assert free == total
    for size in (4096, 3 << 20):
        ptr = raw.aclrtMalloc(size, 0)
        raw.aclrtMemset(ptr, size, 1, size)
        raw.aclrtFree(ptr)
    assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM)[0] == total


def _each_line(fake: Any, setup: Callable[[], Callable[[], object]]) -> int:
    runs = 0
    for _ in interrupted_runs(setup, where=_signalled):
        _assert_consistent(fake)
        runs += 1
    return runs


@pytest.mark.fake_only(FAKE_ONLY)
@pytest.mark.parametrize("size", [4096, 3 << 20])
def test_malloc_interrupted_anywhere(fake, dev, size):
    assert _each_line(fake, lambda: lambda: raw.aclrtMalloc(size, 0)) > 5


@pytest.mark.fake_only(FAKE_ONLY)
def test_free_interrupted_anywhere(fake, dev):
    def setup() -> Callable[[], object]:
        ptr = raw.aclrtMalloc(8192, 0)
        return lambda: raw.aclrtFree(ptr)

    assert _each_line(fake, setup) > 5


@pytest.mark.fake_only(FAKE_ONLY)
def test_malloc_free_with_holes_interrupted_anywhere(fake, dev):
    """The allocator's split and merge paths: a hole on each side of the freed block."""
    keep: list[int] = []

    def setup() -> Callable[[], object]:
        ptrs = [raw.aclrtMalloc(1 << 16, 0) for _ in range(5)]
        raw.aclrtFree(ptrs[1])
        raw.aclrtFree(ptrs[3])
        keep[:] = [ptrs[0], ptrs[4]]

        def operation() -> None:
            raw.aclrtFree(ptrs[2])
            raw.aclrtFree(raw.aclrtMalloc(3 << 16, 0))

        return operation

    assert _each_line(fake, setup) > 10


@pytest.mark.fake_only(FAKE_ONLY)
def test_pinned_memory_interrupted_anywhere(fake, dev):
    assert _each_line(fake, lambda: lambda: raw.aclrtFreeHost(raw.aclrtMallocHost(100))) > 5


@pytest.mark.fake_only(FAKE_ONLY)
def test_copies_interrupted_anywhere(fake, dev):
    host = bytearray(b"abcd" * 1024)

    def setup() -> Callable[[], object]:
        ptr = raw.aclrtMalloc(4096, 0)
        pinned = raw.aclrtMallocHost(4096)

        def operation() -> None:
            raw.aclrtMemcpy(ptr, 4096, _address(host), 4096, MemcpyKind.HOST_TO_DEVICE)
            raw.aclrtMemcpy(pinned, 4096, ptr, 4096, MemcpyKind.DEVICE_TO_HOST)
            raw.aclrtMemset(ptr, 4096, 0, 4096)

        return operation

    assert _each_line(fake, setup) > 10


@pytest.mark.fake_only(FAKE_ONLY)
def test_streams_interrupted_anywhere(fake, dev, monkeypatch):
    # Interrupted runs leave queued work behind on purpose; counted, not warned.
    monkeypatch.setattr(fake.hazards, "mode", "count")

    def setup() -> Callable[[], object]:
        ptr = raw.aclrtMalloc(4096, 0)
        pinned = raw.aclrtMallocHost(4096)

        def operation() -> None:
            stream = raw.aclrtCreateStream()
            raw.aclrtMemcpyAsync(ptr, 4096, pinned, 4096, MemcpyKind.HOST_TO_DEVICE, stream)
            raw.aclrtMemsetAsync(ptr, 4096, 7, 16, stream)
            raw.aclrtSynchronizeStream(stream)
            raw.aclrtDestroyStream(stream)

        return operation

    assert _each_line(fake, setup) > 10
    # Work left queued by interrupted runs (on freed memory) is skipped, and the stream
    # table itself still works.
    raw.aclrtSynchronizeDevice()
    stream = raw.aclrtCreateStream()
    raw.aclrtDestroyStream(stream)


@pytest.mark.fake_only(FAKE_ONLY)
def test_no_type_is_parsed_on_a_call_path(fake, dev, monkeypatch):
    """cffi parses a type string under a lock on first use; an interrupt there used to
    leave the lock held and block the next copy forever. All are parsed at import."""
    def refuse(self: Any, cdecl: str) -> Any:
        raise AssertionError(f"cffi type {cdecl!r} parsed on a call path")

    for ffi in (hostmem_ffi, hostbuf_ffi):
        if isinstance(ffi, cffi.FFI):
            monkeypatch.setattr(type(ffi), "_typeof_locked", refuse)
        else:
            # Types built from _cffi_backend at import (acl_mem/_cffi_lite.py): there is
            # no parser and no lock to leave behind.
            assert isinstance(ffi, LiteFFI)
    host = bytearray(1 << 20)
    with dev.malloc(1 << 20) as buf, dev.malloc_host(4096) as pinned:
        buf.copy_from(host)
        buf.copy_to(host)
        buf.copy_to(pinned, 4096)
        raw.aclrtMemcpy(_address(host), 1 << 20, buf.ptr, 1 << 20,
                        MemcpyKind.DEVICE_TO_HOST)       # unvouched: page probes
        raw.aclrtMemcpy(_address(host), 4096, buf.ptr, 4096, MemcpyKind.DEVICE_TO_HOST)
        view = pinned.view()
        view.release()
    assert acl_mem.fake.hazards() == {}


@pytest.mark.fake_only(FAKE_ONLY)
def test_vmm_map_and_unmap_interrupted_anywhere(fake, dev):
    """An interrupted aclrtMapMem used to leave the reservation's index and its mappings
    disagreeing: every later map or memset there raised KeyError."""
    granule = 2 << 20
    prop = raw.aclrtPhysicalMemProp(memAttr=MemAttr.HBM_MEM_HUGE,
                                    location=raw.aclrtMemLocation(id=0, type=1))
    base = raw.aclrtReserveMemAddress(2 * granule, 0, 0, 0)
    handles = [raw.aclrtMallocPhysical(granule, prop, 0) for _ in range(2)]
    free_before = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0]

    def consistent() -> None:
        assert lock_is_free(fake._stacks_lock)
        mapped = [held.address for held in fake.live_vmm() if held.api == "aclrtMapMem"
                  and base <= held.address < base + 2 * granule]
        for va in mapped:
            raw.aclrtUnmapMem(va)
        # Both granules map, take bytes and unmap again.
        for k, handle in enumerate(handles):
            raw.aclrtMapMem(base + k * granule, granule, 0, handle, 0)
            raw.aclrtMemset(base + k * granule, granule, k + 1, 64)
        for k in range(2):
            raw.aclrtUnmapMem(base + k * granule)

    def setup() -> Callable[[], object]:
        def operation() -> None:
            raw.aclrtMapMem(base, granule, 0, handles[0], 0)
            raw.aclrtMapMem(base + granule, granule, 0, handles[1], 0)
            raw.aclrtUnmapMem(base)

        return operation

    runs = 0
    for _ in interrupted_runs(setup, where=_signalled):
        consistent()
        runs += 1
    assert runs > 10
    for handle in handles:
        raw.aclrtFreePhysical(handle)
    raw.aclrtReleaseMemAddress(base)
    assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0] == free_before + 2 * granule


def test_importing_acl_mem_and_its_fake_needs_no_c_parser():
    """cffi's C parser is a quarter of `import acl_mem`, which a C program's first call
    through the drop-in library pays; the Pythonic layer and the fake build their C types
    without it."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import sys, acl_mem, acl_mem._fake; "
                           "print('pycparser' in sys.modules, 'cffi.cparser' in sys.modules)"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
