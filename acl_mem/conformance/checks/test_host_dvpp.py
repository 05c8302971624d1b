"""Conformance: aclrtMallocHost / aclrtFreeHost (docs/runtime-model.md §3.7), acldvppMalloc /
acldvppFree (docs/runtime-model.md §3.8) and hi_mpi_dvpp_malloc / hi_mpi_dvpp_free
(docs/runtime-model.md §3.9).

DVPP memory is huge-page memory: its use is observed in the huge-page pool
(aclrtGetMemInfo), with expected numbers worked out here from the runtime model. Whether
the device has DVPP memory follows from its SoC name (aclrtGetSocName): Ascend950 has none
and answers 207000 (docs/runtime-model.md §3.8), which
test_spec_3_8_dvpp_support_follows_the_soc checks; the checks of DVPP memory itself skip
there. Ascend310 (Atlas 200/300/500 inference) has DVPP memory but no hi_mpi_dvpp_malloc
(docs/runtime-model.md §3.9): 207000 there, which test_spec_3_9_hi_mpi_support_follows_the_soc
checks; the checks of hi_mpi_dvpp_malloc memory skip there.
"""

from __future__ import annotations

import ctypes
from functools import partial

import pytest

import acl_mem
from acl_mem import raw
from acl_mem.enums import MallocPolicy, MemAttr, MemLocationType
from acl_mem.errors import (
    ContextNullError,
    FeatureNotSupportError,
    InvalidParamError,
    MemoryAllocationError,
    RtParamInvalidError,
)
from acl_mem.sizes import AllocApi

from .helpers import (
    address_of,
    free_pools,
    has_dvpp_memory,
    has_mpi_dvpp,
    need_dvpp_api,
    need_dvpp_memory,
    need_mpi_dvpp,
    raise_from_fresh_thread,
    soc_name,
    taken,
)

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
HUGE_PAGE = 2 * MiB
DVPP_WINDOW = 16 * GiB

DVPP_APIS = ["acldvppMalloc", "hi_mpi_dvpp_malloc"]

# -- helpers ---------------------------------------------------------------------------------------


def dvpp_malloc(api: str, size: int) -> int:
    if api == "acldvppMalloc":
        return raw.acldvppMalloc(size)
    return raw.hi_mpi_dvpp_malloc(0, size)


def supports(api: str) -> bool:
    """Whether ``api`` gives DVPP memory on this SoC (docs/runtime-model.md §3.8, §3.9)."""
    return has_mpi_dvpp() if api == "hi_mpi_dvpp_malloc" else has_dvpp_memory()


def supported_dvpp_apis() -> list[str]:
    return [api for api in DVPP_APIS if supports(api)]


def dvpp_free(api: str, ptr: int) -> None:
    if api == "acldvppMalloc":
        raw.acldvppFree(ptr)
    else:
        raw.hi_mpi_dvpp_free(ptr)


def need_room_for_the_dvpp_window() -> None:
    """Skip a check that fills the 16 GiB DVPP window on a device whose huge-page pool
    (aclrtGetMemInfo) is not larger than the window: the pool runs out first (207001 for
    the pool, docs/runtime-model.md §3.8), so the window's own limit cannot show."""
    total = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[1]
    if total <= DVPP_WINDOW + 8 * MiB:
        pytest.skip(f"{soc_name()} has {total / GiB:.2f} GiB of huge pages: the 16 GiB DVPP "
                    "window cannot be filled before the pool runs out (docs/runtime-model.md "
                    "§3.8 gives the window for Atlas A2, A3 and inference products; "
                    "test_spec_3_8_dvpp_beyond_the_huge_pool_is_207001 checks the pool's "
                    "answer)")


# -- §3.7 aclrtMallocHost / aclrtFreeHost ----------------------------------------------------------


def test_spec_3_7_malloc_host_size_zero_is_100000(dev):
    """docs/runtime-model.md §3.7: aclrtMallocHost(size 0) -> 100000."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtMallocHost(0)
    assert e.value.code == 100000


def test_spec_3_7_malloc_host_size_zero_is_100000_without_context(backend):
    """docs/runtime-model.md §3.7: size 0 is an ACL-layer check: 100000 wins over "no context"."""
    with pytest.raises(InvalidParamError) as e:
        raise_from_fresh_thread(lambda: raw.aclrtMallocHost(0))
    assert e.value.code == 100000


def test_spec_3_7_malloc_host_null_output_is_100000(backend):
    """docs/runtime-model.md §3.7: hostPtr == NULL -> 100000, with or without a context."""
    assert raise_from_fresh_thread(lambda: backend.aclrtMallocHost(64, null_outputs=1))[0] == 100000
    raw.aclrtSetDevice(0)
    try:
        assert backend.aclrtMallocHost(64, null_outputs=1) == (100000, 0)
    finally:
        raw.aclrtResetDevice(0)


def test_spec_3_7_malloc_host_without_context_is_107002(backend):
    """docs/runtime-model.md §3.7: aclrtMallocHost in a thread without context -> 107002."""
    with pytest.raises(ContextNullError) as e:
        raise_from_fresh_thread(lambda: raw.aclrtMallocHost(64))
    assert e.value.code == 107002


def test_spec_3_7_malloc_host_is_64_byte_aligned(dev):
    """docs/runtime-model.md §3.7: host memory starts 64-byte aligned; live blocks are distinct."""
    ptrs = [raw.aclrtMallocHost(size) for size in (1, 31, 33, 64, 100, 4095, 4097, 1 * MiB)]
    try:
        for ptr in ptrs:
            assert ptr != 0
            assert ptr % 64 == 0, hex(ptr)
        assert len(set(ptrs)) == len(ptrs)
    finally:
        for ptr in ptrs:
            raw.aclrtFreeHost(ptr)


def test_spec_3_7_malloc_host_memory_is_writable_in_place(dev):
    """docs/runtime-model.md §3.7: page-locked host memory: writable through a view, and copies to
    and from the device carry the bytes."""
    pattern = bytes(range(200)) + bytes(56)
    with dev.malloc_host(256) as src, dev.malloc_host(256) as dst, dev.malloc(256) as devbuf:
        view = src.view()
        assert len(view) == 256
        assert not view.readonly
        view[:] = pattern
        assert bytes(src.view()) == pattern
        view.release()
        devbuf.copy_from(src)
        devbuf.copy_to(dst)
        out = dst.view()
        assert bytes(out) == pattern
        out.release()


def test_spec_3_7_malloc_host_raw_pointer_is_the_memory(dev):
    """docs/runtime-model.md §3.7: the returned pointer addresses the memory itself (host == CPU
    memory)."""
    ptr = raw.aclrtMallocHost(100)
    try:
        ctypes.memmove(ptr, b"ascend-host", 11)
        assert ctypes.string_at(ptr, 11) == b"ascend-host"
    finally:
        raw.aclrtFreeHost(ptr)


@pytest.mark.parametrize(("size", "allocated"), [(1, 32), (32, 32), (33, 64), (100, 128)])
def test_spec_3_7_malloc_host_allocated_size(dev, size, allocated):
    """docs/runtime-model.md §3.7 / §7: aclrtMallocHost reserves ALIGN_UP(size, 32), no +32."""
    with dev.malloc_host(size) as buf:
        assert buf.size == size
        assert buf.allocated_size == allocated
        assert buf.api is AllocApi.MALLOC_HOST


def test_spec_4_9_malloc_host_pointer_is_host_memory(dev):
    """docs/runtime-model.md §4.9: aclrtMallocHost memory has location type HOST, id 0."""
    ptr = raw.aclrtMallocHost(100)
    try:
        attrs = raw.aclrtPointerGetAttributes(ptr)
        assert attrs.type == MemLocationType.HOST
        assert attrs.id == 0
    finally:
        raw.aclrtFreeHost(ptr)


def test_spec_3_7_free_host_null_is_100000(dev):
    """docs/runtime-model.md §3.7: aclrtFreeHost(NULL) -> 100000."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtFreeHost(0)
    assert e.value.code == 100000


@pytest.mark.open_question(1)
def test_spec_3_7_free_host_twice_is_107000(dev):
    """docs/runtime-model.md §3.7 / §8.1: freeing host memory twice -> 107000 (fake's choice)."""
    ptr = raw.aclrtMallocHost(64)
    raw.aclrtFreeHost(ptr)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtFreeHost(ptr)
    assert e.value.code == 107000


@pytest.mark.open_question(1)
def test_spec_3_7_free_host_of_other_memory_is_107000(dev):
    """docs/runtime-model.md §3.7 / §8.1: aclrtFreeHost only takes aclrtMallocHost memory: a device
    pointer, an interior pointer or plain host memory -> 107000 (fake's choice)."""
    host = raw.aclrtMallocHost(256)
    device = raw.aclrtMalloc(64, MallocPolicy.HUGE_FIRST)
    plain = bytearray(64)
    try:
        for ptr in (device, host + 64, address_of(plain)):
            with pytest.raises(RtParamInvalidError) as e:
                raw.aclrtFreeHost(ptr)
            assert e.value.code == 107000
    finally:
        raw.aclrtFree(device)
        raw.aclrtFreeHost(host)


def test_spec_3_7_pinned_memory_outlives_device_reset_and_finalize(backend):
    """docs/runtime-model.md §3.7: the runtime keeps no record of pinned memory per device
    or context, so a device reset and aclFinalize leave it allocated: the HostBuffer and
    its views stay valid, and free() afterwards releases it (aclrtFreeHost needs no
    context)."""
    raw.aclInit()
    with acl_mem.Device(0) as dev:  # the block's end resets the device to zero references
        buf = dev.malloc_host(64)
        view = buf.view()
        view[:4] = b"kept"
    assert not buf.freed
    assert bytes(view[:4]) == b"kept"
    raw.aclFinalize()
    assert not buf.freed
    view[:4] = b"more"
    assert bytes(buf.view()[:4]) == b"more"
    view.release()
    buf.free()
    assert buf.freed
    with pytest.raises(RtParamInvalidError) as e:  # it really went: a second free is 107000
        raw.aclrtFreeHost(buf._address)
    assert e.value.code == 107000


# -- §3.8 / §3.9 DVPP memory -----------------------------------------------------------------------


@pytest.mark.parametrize("api", DVPP_APIS)
def test_spec_3_8_dvpp_support_follows_the_soc(dev, api):
    """docs/runtime-model.md §3.8 / §3.9: where the SoC has DVPP memory (Atlas A2, A3,
    inference) acldvppMalloc and hi_mpi_dvpp_malloc succeed; Ascend950 has none: both calls,
    and Device.dvpp_malloc, answer 207000 and take nothing. Ascend310 has DVPP memory but no
    hi_mpi_dvpp_malloc (test_spec_3_9_hi_mpi_support_follows_the_soc)."""
    before = free_pools()
    if supports(api):
        ptr = dvpp_malloc(api, 64)
        assert ptr != 0
        dvpp_free(api, ptr)
    else:
        with pytest.raises(FeatureNotSupportError) as e:
            dvpp_malloc(api, 64)
        assert e.value.code == 207000
        with pytest.raises(FeatureNotSupportError) as e2:
            dev.dvpp_malloc(64, api=api)
        assert e2.value.code == 207000
    assert free_pools() == before


def test_spec_3_9_hi_mpi_support_follows_the_soc(dev):
    """docs/runtime-model.md §3.9: hi_mpi_dvpp_malloc (DVPP V2) is not supported on the Atlas
    200/300/500 inference products (SoC Ascend310, not 310P/310B): there it answers exactly
    207000 (the fake's choice: the code is undocumented, docs/fidelity.md row 73), raw and
    through Device.dvpp_malloc, and takes nothing from the pools, while acldvppMalloc still
    gives DVPP memory. Elsewhere it is supported exactly where acldvppMalloc is (§3.8)."""
    if has_mpi_dvpp() or not has_dvpp_memory():
        assert has_mpi_dvpp() == has_dvpp_memory()
        pytest.skip(f"{soc_name()}: hi_mpi_dvpp_malloc follows DVPP memory "
                    "(test_spec_3_8_dvpp_support_follows_the_soc checks it)")
    before = free_pools()
    with pytest.raises(FeatureNotSupportError) as e:
        raw.hi_mpi_dvpp_malloc(0, 64)
    assert e.value.code == 207000
    with pytest.raises(FeatureNotSupportError) as e2:
        dev.dvpp_malloc(64, api="hi_mpi_dvpp_malloc")
    assert e2.value.code == 207000
    assert free_pools() == before
    ptr, normal, huge = taken(lambda: raw.acldvppMalloc(64))
    assert (normal, huge) == (0, HUGE_PAGE)
    raw.acldvppFree(ptr)
    assert free_pools() == before


@pytest.mark.parametrize("api", DVPP_APIS)
def test_spec_3_8_dvpp_takes_huge_pages(dev, api):
    """docs/runtime-model.md §3.8 / §3.9: DVPP memory is huge-page memory: 1 byte -> one 2 MiB huge
    page, nothing from the normal pool."""
    need_dvpp_api(api)
    ptr, normal, huge = taken(lambda: dvpp_malloc(api, 1))
    assert (normal, huge) == (0, HUGE_PAGE)
    dvpp_free(api, ptr)


@pytest.mark.parametrize("api", DVPP_APIS)
@pytest.mark.parametrize(("size", "huge_bytes"), [
    (2 * MiB - 32, 2 * MiB),        # ALIGN_UP(., 32) + 32 = 2 MiB -> one huge page
    (2 * MiB - 31, 4 * MiB),        # ALIGN_UP(., 32) = 2 MiB; + 32 -> two huge pages
    (2 * MiB, 4 * MiB),             # 2 MiB + 32 -> two huge pages
    (6 * MiB - 32, 6 * MiB),        # exactly three huge pages
    (6 * MiB - 1, 8 * MiB),
])
def test_spec_3_8_dvpp_size_is_align32_plus_32(dev, api, size, huge_bytes):
    """docs/runtime-model.md §3.8 / §3.9: real size ALIGN_UP(size, 32) + 32, rounded to 2 MiB
    pages."""
    need_dvpp_api(api)
    ptr, normal, huge = taken(lambda: dvpp_malloc(api, size))
    assert (normal, huge) == (0, huge_bytes)
    dvpp_free(api, ptr)


@pytest.mark.parametrize("api", DVPP_APIS)
def test_spec_3_8_dvpp_is_128_byte_aligned(dev, api):
    """docs/runtime-model.md §3.8 / §3.9: DVPP memory starts 128-byte aligned."""
    need_dvpp_api(api)
    ptrs = [dvpp_malloc(api, size) for size in (1, 33, 100, 4097, 2 * MiB + 1)]
    try:
        for ptr in ptrs:
            assert ptr != 0
            assert ptr % 128 == 0, hex(ptr)
        assert len(set(ptrs)) == len(ptrs)
    finally:
        for ptr in ptrs:
            dvpp_free(api, ptr)


@pytest.mark.parametrize("api", DVPP_APIS)
def test_spec_3_8_dvpp_free_gives_the_pages_back(dev, api):
    """docs/runtime-model.md §3.8 / §3.9: freeing DVPP memory returns its huge pages."""
    need_dvpp_api(api)
    before = free_pools()
    ptrs = [dvpp_malloc(api, 1), dvpp_malloc(api, 5 * MiB)]
    assert free_pools() == (before[0], before[1] - 2 * MiB - 6 * MiB)
    for ptr in ptrs:
        dvpp_free(api, ptr)
    assert free_pools() == before


@pytest.mark.open_question(11)
def test_spec_3_8_dvpp_malloc_size_zero_succeeds(dev):
    """docs/runtime-model.md §3.8 / §8.11: acldvppMalloc has no size check: size 0 reserves 32
    bytes (one huge page) and succeeds."""
    need_dvpp_memory()
    ptr, normal, huge = taken(lambda: raw.acldvppMalloc(0))
    assert ptr != 0
    assert ptr % 128 == 0
    assert (normal, huge) == (0, HUGE_PAGE)
    raw.acldvppFree(ptr)


def test_spec_3_8_dvpp_malloc_null_output_is_100000(dev, backend):
    """docs/runtime-model.md §3.8: acldvppMalloc(devPtr NULL) -> 100000; nothing is taken."""
    before = free_pools()
    assert backend.acldvppMalloc(64, null_outputs=1) == (100000, 0)
    assert free_pools() == before


def test_spec_3_8_dvpp_malloc_overflow_is_100000(dev):
    """docs/runtime-model.md §3.8: size arithmetic overflow -> 100000."""
    with pytest.raises(InvalidParamError) as e:
        raw.acldvppMalloc(2**64 - 1)
    assert e.value.code == 100000


def test_spec_3_8_dvpp_free_null_is_100000(dev):
    """docs/runtime-model.md §3.8: acldvppFree(NULL) -> 100000."""
    with pytest.raises(InvalidParamError) as e:
        raw.acldvppFree(0)
    assert e.value.code == 100000


@pytest.mark.open_question(1)
def test_spec_3_8_dvpp_double_free_is_107000(dev):
    """docs/runtime-model.md §3.8 / §8.1: freeing DVPP memory twice -> 107000 (fake's choice)."""
    need_dvpp_memory()
    ptr = raw.acldvppMalloc(64)
    raw.acldvppFree(ptr)
    with pytest.raises(RtParamInvalidError) as e:
        raw.acldvppFree(ptr)
    assert e.value.code == 107000


@pytest.mark.open_question(1)
def test_spec_3_8_acl_free_of_dvpp_pointer_is_107000(dev):
    """docs/runtime-model.md §3.6 / §3.8 / §8.1: aclrtFree of a DVPP pointer -> 107000; the DVPP
    block survives and acldvppFree still frees it."""
    need_dvpp_memory()
    before = free_pools()
    ptr = raw.acldvppMalloc(64)
    during = free_pools()
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtFree(ptr)
    assert e.value.code == 107000
    assert free_pools() == during
    raw.acldvppFree(ptr)
    assert free_pools() == before


@pytest.mark.open_question(1)
def test_spec_3_8_dvpp_free_of_acl_malloc_pointer_is_107000(dev):
    """docs/runtime-model.md §3.8 / §8.1: acldvppFree of an aclrtMalloc pointer -> 107000; the
    block survives and aclrtFree still frees it."""
    before = free_pools()
    ptr = raw.aclrtMalloc(3 * MiB, MallocPolicy.HUGE_ONLY)
    during = free_pools()
    with pytest.raises(RtParamInvalidError) as e:
        raw.acldvppFree(ptr)
    assert e.value.code == 107000
    assert free_pools() == during
    raw.aclrtFree(ptr)
    assert free_pools() == before


@pytest.mark.open_question(1)
def test_spec_3_8_dvpp_free_of_interior_pointer_is_107000(dev):
    """docs/runtime-model.md §3.8 / §8.1: acldvppFree of a pointer inside a DVPP block ->
    107000."""
    need_dvpp_memory()
    ptr = raw.acldvppMalloc(4096)
    with pytest.raises(RtParamInvalidError) as e:
        raw.acldvppFree(ptr + 128)
    assert e.value.code == 107000
    raw.acldvppFree(ptr)


def test_spec_3_9_hi_mpi_dev_id_is_ignored(dev):
    """docs/runtime-model.md §3.9: hi_mpi_dvpp_malloc's dev_id is reserved and ignored: memory comes
    from the current device whatever the id."""
    need_mpi_dvpp()
    for dev_id in (0, 7, 12345, 2**32 - 1):
        ptr, normal, huge = taken(partial(raw.hi_mpi_dvpp_malloc, dev_id, 100))
        assert (normal, huge) == (0, HUGE_PAGE)
        assert ptr % 128 == 0
        attrs = raw.aclrtPointerGetAttributes(ptr)
        assert attrs.type == MemLocationType.DEVICE
        assert attrs.id == 0
        raw.hi_mpi_dvpp_free(ptr)


@pytest.mark.parametrize("api", DVPP_APIS)
def test_spec_4_9_dvpp_pointer_is_device_memory(dev, api):
    """docs/runtime-model.md §4.9: DVPP memory has location type DEVICE with the user device id."""
    need_dvpp_api(api)
    ptr = dvpp_malloc(api, 100)
    attrs = raw.aclrtPointerGetAttributes(ptr)
    assert attrs.type == MemLocationType.DEVICE
    assert attrs.id == 0
    dvpp_free(api, ptr)


def test_spec_3_8_dvpp_beyond_the_huge_pool_is_207001(dev):
    """docs/runtime-model.md §3.8: DVPP failure means the huge pages are insufficient -> 207001,
    even while normal pages are free."""
    need_dvpp_memory()
    huge0 = free_pools()[1]
    fill = raw.aclrtMallocAlign32(huge0 // HUGE_PAGE * HUGE_PAGE, MallocPolicy.HUGE_ONLY)
    try:
        normal_free, huge_free = free_pools()
        assert huge_free < HUGE_PAGE
        assert normal_free > 4 * MiB
        for api in supported_dvpp_apis():
            with pytest.raises(MemoryAllocationError) as e:
                dvpp_malloc(api, 1)
            assert e.value.code == 207001
        assert free_pools() == (normal_free, huge_free)
    finally:
        raw.aclrtFree(fill)


# -- Pythonic Device.dvpp_malloc -------------------------------------------------------------------


@pytest.mark.parametrize(("api", "expected_api"), [
    (AllocApi.DVPP_MALLOC, AllocApi.DVPP_MALLOC),
    ("acldvppMalloc", AllocApi.DVPP_MALLOC),
    ("hi_mpi_dvpp_malloc", AllocApi.HI_MPI_DVPP_MALLOC),
])
def test_spec_3_8_device_dvpp_malloc(dev, api, expected_api):
    """docs/runtime-model.md §3.8 / §3.9 / §7: Device.dvpp_malloc: ALIGN_UP(size,32)+32 bytes (100
    -> 160, 1 -> 64, 33 -> 96), 128-byte aligned, data round trip, pages back after free."""
    need_dvpp_api(api)
    before = free_pools()
    for size, allocated in ((100, 160), (1, 64), (33, 96), (64, 96)):
        with dev.dvpp_malloc(size, api=api) as buf:
            assert buf.api is expected_api
            assert buf.size == size
            assert buf.allocated_size == allocated
            assert buf.ptr % 128 == 0
            assert buf.attributes().type == MemLocationType.DEVICE
            data = bytes((i * 7 + 1) % 256 for i in range(size))
            buf.copy_from(data)
            assert buf.read() == data
    assert free_pools() == before


def test_spec_3_8_device_dvpp_malloc_default_api_and_free(dev):
    """docs/runtime-model.md §3.8: Device.dvpp_malloc defaults to acldvppMalloc; free() returns the
    page."""
    need_dvpp_memory()
    before = free_pools()
    buf = dev.dvpp_malloc(1)
    assert buf.api is AllocApi.DVPP_MALLOC
    assert free_pools() == (before[0], before[1] - HUGE_PAGE)
    buf.free()
    buf.free()
    assert buf.freed
    assert free_pools() == before


def test_spec_3_8_device_dvpp_malloc_rejects_other_apis(dev):
    """docs/runtime-model.md §3.8 / §3.9: only acldvppMalloc and hi_mpi_dvpp_malloc make DVPP
    memory."""
    with pytest.raises(ValueError):
        dev.dvpp_malloc(64, api="aclrtMalloc")


# -- fake-only -------------------------------------------------------------------------------------


@pytest.mark.fake_only("only the fake can switch to the Ascend950 profile")
def test_spec_3_8_ascend950_has_no_dvpp_memory(fake):
    """docs/runtime-model.md §3.8: 950 has no separate DVPP memory (not in the product list) ->
    207000."""
    acl_mem.fake.configure("ascend950")
    with acl_mem.Device(0) as d:
        before = free_pools()
        with pytest.raises(FeatureNotSupportError) as e:
            raw.acldvppMalloc(64)
        assert e.value.code == 207000
        with pytest.raises(FeatureNotSupportError) as e2:
            raw.hi_mpi_dvpp_malloc(0, 64)
        assert e2.value.code == 207000
        with pytest.raises(FeatureNotSupportError) as e3:
            d.dvpp_malloc(64)
        assert e3.value.code == 207000
        assert free_pools() == before


@pytest.mark.fake_only("only the fake can switch to the Atlas 200 DK profile")
def test_spec_3_9_atlas_200dk_has_no_hi_mpi_dvpp(fake):
    """docs/runtime-model.md §3.9: the Atlas 200 DK (Ascend310) has no DVPP V2:
    hi_mpi_dvpp_malloc -> 207000 (the fake's choice) and takes nothing, NULL output is still
    100000 first; acldvppMalloc works."""
    acl_mem.fake.configure("atlas-200dk")
    board = acl_mem._backend.get()  # the fake configure() installed
    with acl_mem.Device(0) as d:
        assert soc_name() == "Ascend310"
        assert not has_mpi_dvpp()
        before = free_pools()
        assert board.hi_mpi_dvpp_malloc(0, 64, null_outputs=1) == (100000, 0)
        assert board.hi_mpi_dvpp_malloc(0, 64) == (207000, 0)
        with pytest.raises(FeatureNotSupportError) as e:
            d.dvpp_malloc(64, api="hi_mpi_dvpp_malloc")
        assert e.value.code == 207000
        assert free_pools() == before
        with d.dvpp_malloc(64) as buf:
            assert buf.api is AllocApi.DVPP_MALLOC
        assert free_pools() == before


@pytest.mark.fake_only("exhausting the 16 GiB DVPP window needs 16 GiB of huge pages")
def test_spec_3_8_dvpp_window_of_16gib_is_exhausted(fake):
    """docs/runtime-model.md §3.8 / §7: the DVPP address space is 16 GiB: 16 GiB - 32 (-> exactly 16
    GiB) fits, then even 1 byte -> 207001 while the huge pool still has room; other device
    memory is unaffected; freeing makes room again."""
    with acl_mem.Device(0):
        need_dvpp_memory()
        need_room_for_the_dvpp_window()
        assert free_pools()[1] > DVPP_WINDOW + 8 * MiB
        with pytest.raises(MemoryAllocationError) as e0:
            raw.acldvppMalloc(DVPP_WINDOW - 31)      # 16 GiB + 32 > window
        assert e0.value.code == 207001
        whole = raw.acldvppMalloc(DVPP_WINDOW - 32)  # exactly 16 GiB
        for api in supported_dvpp_apis():
            with pytest.raises(MemoryAllocationError) as e:
                dvpp_malloc(api, 1)
            assert e.value.code == 207001
        # Not the huge pool: ordinary huge-page memory is still there.
        raw.aclrtFree(raw.aclrtMalloc(3 * MiB, MallocPolicy.HUGE_ONLY))
        raw.acldvppFree(whole)
        raw.acldvppFree(raw.acldvppMalloc(1))


@pytest.mark.fake_only("exhausting the 16 GiB DVPP window needs 16 GiB of huge pages")
def test_spec_3_9_dvpp_window_is_shared_by_both_dvpp_apis(fake):
    """docs/runtime-model.md §3.8 / §3.9: acldvppMalloc and hi_mpi_dvpp_malloc draw on one 16 GiB
    window."""
    with acl_mem.Device(0):
        need_mpi_dvpp()
        need_room_for_the_dvpp_window()
        half = raw.acldvppMalloc(8 * GiB - 32)          # exactly 8 GiB
        other = raw.hi_mpi_dvpp_malloc(0, 8 * GiB - 32)  # the other 8 GiB
        with pytest.raises(MemoryAllocationError) as e:
            raw.acldvppMalloc(1)
        assert e.value.code == 207001
        raw.hi_mpi_dvpp_free(other)
        raw.acldvppFree(half)


@pytest.mark.fake_only("only the fake can switch to the Atlas-inference profile")
def test_spec_3_8_atlas_inference_has_dvpp_memory(fake):
    """docs/runtime-model.md §3.8: Atlas inference products have DVPP memory: ALIGN_UP(size,32)+32
    in huge pages, 128-byte aligned."""
    acl_mem.fake.configure("atlas-inference")
    with acl_mem.Device(0):
        ptr, normal, huge = taken(lambda: raw.acldvppMalloc(2 * MiB))
        assert (normal, huge) == (0, 4 * MiB)
        assert ptr % 128 == 0
        raw.acldvppFree(ptr)
