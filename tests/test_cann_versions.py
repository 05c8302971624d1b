"""Every difference between the CANN releases the fake plays (acl_mem/_fake/versions.py), asserted
directly on each release through acl_mem.raw (docs/runtime-model.md §0.1).

Each test runs once per release on a fresh fake playing it; errors are compared by exception
class and ``code`` only. The conformance checks assert the same differences on both backends
(``ACL_MEM_FAKE_CANN=8.5.0|9.0.1``); these tests need no environment and cover all three in
one run, plus the Pythonic layer's size arithmetic on each release.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import acl_mem
from acl_mem import _backend, raw
from acl_mem._fake import fake_class
from acl_mem._fake.config import current_cann
from acl_mem._fake.profiles import resolve_profile
from acl_mem._fake.versions import DEFAULT_CANN, VERSIONS, CannVersion, resolve_cann
from acl_mem.enums import MallocPolicy, MemAttr, MemcpyKind, MemLocationType
from acl_mem.errors import (
    AclError,
    AclInternalError,
    ContextNullError,
    FunctionNotAvailableError,
    InvalidDeviceIdError,
    InvalidHandleError,
    InvalidMemoryTypeError,
    InvalidParamError,
    MemoryAllocationError,
    RtParamInvalidError,
)
from acl_mem.pool import ExpandablePool, SegmentPool
from acl_mem.sizes import AllocApi, allocation_size, soc_padding

RELEASES = ["8.5.0", "9.0.1", "9.1.0"]
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
HUGE = 2 * MiB
N = 64
H2D, D2H, D2D = (MemcpyKind.HOST_TO_DEVICE, MemcpyKind.DEVICE_TO_HOST,
                 MemcpyKind.DEVICE_TO_DEVICE)


# -- fixtures and helpers --------------------------------------------------------------------------
@pytest.fixture(params=RELEASES)
def release(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh atlas-a2 fake playing one release, active (device 0 current) for the test;
    whatever the test configures is reset afterwards."""
    try:
        fake = fake_class()(resolve_profile("atlas-a2"), cann=resolve_cann(request.param))
    except ValueError as exc:  # CANN 8.5.0's own library plays only that release
        pytest.skip(str(exc))
    with acl_mem.using_backend(fake, "tests/test_cann_versions.py"):
        try:
            raw.aclrtSetDevice(0)
            yield request.param
        finally:
            acl_mem.fake.reset()


def active() -> Any:
    """The fake in use (for calls with NULL outputs, which acl_mem.raw cannot make)."""
    return _backend.get()


def on_ascend950(release: str) -> None:
    """Switch to the ascend950 profile (padding 0 on 9.1.0), same release, device 0 current."""
    acl_mem.fake.configure("ascend950", cann=release)
    raw.aclrtSetDevice(0)


def raises(error: type[AclError], code: int, call: Callable[[], object]) -> None:
    with pytest.raises(error) as e:
        call()
    assert e.value.code == code


def in_thread(call: Callable[[], object]) -> BaseException | None:
    """Run ``call`` in a thread with no current device; the exception it raised, if any."""
    box: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:  # handed back to the test
            box.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    return box[0] if box else None


def pools() -> tuple[int, int]:
    """(free normal-page bytes, free huge-page bytes) of the current device."""
    return (raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)[0],
            raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0])


def taken(call: Callable[[], int]) -> tuple[int, tuple[int, int]]:
    """Run an allocation: (pointer, (normal bytes taken, huge bytes taken))."""
    before = pools()
    ptr = call()
    after = pools()
    return ptr, (before[0] - after[0], before[1] - after[1])


def dead_stream() -> int:
    stream = raw.aclrtCreateStream()
    raw.aclrtDestroyStream(stream)
    return stream


def prop(attr: int = MemAttr.HBM_MEM_HUGE, location: int = MemLocationType.DEVICE,
         device: int = 0) -> raw.aclrtPhysicalMemProp:
    return raw.aclrtPhysicalMemProp(0, 0, attr, raw.aclrtMemLocation(device, location), 0)


def newer(release: str, first: str) -> bool:
    return RELEASES.index(release) >= RELEASES.index(first)


# -- the table itself ------------------------------------------------------------------------------
#: Each CannVersion field -> the test below that asserts it on every release.
COVERED = {
    "name": "test_version_reports",
    "acl_version": "test_version_reports",
    "soc_padding": "test_padding_on_ascend950",
    "zero_count_succeeds": "test_count_0",
    "count_checked_first": "test_copy_check_order",
    "async_context_first": "test_async_copy_context_lookup",
    "stream_handle_checked": "test_stale_stream_handles",
    "meminfo_max_attr": "test_mem_info_attributes",
    "granularity_all_attrs": "test_granularity",
    "retain_checks_output": "test_handle_queries_with_null_outputs",
    "properties_v2": "test_handle_queries_with_null_outputs",
    "has_address_range": "test_address_range",
    "physical_rejects_managed": "test_managed_physical_memory",
    "host_location_id_zero": "test_host_location_id",
    "contexts_checked": "test_dead_and_missing_contexts",
}


def test_every_difference_has_a_test():
    """Every field of CannVersion (one observable difference each) is asserted here; the fake
    plays exactly 8.5.0, 9.0.1 and 9.1.0, 9.1.0 by default."""
    assert set(COVERED) == {f.name for f in dataclasses.fields(CannVersion)}
    assert all(name in globals() for name in COVERED.values())
    assert list(VERSIONS) == RELEASES
    assert DEFAULT_CANN == "9.1.0"
    with pytest.raises(ValueError):
        resolve_cann("9.2.0")


# -- version reports (§0.1, §3.1) ------------------------------------------------------------------
def test_version_reports(release):
    """aclrtGetVersion: 1.16.0 on 8.5.0, 1.17.0 after; aclsysGetVersionStr("runtime") (also
    "cann") is the release; other packages -> 500000; runtime_version() says both."""
    acl = (1, 16, 0) if release == "8.5.0" else (1, 17, 0)
    assert raw.aclrtGetVersion() == acl
    assert raw.aclsysGetVersionStr("runtime") == release
    assert raw.aclsysGetVersionStr("cann") == release
    raises(AclInternalError, 500000, lambda: raw.aclsysGetVersionStr("hccl"))
    assert acl_mem.runtime_version() == (release, acl)
    assert str(acl_mem.runtime_version()) == f"CANN {release}, ACL {'.'.join(map(str, acl))}"


def test_configure_and_environment_choose_the_release(release, monkeypatch):
    """fake.configure(cann=...) plays the release until fake.reset(); ACL_MEM_FAKE_CANN
    chooses it otherwise; an unknown name is a ValueError."""
    acl_mem.fake.configure(cann=release)
    assert acl_mem.fake.cann() == release
    assert acl_mem.runtime_version().cann == release
    acl_mem.fake.reset()
    monkeypatch.setenv("ACL_MEM_FAKE_CANN", release)
    assert current_cann().name == release
    monkeypatch.delenv("ACL_MEM_FAKE_CANN")
    assert acl_mem.fake.cann() == DEFAULT_CANN
    with pytest.raises(ValueError):
        acl_mem.fake.configure(cann="8.0.0")


# -- padding and the Pythonic size arithmetic (§3.5, §3.14) ----------------------------------------
def test_padding_on_ascend950(release):
    """Ascend950 pads 0 bytes on 9.1.0 and a fixed 32 before (§3.5), and the older releases'
    overflow check adds 64 whatever the call."""
    on_ascend950(release)
    per_soc = newer(release, "9.1.0")  # the SoC's padding (0 here), else a fixed 32
    ptr, pages = taken(lambda: raw.aclrtMalloc(1 * MiB, MallocPolicy.HUGE_FIRST))
    assert pages == ((1 * MiB, 0) if per_soc else (0, 2 * MiB))
    raw.aclrtFree(ptr)
    ptr, pages = taken(lambda: raw.aclrtMalloc(4096, MallocPolicy.NORMAL_ONLY))
    assert pages == ((4 * KiB, 0) if per_soc else (8 * KiB, 0))
    raw.aclrtFree(ptr)
    ptr, pages = taken(lambda: raw.aclrtMallocCached(2 * MiB, MallocPolicy.HUGE_ONLY))
    assert pages == ((0, 2 * MiB) if per_soc else (0, 4 * MiB))
    raw.aclrtFree(ptr)
    ptr, pages = taken(lambda: raw.aclrtMallocAlign32(2 * MiB, MallocPolicy.HUGE_ONLY))
    assert pages == (0, 2 * MiB)  # never padded
    raw.aclrtFree(ptr)
    for call in (raw.aclrtMalloc, raw.aclrtMallocAlign32, raw.aclrtMallocCached):
        raises(InvalidParamError, 100000, lambda c=call: c(2**64 - 32, 0))
        if per_soc:  # 9.1.0: size + 32 + 0 does not wrap: the device is out of memory
            raises(MemoryAllocationError, 207001,
                   lambda c=call: c(2**64 - 64, 0))
        else:
            raises(InvalidParamError, 100000,
                   lambda c=call: c(2**64 - 64, 0))


def test_padding_on_atlas_a2_is_32_on_every_release(release):
    """Atlas A2 pads 32 bytes on every release; only aclrtMallocAlign32's overflow check differs
    (size + 32 on 9.1.0, size + 64 before)."""
    ptr, pages = taken(lambda: raw.aclrtMalloc(4096, MallocPolicy.NORMAL_ONLY))
    assert pages == (8 * KiB, 0)
    raw.aclrtFree(ptr)
    if newer(release, "9.1.0"):
        raises(MemoryAllocationError, 207001, lambda: raw.aclrtMallocAlign32(2**64 - 64, 0))
    else:
        raises(InvalidParamError, 100000, lambda: raw.aclrtMallocAlign32(2**64 - 64, 0))
    raises(InvalidParamError, 100000, lambda: raw.aclrtMalloc(2**64 - 64, 0))


@pytest.mark.parametrize(("soc", "release", "padding"), [
    ("Ascend950PR_9579", None, 0), ("Ascend950PR_9579", "", 0), ("Ascend950PR_9579", "9.1.0", 0),
    ("Ascend950PR_9579", "9.0.1", 32), ("Ascend950PR_9579", "8.5.0", 32),
    ("Ascend950PR_9579", "8.3.RC1", 32), ("Ascend950PR_9579", "9.1.0-beta.1", 0),
    ("Ascend950PR_9579", "10.0.0", 0), ("Ascend950PR_9579", "unknown", 0),
    ("Ascend035A", "9.1.0", 16), ("Ascend035A", "9.0.1", 32), ("Ascend910B1", "8.5.0", 32),
])
def test_soc_padding_takes_the_release(soc, release, padding):
    """sizes.soc_padding(soc, release): the SoC's padding from 9.1.0, a fixed 32 before; no
    release, or one that names no number, counts as the newest."""
    assert soc_padding(soc, release) == padding


def test_pythonic_sizes_follow_the_release(release):
    """Buffer.allocated_size, allocation_size with soc_padding and the pools' segment sizes use
    the padding of the backend's release: on Ascend950 0 from 9.1.0, 32 before."""
    on_ascend950(release)
    pad = 0 if newer(release, "9.1.0") else 32
    assert soc_padding(raw.aclrtGetSocName(), raw.aclsysGetVersionStr("runtime")) == pad
    with acl_mem.Device(0) as device:
        for size in (1, 33, 100, 1 * MiB):
            with device.malloc(size) as buf:
                assert buf.allocated_size == allocation_size(AllocApi.MALLOC, size,
                                                             padding=pad)
                assert buf.allocated_size == ((size + 31 + pad) // 32) * 32
            with device.malloc_align32(size) as buf:
                assert buf.allocated_size == (size + 31) // 32 * 32
        extra = 32 if pad else 0
        with SegmentPool(device, block_size=1 * MiB) as pool:
            segments = [pool.allocate(n) for n in (1, 33, 100)]
            assert [s.allocated_size for s in segments] == [32 + extra, 64 + extra, 128 + extra]
        with ExpandablePool(device, 16 * MiB) as expandable:
            assert expandable.allocate(100).allocated_size == 128 + extra


# -- copies and memsets (§3.10, §3.11) -------------------------------------------------------------
def test_count_0(release):
    """Count 0 is a successful no-op for all four calls on 9.1.0 (even with NULL pointers);
    before, NULL is 100000 and the runtime refuses count 0 with 107000."""
    dst = raw.aclrtMalloc(N)
    raw.aclrtMemset(dst, N, 0x11, N)
    src = np.full(N, 0x22, dtype=np.uint8)
    stream = raw.aclrtCreateStream()
    with_pointers: list[Callable[[], None]] = [
        lambda: raw.aclrtMemcpy(dst, N, src.ctypes.data, 0, H2D),
        lambda: raw.aclrtMemset(dst, N, 0x33, 0),
        lambda: raw.aclrtMemcpyAsync(dst, N, src.ctypes.data, 0, H2D, stream),
        lambda: raw.aclrtMemsetAsync(dst, N, 0x33, 0, stream),
    ]
    with_null: list[Callable[[], None]] = [
        lambda: raw.aclrtMemcpy(0, 0, 0, 0, H2D),
        lambda: raw.aclrtMemset(0, 0, 0x33, 0),
        lambda: raw.aclrtMemcpyAsync(0, 0, 0, 0, H2D, stream),
        lambda: raw.aclrtMemsetAsync(0, 0, 0x33, 0, stream),
    ]
    for call in with_pointers:
        if newer(release, "9.1.0"):
            call()
        else:
            raises(RtParamInvalidError, 107000, call)
    for call in with_null:
        if newer(release, "9.1.0"):
            call()
        else:
            raises(InvalidParamError, 100000, call)
    raw.aclrtSynchronizeStream(stream)
    out = np.zeros(N, dtype=np.uint8)
    raw.aclrtMemcpy(out.ctypes.data, N, dst, N, D2H)
    assert out.tobytes() == b"\x11" * N
    raw.aclrtDestroyStream(stream)
    raw.aclrtFree(dst)


def test_copy_check_order(release):
    """9.1.0 checks count 0, then NULL, then the kind; before, NULL, then the kind, and count 0
    is the runtime's (after destMax 0, before dst == src)."""
    ptr = raw.aclrtMalloc(N)
    for call in (lambda: raw.aclrtMemcpy(ptr, N, ptr + 32, 0, 6),
                 lambda: raw.aclrtMemcpy(0, N, 0, 0, 7),
                 lambda: raw.aclrtMemcpyAsync(ptr, N, ptr + 32, 0, 6, 0)):
        if newer(release, "9.1.0"):
            call()
        else:
            raises(InvalidParamError, 100000, call)
    # With a count, NULL and kind are 100000 on every release, NULL first.
    raises(InvalidParamError, 100000, lambda: raw.aclrtMemcpy(0, N, ptr, N, 6))
    raises(InvalidParamError, 100000, lambda: raw.aclrtMemcpy(ptr, N, ptr, N, 6))
    # dst == src with count 0: 9.1.0 returns at the count, older releases refuse the count
    # before they get to dst == src.
    if newer(release, "9.1.0"):
        raw.aclrtMemcpy(ptr, N, ptr, 0, D2D)
    else:
        raises(RtParamInvalidError, 107000, lambda: raw.aclrtMemcpy(ptr, N, ptr, 0, D2D))
    raw.aclrtMemcpy(ptr, N, ptr, N, D2D)  # dst == src with a count: 0 everywhere
    raw.aclrtFree(ptr)


def test_async_copy_context_lookup(release):
    """aclrtMemcpyAsync from a thread without a context: 9.1.0 looks the context up before the
    locations (107002), older releases after them (a kind the locations refuse: 107000);
    the host-to-host refusal comes after the context everywhere."""
    dst = raw.aclrtMalloc(N)
    pinned = raw.aclrtMallocHost(N)
    other = raw.aclrtMallocHost(N)
    pageable = np.zeros(N, dtype=np.uint8)
    error = in_thread(lambda: raw.aclrtMemcpyAsync(dst, N, pageable.ctypes.data, N, D2H, 0))
    if newer(release, "9.1.0"):
        assert type(error) is ContextNullError and error.code == 107002
    else:
        assert type(error) is RtParamInvalidError and error.code == 107000
    error = in_thread(lambda: raw.aclrtMemcpyAsync(other, N, pinned, N, H2D, 0))
    assert type(error) is ContextNullError and error.code == 107002
    error = in_thread(lambda: raw.aclrtMemcpyAsync(dst, N - 1, pinned, N, H2D, 0))
    assert type(error) is RtParamInvalidError and error.code == 107000
    raw.aclrtFreeHost(pinned)
    raw.aclrtFreeHost(other)
    raw.aclrtFree(dst)


def test_stale_stream_handles(release):
    """A destroyed stream handle: 107017 before the parameter checks on 9.1.0; before, the
    parameter checks win (107000) and the fake answers 107017 where it looks the stream up,
    after the context (a thread without one: 107002; docs/fidelity.md row 66)."""
    dst = raw.aclrtMalloc(N)
    pinned = raw.aclrtMallocHost(N)
    dead = dead_stream()
    early: list[Callable[[], None]] = [
        lambda: raw.aclrtMemcpyAsync(dst, N - 1, pinned, N, H2D, dead),
        lambda: raw.aclrtMemsetAsync(dst, N - 1, 1, N, dead),
    ]
    for call in early:
        if newer(release, "9.1.0"):
            raises(InvalidHandleError, 107017, call)
        else:
            raises(RtParamInvalidError, 107000, call)
    late: list[Callable[[], None]] = [
        lambda: raw.aclrtMemcpyAsync(dst, N, pinned, N, H2D, dead),
        lambda: raw.aclrtMemsetAsync(dst, N, 1, N, dead),
        lambda: raw.aclrtSynchronizeStream(dead),
    ]
    for call in late:
        raises(InvalidHandleError, 107017, call)
        error = in_thread(call)
        if newer(release, "9.1.0"):
            assert type(error) is InvalidHandleError and error.code == 107017
        else:
            assert type(error) is ContextNullError and error.code == 107002
    raises(InvalidHandleError, 107017, lambda: raw.aclrtDestroyStream(dead))
    # The ACL layer's checks come first on every release.
    raises(InvalidParamError, 100000, lambda: raw.aclrtMemcpyAsync(0, N, pinned, N, H2D, dead))
    raises(InvalidParamError, 100000, lambda: raw.aclrtMemsetAsync(0, N, 1, N, dead))
    raw.aclrtFreeHost(pinned)
    raw.aclrtFree(dst)


# -- queries (§3.12, §4.5, §4.8, §4.9) -------------------------------------------------------------
def test_mem_info_attributes(release):
    """aclrtGetMemInfo takes attributes 0-11 on 8.5.0 (12-17 -> 107016, even without a context)
    and 0-17 from 9.0.1, where 12-17 report the pools of their HBM twins; 18 is 107016
    everywhere."""
    twins = {12: 5, 13: 4, 14: 10, 15: 9, 16: 8, 17: 11}
    for attr, twin in twins.items():
        if newer(release, "9.0.1"):
            assert raw.aclrtGetMemInfo(attr) == raw.aclrtGetMemInfo(twin)
        else:
            raises(InvalidMemoryTypeError, 107016, lambda a=attr: raw.aclrtGetMemInfo(a))
            error = in_thread(lambda a=attr: raw.aclrtGetMemInfo(a))
            assert type(error) is InvalidMemoryTypeError and error.code == 107016
    raises(InvalidMemoryTypeError, 107016, lambda: raw.aclrtGetMemInfo(18))
    assert active().aclrtGetMemInfo(12, null_outputs=1)[0] == 100000


def test_granularity(release):
    """aclrtMemGetAllocationGranularity: 8.5.0 takes the three HBM attributes only and checks
    location.id as a device id for every location; from 9.0.1 every attribute of §4.3 and the
    id for DEVICE only."""
    count = raw.aclrtGetDeviceCount()
    host = MemLocationType.HOST
    assert raw.aclrtMemGetAllocationGranularity(prop(MemAttr.HBM_MEM_HUGE)) == HUGE
    assert raw.aclrtMemGetAllocationGranularity(prop(MemAttr.HBM_MEM_HUGE1G)) == GiB
    others = [(MemAttr.MEM_HUGE, MemLocationType.DEVICE, HUGE),
              (MemAttr.MEM_HUGE1G, MemLocationType.DEVICE, GiB),
              (MemAttr.DDR_MEM_HUGE, host, HUGE), (MemAttr.MEM_P2P_NORMAL, host, HUGE)]
    for attr, location, value in others:
        if newer(release, "9.0.1"):
            assert raw.aclrtMemGetAllocationGranularity(prop(attr, location)) == value
        else:
            raises(InvalidParamError, 100000,
                   lambda a=attr, loc=location:
                   raw.aclrtMemGetAllocationGranularity(prop(a, loc)))
    host_id = prop(MemAttr.HBM_MEM_HUGE, host, count)
    if newer(release, "9.0.1"):
        assert raw.aclrtMemGetAllocationGranularity(host_id) == HUGE
        raises(InvalidParamError, 100000, lambda: raw.aclrtMemGetAllocationGranularity(
            prop(location=MemLocationType.UNREGISTERED)))
    else:
        raises(InvalidDeviceIdError, 107001,
               lambda: raw.aclrtMemGetAllocationGranularity(host_id))
        assert raw.aclrtMemGetAllocationGranularity(
            prop(location=MemLocationType.UNREGISTERED)) == HUGE
    raises(InvalidDeviceIdError, 107001,
           lambda: raw.aclrtMemGetAllocationGranularity(prop(device=count)))


def test_address_range(release):
    """aclrtMemGetAddressRange does not exist on 8.5.0 (FunctionNotAvailableError naming the
    call and the release, whatever the arguments; Buffer.address_range() too); from 9.0.1 it
    reports the block."""
    ptr = raw.aclrtMalloc(100)
    if newer(release, "9.0.1"):
        assert raw.aclrtMemGetAddressRange(ptr + 8) == (ptr, 4 * KiB)
        raises(InvalidParamError, 100000, lambda: raw.aclrtMemGetAddressRange(0))
        with acl_mem.Device(0).malloc(100) as buf:
            assert buf.address_range() == (buf.ptr, 4 * KiB)
    else:
        for address in (ptr, 0):
            with pytest.raises(FunctionNotAvailableError) as e:
                raw.aclrtMemGetAddressRange(address)
            assert (e.value.function, e.value.release) == ("aclrtMemGetAddressRange", "8.5.0")
        with acl_mem.Device(0).malloc(100) as buf, pytest.raises(FunctionNotAvailableError):
            buf.address_range()
    raw.aclrtFree(ptr)


def test_host_location_id(release):
    """aclrtPointerGetAttributes: host memory reports id 0 from 9.0.1; 8.5.0 reports the device
    id (the fake: the calling thread's current device)."""
    host = raw.aclrtMallocHost(100)
    raw.aclrtSetDevice(1)
    attrs = raw.aclrtPointerGetAttributes(host)
    assert (attrs.type, attrs.id) == (MemLocationType.HOST, 0 if newer(release, "9.0.1") else 1)
    raw.aclrtSetDevice(0)
    assert raw.aclrtPointerGetAttributes(host).id == 0
    raw.aclrtFreeHost(host)


# -- contexts (§3.3) -------------------------------------------------------------------------------
def test_dead_and_missing_contexts(release):
    """aclrtSetCurrentContext with a destroyed context: 107000 from 9.0.1; 8.5.0 takes it and
    later calls find no context (107002). aclrtGetCurrentContext without a context: 107002
    from 9.0.1; 8.5.0 reports success and NULL."""
    context = raw.aclrtCreateContext(0)
    raw.aclrtDestroyContext(context)
    if newer(release, "9.0.1"):
        raises(RtParamInvalidError, 107000, lambda: raw.aclrtSetCurrentContext(context))
        raises(ContextNullError, 107002, raw.aclrtGetCurrentContext)
    else:
        raw.aclrtSetCurrentContext(context)
        raises(ContextNullError, 107002, raw.aclrtCreateStream)
        assert raw.aclrtGetCurrentContext() == context  # not checked: the dead handle
    found: list[object] = []

    def fresh_thread() -> None:
        try:
            found.append(raw.aclrtGetCurrentContext())
        except AclError as exc:
            found.append(exc.code)

    worker = threading.Thread(target=fresh_thread)
    worker.start()
    worker.join()
    assert found == [107002 if newer(release, "9.0.1") else 0]
    raw.aclrtSetDevice(0)


# -- VMM (§4, §4.3) --------------------------------------------------------------------------------
def test_managed_physical_memory(release):
    """aclrtMallocPhysical with location MANAGED (3): 100000 in the ACL layer on 9.1.0; before,
    it reaches the driver (the fake: 107000, docs/fidelity.md row 44)."""
    managed = prop(location=3)
    if newer(release, "9.1.0"):
        raises(InvalidParamError, 100000, lambda: raw.aclrtMallocPhysical(HUGE, managed))
    else:
        raises(RtParamInvalidError, 107000, lambda: raw.aclrtMallocPhysical(HUGE, managed))
    handle = raw.aclrtMallocPhysical(HUGE, prop())
    raw.aclrtFreePhysical(handle)


def test_handle_queries_with_null_outputs(release):
    """aclrtMemRetainAllocationHandle / aclrtMemGetAllocationPropertiesFromHandle with a NULL
    output: 100000 from 9.0.1; 8.5.0 does not check it (the fake: 107000 after the lookup,
    docs/fidelity.md row 67). 8.5.0's properties call also refuses P2P and host memory
    (100000)."""
    fake = active()
    base = raw.aclrtReserveMemAddress(2 * HUGE, 0, 0, 0)
    handle = raw.aclrtMallocPhysical(HUGE, prop())
    raw.aclrtMapMem(base, HUGE, 0, handle, 0)
    code = 100000 if newer(release, "9.0.1") else 107000
    assert fake.aclrtMemRetainAllocationHandle(base, null_outputs=1)[0] == code
    assert fake.aclrtMemGetAllocationPropertiesFromHandle(handle, null_outputs=1)[0] == code
    assert fake.aclrtMemRetainAllocationHandle(0, null_outputs=1)[0] == 100000
    assert fake.aclrtMemGetAllocationPropertiesFromHandle(0, null_outputs=1)[0] == 100000
    assert raw.aclrtMemRetainAllocationHandle(base) == handle
    assert raw.aclrtMemGetAllocationPropertiesFromHandle(handle).memAttr == MemAttr.HBM_MEM_HUGE
    for p in (prop(MemAttr.MEM_P2P_HUGE), prop(MemAttr.DDR_MEM_HUGE, MemLocationType.HOST),
              prop(MemAttr.HBM_MEM_HUGE, MemLocationType.HOST)):
        other = raw.aclrtMallocPhysical(HUGE, p)
        if newer(release, "9.0.1"):
            assert raw.aclrtMemGetAllocationPropertiesFromHandle(other).memAttr == p.memAttr
        else:
            raises(InvalidParamError, 100000,
                   lambda h=other: raw.aclrtMemGetAllocationPropertiesFromHandle(h))
        raw.aclrtFreePhysical(other)
    raw.aclrtUnmapMem(base)
    raw.aclrtFreePhysical(handle)
    raw.aclrtReleaseMemAddress(base)


@pytest.mark.parametrize(("reported", "played"), [
    ("8.5.0", "8.5.0"), ("9.0.0", "9.0.1"), ("9.0.1", "9.0.1"), ("9.1.0-beta.1", "9.1.0"),
    ("9.1.0", "9.1.0"), ("10.0.0", "9.1.0"), ("8.0.RC3", "8.5.0"), ("", "9.1.0"),
    ("unknown", "9.1.0"),
])
def test_the_differential_fake_plays_the_nearest_release_below_the_reported_one(reported,
                                                                                 played):
    """What --differential configures the fake to from the native runtime's version string."""
    from acl_mem._fake.versions import closest_release

    assert closest_release(reported).name == played
