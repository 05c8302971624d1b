"""Conformance: aclrtGetMemInfo (docs/runtime-model.md §3.12), aclrtMemGetAddressRange
(docs/runtime-model.md §4.8) and aclrtPointerGetAttributes (docs/runtime-model.md §4.9).

Pool sizes, page sizes and codes are written out by hand from the runtime model; page sizes of
small and huge blocks follow the fake's choice for open question 15. Release differences
(docs/runtime-model.md §0.1): 8.5.0 refuses attributes 12-17 (107016), has no
aclrtMemGetAddressRange, and reports the device id for host memory.
"""

from __future__ import annotations

import mmap

import numpy as np
import pytest

import acl_mem
from acl_mem import raw
from acl_mem.enums import MallocPolicy, MemAttr, MemLocationType
from acl_mem.errors import (
    AclError,
    ContextNullError,
    FeatureNotSupportError,
    InvalidMemoryTypeError,
    InvalidParamError,
    RtParamInvalidError,
)
from acl_mem.sizes import soc_padding

from .helpers import (
    in_fresh_thread,
    need_giant_pages,
    need_two_devices,
    padding_reason,
    runtime_release,
    since,
)

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


# -- helpers ---------------------------------------------------------------------------------------
def info_or_code(attr: int) -> tuple[int, int] | int:
    """``(free, total)`` of ``attr``, or the error code it raised."""
    try:
        return raw.aclrtGetMemInfo(attr)
    except AclError as exc:
        return exc.code


def padded_malloc_size(size: int) -> int:
    """aclrtMalloc's rounding by hand (docs/runtime-model.md §3.5): floor((size + 32 + pad - 1) /
    32) * 32."""
    pad = soc_padding(raw.aclrtGetSocName(), runtime_release())
    return (size + 32 + pad - 1) // 32 * 32


# -- §3.12 aclrtGetMemInfo -------------------------------------------------------------------------
@pytest.mark.parametrize("null_outputs", [1, 2, 3])
@pytest.mark.parametrize("attr", [MemAttr.HBM_MEM, MemAttr.MEM_NORMAL, 18, 1000])
def test_get_mem_info_null_output_is_100000(dev, backend, null_outputs, attr):
    """docs/runtime-model.md §3.12: free or total NULL -> 100000 (ACL layer, before the attr
    check)."""
    rc, *_ = backend.aclrtGetMemInfo(attr, null_outputs=null_outputs)
    assert rc == 100000


def test_get_mem_info_null_output_beats_missing_context(backend):
    """docs/runtime-model.md §1.2/§3.12: the NULL check (100000) runs before the context lookup."""
    result, error = in_fresh_thread(lambda: backend.aclrtGetMemInfo(1, null_outputs=1))
    assert error is None
    assert result == (100000, 0, 0)


@pytest.mark.parametrize("attr", [18, 19, 1000, 0xFFFFFFFF])
def test_get_mem_info_unknown_attr_is_107016(dev, attr):
    """docs/runtime-model.md §3.12: attr outside 0..17 -> 107016
    ACL_ERROR_RT_INVALID_MEMORY_TYPE."""
    with pytest.raises(InvalidMemoryTypeError) as e:
        raw.aclrtGetMemInfo(attr)
    assert e.value.code == 107016


@pytest.mark.parametrize("attr", [18, 1000])
def test_get_mem_info_unknown_attr_beats_missing_context(backend, attr):
    """docs/runtime-model.md §1.2/§3.12: the attr range check (runtime decorator) precedes the
    context lookup."""
    _, error = in_fresh_thread(lambda: raw.aclrtGetMemInfo(attr))
    assert isinstance(error, InvalidMemoryTypeError)
    assert error.code == 107016


@pytest.mark.parametrize("attr", [
    MemAttr.HBM_MEM, MemAttr.HBM_MEM_NORMAL,
    pytest.param(MemAttr.MEM_HUGE, marks=pytest.mark.cann("9.0.1", "9.1.0"))])
def test_get_mem_info_without_context_is_107002(backend, attr):
    """docs/runtime-model.md §3.12: a thread with no current context -> 107002."""
    _, error = in_fresh_thread(lambda: raw.aclrtGetMemInfo(attr))
    assert isinstance(error, ContextNullError)
    assert error.code == 107002


def test_get_mem_info_hbm_is_huge_plus_normal(dev):
    """docs/runtime-model.md §3.12: ACL_HBM_MEM = huge + normal, for free and for total."""
    free, total = raw.aclrtGetMemInfo(MemAttr.HBM_MEM)
    huge_free, huge_total = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)
    normal_free, normal_total = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)
    assert total == huge_total + normal_total
    assert free == huge_free + normal_free
    assert 0 < free <= total


def test_get_mem_info_hbm_sum_holds_after_allocations(dev):
    """docs/runtime-model.md §3.12: the HBM = huge + normal identity holds with memory in both
    pools."""
    raw.aclrtMalloc(100, MallocPolicy.NORMAL_ONLY)
    raw.aclrtMalloc(3 * MiB, MallocPolicy.HUGE_ONLY)
    free, total = raw.aclrtGetMemInfo(MemAttr.HBM_MEM)
    huge_free, huge_total = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)
    normal_free, normal_total = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)
    assert (free, total) == (huge_free + normal_free, huge_total + normal_total)


@pytest.mark.parametrize(
    ("new_attr", "hbm_attr"),
    [
        (MemAttr.MEM_NORMAL, MemAttr.HBM_MEM_NORMAL),
        (MemAttr.MEM_HUGE, MemAttr.HBM_MEM_HUGE),
        (MemAttr.MEM_HUGE1G, MemAttr.HBM_MEM_HUGE1G),
        (MemAttr.MEM_P2P_NORMAL, MemAttr.HBM_MEM_P2P_NORMAL),
        (MemAttr.MEM_P2P_HUGE, MemAttr.HBM_MEM_P2P_HUGE),
        (MemAttr.MEM_P2P_HUGE1G, MemAttr.HBM_MEM_P2P_HUGE1G),
    ],
)
@pytest.mark.cann("9.0.1", "9.1.0")
def test_get_mem_info_new_attrs_match_hbm_attrs(dev, new_attr, hbm_attr):
    """docs/runtime-model.md §3.12: ACL_MEM_* (12-17) report the same pools as the HBM attrs on an
    HBM device (from 9.0.1)."""
    raw.aclrtMalloc(100, MallocPolicy.NORMAL_ONLY)
    raw.aclrtMalloc(3 * MiB, MallocPolicy.HUGE_ONLY)
    assert info_or_code(new_attr) == info_or_code(hbm_attr)


@pytest.mark.cann("8.5.0")
@pytest.mark.parametrize("attr", [MemAttr.MEM_NORMAL, MemAttr.MEM_HUGE, MemAttr.MEM_HUGE1G,
                                  MemAttr.MEM_P2P_NORMAL, MemAttr.MEM_P2P_HUGE,
                                  MemAttr.MEM_P2P_HUGE1G])
def test_get_mem_info_new_attrs_are_107016_on_8_5_0(dev, backend, attr):
    """docs/runtime-model.md §3.12 Releases: 8.5.0's runtime accepts attributes 0-11 only:
    ACL_MEM_NORMAL ... ACL_MEM_P2P_HUGE1G (12-17) -> 107016, also without a context (the
    range check comes first); the ACL layer's NULL checks (100000) still come before it."""
    with pytest.raises(InvalidMemoryTypeError) as e:
        raw.aclrtGetMemInfo(attr)
    assert e.value.code == 107016
    _, error = in_fresh_thread(lambda: raw.aclrtGetMemInfo(attr))
    assert isinstance(error, InvalidMemoryTypeError) and error.code == 107016, error
    assert backend.aclrtGetMemInfo(attr, null_outputs=1)[0] == 100000
    # Their HBM twins (0-11) answer as on every release.
    assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)[1] > 0


def test_device_pools_follow_the_release(dev, cann):
    """docs/runtime-model.md §3.12: Device.pools() lists what the runtime answers: the
    ACL_MEM_* attributes (12-17) from 9.0.1, left out on 8.5.0 (107016 there)."""
    found = dev.pools()
    new = {MemAttr.MEM_NORMAL, MemAttr.MEM_HUGE, MemAttr.MEM_P2P_NORMAL, MemAttr.MEM_P2P_HUGE}
    assert MemAttr.HBM_MEM in found
    if since(cann, "9.0.1"):
        assert new <= set(found)
        assert found[MemAttr.MEM_HUGE] == found[MemAttr.HBM_MEM_HUGE]
    else:
        assert not {a for a in found if a >= MemAttr.MEM_NORMAL}


@pytest.mark.parametrize(
    ("p2p_attr", "plain_attr"),
    [
        (MemAttr.HBM_MEM_P2P_NORMAL, MemAttr.HBM_MEM_NORMAL),
        (MemAttr.HBM_MEM_P2P_HUGE, MemAttr.HBM_MEM_HUGE),
        (MemAttr.HBM_MEM_P2P_HUGE1G, MemAttr.HBM_MEM_HUGE1G),
    ],
)
def test_get_mem_info_p2p_attrs_report_the_same_page_pool(dev, p2p_attr, plain_attr):
    """docs/runtime-model.md §3.12: *_HUGE -> huge pool, *_HUGE1G -> 1 GiB pool, other attrs ->
    normal pool."""
    raw.aclrtMalloc(3 * MiB, MallocPolicy.HUGE_ONLY)
    assert info_or_code(p2p_attr) == info_or_code(plain_attr)


def pages(nbytes: int, page: int) -> int:
    """``nbytes`` rounded up to whole pages of ``page`` bytes."""
    return -(-nbytes // page) * page


@pytest.mark.parametrize(
    ("size", "policy", "pool"),
    [
        (100, MallocPolicy.HUGE_FIRST, "normal"),  # padded <= 1 MiB -> normal pages
        (100, MallocPolicy.NORMAL_ONLY, "normal"),
        (4096, MallocPolicy.NORMAL_ONLY, "normal"),  # 4096 + padding: 8 KiB unless padding 0
        (100, MallocPolicy.HUGE_ONLY, "huge"),
        (3 * MiB, MallocPolicy.HUGE_FIRST, "huge"),  # 3 MiB + padding -> two 2 MiB pages
        (3 * MiB, MallocPolicy.NORMAL_ONLY, "normal"),
    ],
)
def test_allocation_reduces_free_of_the_right_pool(dev, size, policy, pool):
    """docs/runtime-model.md §3.12 with §3.5/§3.13: the pool the policy names loses whole pages;
    free restores."""
    padded = padded_malloc_size(size)
    normal_delta = pages(padded, 4 * KiB) if pool == "normal" else 0
    huge_delta = pages(padded, 2 * MiB) if pool == "huge" else 0
    normal = dev.mem_info(MemAttr.HBM_MEM_NORMAL)
    huge = dev.mem_info(MemAttr.HBM_MEM_HUGE)
    both = dev.mem_info(MemAttr.HBM_MEM)
    ptr = raw.aclrtMalloc(size, policy)
    assert normal.free - dev.mem_info(MemAttr.HBM_MEM_NORMAL).free == normal_delta
    assert huge.free - dev.mem_info(MemAttr.HBM_MEM_HUGE).free == huge_delta
    after = dev.mem_info(MemAttr.HBM_MEM)
    assert both.free - after.free == normal_delta + huge_delta
    assert after.total == both.total
    raw.aclrtFree(ptr)
    assert dev.mem_info(MemAttr.HBM_MEM_NORMAL) == normal
    assert dev.mem_info(MemAttr.HBM_MEM_HUGE) == huge


def test_allocation_deltas_by_hand_on_padding_32(dev):
    """docs/runtime-model.md §3.5/§3.12, padding 32: 4096 -> 8 KiB; 3 MiB NORMAL_ONLY -> 3 MiB + 4
    KiB."""
    if soc_padding(raw.aclrtGetSocName(), runtime_release()) != 32:
        pytest.skip(padding_reason("numbers below are for padding 32"))
    normal = dev.mem_info(MemAttr.HBM_MEM_NORMAL).free
    raw.aclrtMalloc(4096, MallocPolicy.NORMAL_ONLY)
    assert normal - dev.mem_info(MemAttr.HBM_MEM_NORMAL).free == 8 * KiB
    raw.aclrtMalloc(3 * MiB, MallocPolicy.NORMAL_ONLY)
    assert normal - dev.mem_info(MemAttr.HBM_MEM_NORMAL).free == 8 * KiB + 3 * MiB + 4 * KiB


def test_one_mib_malloc_pool_depends_on_padding(dev):
    """docs/runtime-model.md §3.5/§3.12: aclrtMalloc(1 MiB) pads past 1 MiB (huge pages) unless
    padding is 0."""
    padded = padded_malloc_size(MiB)
    normal = dev.mem_info(MemAttr.HBM_MEM_NORMAL).free
    huge = dev.mem_info(MemAttr.HBM_MEM_HUGE).free
    raw.aclrtMalloc(MiB, MallocPolicy.HUGE_FIRST)
    if padded > MiB:
        assert (normal - dev.mem_info(MemAttr.HBM_MEM_NORMAL).free,
                huge - dev.mem_info(MemAttr.HBM_MEM_HUGE).free) == (0, 2 * MiB)
    else:
        assert (normal - dev.mem_info(MemAttr.HBM_MEM_NORMAL).free,
                huge - dev.mem_info(MemAttr.HBM_MEM_HUGE).free) == (MiB, 0)


def test_align32_one_mib_takes_normal_pages(dev):
    """docs/runtime-model.md §3.5/§3.12: aclrtMallocAlign32(1 MiB) is exactly 1 MiB -> not > 1 MiB
    -> normal."""
    normal = dev.mem_info(MemAttr.HBM_MEM_NORMAL).free
    huge = dev.mem_info(MemAttr.HBM_MEM_HUGE).free
    raw.aclrtMallocAlign32(MiB, MallocPolicy.HUGE_FIRST)
    assert normal - dev.mem_info(MemAttr.HBM_MEM_NORMAL).free == MiB
    assert huge - dev.mem_info(MemAttr.HBM_MEM_HUGE).free == 0


def test_mem_info_is_per_device(dev):
    """docs/runtime-model.md §3.12: the pool of the current device only; device 1 memory leaves
    device 0 alone."""
    need_two_devices()
    before = dev.mem_info(MemAttr.HBM_MEM_NORMAL)
    raw.aclrtSetDevice(1)
    try:
        one_before = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)[0]
        raw.aclrtMalloc(100, MallocPolicy.NORMAL_ONLY)
        assert one_before - raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)[0] == 4 * KiB
    finally:
        raw.aclrtSetDevice(0)
    assert dev.mem_info(MemAttr.HBM_MEM_NORMAL) == before
    raw.aclrtResetDevice(1)
    raw.aclrtResetDevice(0)


@pytest.mark.fake_only("the pool sizes of the atlas-a2 profile are the fake's choice")
def test_atlas_a2_pool_sizes(fake):
    """docs/runtime-model.md §3.12 on the fake's atlas-a2: 64 GiB = 4 GiB normal + 60 GiB huge; 1G =
    60 GiB."""
    acl_mem.fake.configure("atlas-a2")
    with acl_mem.Device(0) as d:
        assert d.mem_info(MemAttr.HBM_MEM) == (64 * GiB, 64 * GiB)
        assert d.mem_info(MemAttr.HBM_MEM_NORMAL) == (4 * GiB, 4 * GiB)
        assert d.mem_info(MemAttr.HBM_MEM_HUGE) == (60 * GiB, 60 * GiB)
        assert d.mem_info(MemAttr.HBM_MEM_HUGE1G) == (60 * GiB, 60 * GiB)


@pytest.mark.fake_only("atlas-a2 is an HBM profile of the fake; DDR attrs report nothing there")
@pytest.mark.parametrize(
    "attr",
    [MemAttr.DDR_MEM, MemAttr.DDR_MEM_HUGE, MemAttr.DDR_MEM_NORMAL, MemAttr.DDR_MEM_P2P_HUGE,
     MemAttr.DDR_MEM_P2P_NORMAL],
)
def test_atlas_a2_ddr_attrs_report_zero(fake, attr):
    """docs/runtime-model.md §3.12: an attribute the hardware lacks -> free = total = 0
    (success)."""
    acl_mem.fake.configure("atlas-a2")
    with acl_mem.Device(0):
        assert raw.aclrtGetMemInfo(attr) == (0, 0)


@pytest.mark.fake_only("the 1 GiB pool carved from the huge pool is the fake's model")
def test_atlas_a2_huge1g_free_is_whole_gibs(fake, cann):
    """docs/runtime-model.md §3.12: *_HUGE1G reports the 1 GiB pool: free counts whole GiB pages
    only (ACL_MEM_HUGE1G too from 9.0.1; 107016 on 8.5.0)."""
    acl_mem.fake.configure("atlas-a2")
    with acl_mem.Device(0):
        raw.aclrtMalloc(3 * MiB, MallocPolicy.HUGE_FIRST)  # 4 MiB of huge pages
        assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE) == (60 * GiB - 4 * MiB, 60 * GiB)
        assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE1G) == (59 * GiB, 60 * GiB)
        assert info_or_code(MemAttr.MEM_HUGE1G) == \
            ((59 * GiB, 60 * GiB) if since(cann, "9.0.1") else 107016)
        raw.aclrtMalloc(1, MallocPolicy.HUGE1G_ONLY)  # one 1 GiB page
        assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE) == (59 * GiB - 4 * MiB, 60 * GiB)
        assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE1G) == (58 * GiB, 60 * GiB)
        assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL) == (4 * GiB, 4 * GiB)


@pytest.mark.fake_only("needs the fake's atlas-inference (DDR) profile")
@pytest.mark.parametrize(
    ("hbm_attr", "ddr_attr", "total"),
    [
        (MemAttr.HBM_MEM, MemAttr.DDR_MEM, 24 * GiB),
        (MemAttr.HBM_MEM_NORMAL, MemAttr.DDR_MEM_NORMAL, 1536 * MiB),  # 24 GiB / 16
        (MemAttr.HBM_MEM_HUGE, MemAttr.DDR_MEM_HUGE, 24 * GiB - 1536 * MiB),
        (MemAttr.HBM_MEM_P2P_NORMAL, MemAttr.DDR_MEM_P2P_NORMAL, 1536 * MiB),
        (MemAttr.HBM_MEM_P2P_HUGE, MemAttr.DDR_MEM_P2P_HUGE, 24 * GiB - 1536 * MiB),
        pytest.param(MemAttr.MEM_NORMAL, MemAttr.DDR_MEM_NORMAL, 1536 * MiB,
                     marks=pytest.mark.cann("9.0.1", "9.1.0")),
        pytest.param(MemAttr.MEM_HUGE, MemAttr.DDR_MEM_HUGE, 24 * GiB - 1536 * MiB,
                     marks=pytest.mark.cann("9.0.1", "9.1.0")),
    ],
)
def test_ddr_device_hbm_attrs_report_ddr_pools(fake, hbm_attr, ddr_attr, total):
    """docs/runtime-model.md §3.12: on a DDR chip HBM attrs silently query DDR (same free and
    total)."""
    acl_mem.fake.configure("atlas-inference")
    with acl_mem.Device(0):
        raw.aclrtMalloc(100, MallocPolicy.NORMAL_ONLY)
        raw.aclrtMalloc(100, MallocPolicy.HUGE_ONLY)
        hbm = raw.aclrtGetMemInfo(hbm_attr)
        assert hbm == raw.aclrtGetMemInfo(ddr_attr)
        assert hbm[1] == total
        used = {1536 * MiB: 4 * KiB, 24 * GiB - 1536 * MiB: 2 * MiB}.get(total, 4 * KiB + 2 * MiB)
        assert hbm[0] == total - used


@pytest.mark.fake_only("needs the fake's atlas-inference profile (no 1 GiB pages)")
@pytest.mark.parametrize(
    "attr",
    [MemAttr.HBM_MEM_HUGE1G, MemAttr.HBM_MEM_P2P_HUGE1G, MemAttr.MEM_HUGE1G,
     MemAttr.MEM_P2P_HUGE1G],
)
def test_ddr_device_huge1g_is_207000(fake, cann, attr):
    """docs/runtime-model.md §3.12: *_HUGE1G on a chip without 1 GiB pages -> 207000; on 8.5.0
    the attribute range check comes first, so ACL_MEM_HUGE1G / ACL_MEM_P2P_HUGE1G give 107016
    there."""
    acl_mem.fake.configure("atlas-inference")
    with acl_mem.Device(0):
        if attr >= MemAttr.MEM_NORMAL and not since(cann, "9.0.1"):
            assert info_or_code(attr) == 107016
            return
        with pytest.raises(FeatureNotSupportError) as e:
            raw.aclrtGetMemInfo(attr)
        assert e.value.code == 207000


# -- §4.8 aclrtMemGetAddressRange ------------------------------------------------------------------
@pytest.mark.cann("9.0.1", "9.1.0")
def test_address_range_null_ptr_is_100000(dev, backend):
    """docs/runtime-model.md §4.8: ptr NULL -> 100000, also when both outputs are NULL (ACL layer
    first)."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtMemGetAddressRange(0)
    assert e.value.code == 100000
    assert backend.aclrtMemGetAddressRange(0, null_outputs=3)[0] == 100000


@pytest.mark.cann("9.0.1", "9.1.0")
def test_address_range_both_outputs_null_is_107000(dev, backend):
    """docs/runtime-model.md §4.8: pbase and psize both NULL -> 107000."""
    ptr = raw.aclrtMalloc(64)
    assert backend.aclrtMemGetAddressRange(ptr, null_outputs=3)[0] == 107000


@pytest.mark.cann("9.0.1", "9.1.0")
@pytest.mark.open_question(15)
def test_address_range_one_output_null_is_fine(dev, backend):
    """docs/runtime-model.md §4.8: one of pbase / psize may be NULL; the other is still written."""
    ptr = raw.aclrtMalloc(64)
    rc, _, size = backend.aclrtMemGetAddressRange(ptr + 8, null_outputs=1)
    assert (rc, size) == (0, 4 * KiB)
    rc, base, _ = backend.aclrtMemGetAddressRange(ptr + 8, null_outputs=2)
    assert (rc, base) == (0, ptr)


@pytest.mark.cann("9.0.1", "9.1.0")
@pytest.mark.open_question(15)
@pytest.mark.parametrize(
    ("call", "size", "policy", "expected"),
    [
        ("aclrtMalloc", 1, MallocPolicy.HUGE_FIRST, 4 * KiB),
        ("aclrtMallocAlign32", 4096, MallocPolicy.HUGE_FIRST, 4 * KiB),
        ("aclrtMalloc", 3 * MiB, MallocPolicy.HUGE_FIRST, 4 * MiB),
        ("aclrtMalloc", 1, MallocPolicy.HUGE_ONLY, 2 * MiB),
        ("aclrtMalloc", 5 * KiB, MallocPolicy.NORMAL_ONLY, 8 * KiB),
        ("aclrtMallocAlign32", 3 * MiB, MallocPolicy.NORMAL_ONLY, 3 * MiB),
    ],
)
def test_address_range_size_is_page_rounded(dev, call, size, policy, expected):
    """docs/runtime-model.md §4.8 / open question 15: psize = padded size rounded up to the block's
    page size."""
    ptr = getattr(raw, call)(size, policy)
    assert raw.aclrtMemGetAddressRange(ptr) == (ptr, expected)


@pytest.mark.cann("9.0.1", "9.1.0")
@pytest.mark.open_question(15)
def test_address_range_malloc_4096_spills_into_a_second_page(dev):
    """docs/runtime-model.md §3.5 + §4.8: aclrtMalloc(4096) is 4096 + padding bytes: 8 KiB unless
    padding is 0."""
    ptr = raw.aclrtMalloc(4096, MallocPolicy.NORMAL_ONLY)
    expected = 8 * KiB if padded_malloc_size(4096) > 4096 else 4 * KiB
    assert raw.aclrtMemGetAddressRange(ptr)[1] == expected


@pytest.mark.cann("9.0.1", "9.1.0")
@pytest.mark.open_question(15)
@pytest.mark.parametrize("offset", [1, 63, 4095])
def test_address_range_interior_pointer_gives_the_base(dev, offset):
    """docs/runtime-model.md §4.8: any address inside the block reports the block's base and
    size."""
    ptr = raw.aclrtMalloc(64)
    assert raw.aclrtMemGetAddressRange(ptr + offset) == (ptr, 4 * KiB)


@pytest.mark.cann("9.0.1", "9.1.0")
@pytest.mark.open_question(15)
def test_address_range_interior_pointer_of_huge_block(dev):
    """docs/runtime-model.md §4.8: interior pointer of a 3 MiB HUGE_FIRST block -> (base, 4 MiB)."""
    ptr = raw.aclrtMalloc(3 * MiB)
    assert raw.aclrtMemGetAddressRange(ptr + 3 * MiB - 1) == (ptr, 4 * MiB)


@pytest.mark.cann("9.0.1", "9.1.0")
def test_address_range_of_two_blocks_are_distinct(dev):
    """docs/runtime-model.md §4.8: each block reports its own base."""
    a = raw.aclrtMalloc(64)
    b = raw.aclrtMalloc(64)
    assert raw.aclrtMemGetAddressRange(a)[0] == a
    assert raw.aclrtMemGetAddressRange(b)[0] == b


@pytest.mark.cann("9.0.1", "9.1.0")
def test_address_range_freed_device_pointer_is_107000(dev):
    """docs/runtime-model.md §4.8: a device address no block holds any more -> 107000."""
    ptr = raw.aclrtMalloc(64)
    raw.aclrtFree(ptr)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemGetAddressRange(ptr)
    assert e.value.code == 107000


@pytest.mark.cann("9.0.1", "9.1.0")
@pytest.mark.open_question(15)
def test_address_range_pinned_host_memory(dev):
    """docs/runtime-model.md §4.8: blocks from aclrtMallocHost are known too (base, size rounded to
    a page)."""
    ptr = raw.aclrtMallocHost(100)
    try:
        page = mmap.PAGESIZE
        assert raw.aclrtMemGetAddressRange(ptr) == (ptr, page)
        assert raw.aclrtMemGetAddressRange(ptr + 99) == (ptr, page)
    finally:
        raw.aclrtFreeHost(ptr)


@pytest.mark.cann("9.0.1", "9.1.0")
@pytest.mark.open_question(15)
def test_address_range_pythonic(dev):
    """docs/runtime-model.md §4.8 through DeviceBuffer.address_range()."""
    buf = dev.malloc(3 * MiB)
    assert buf.address_range() == (buf.ptr, 4 * MiB)


@pytest.mark.cann("8.5.0")
def test_address_range_does_not_exist_on_8_5_0(backend, dev):
    """docs/runtime-model.md §4.8 Releases: CANN 8.5.0 has no aclrtMemGetAddressRange: every
    call raises FunctionNotAvailableError naming the call, the release and the first release
    with it (9.0.1), before any argument is looked at, and it is no AclError."""
    ptr = raw.aclrtMalloc(64)
    for address in (ptr, ptr + 8, 0):
        with pytest.raises(acl_mem.FunctionNotAvailableError) as e:
            raw.aclrtMemGetAddressRange(address)
        assert (e.value.function, e.value.release) == ("aclrtMemGetAddressRange", "8.5.0")
        assert "9.0.1" in str(e.value)
        assert not isinstance(e.value, AclError)
    with pytest.raises(acl_mem.FunctionNotAvailableError):
        backend.aclrtMemGetAddressRange(ptr, null_outputs=3)
    # What 8.5.0 has for the question: aclrtPointerGetAttributes.
    assert raw.aclrtPointerGetAttributes(ptr + 8).type == MemLocationType.DEVICE


# -- §4.9 aclrtPointerGetAttributes ----------------------------------------------------------------
def test_pointer_attributes_null_ptr_is_100000(dev, backend):
    """docs/runtime-model.md §4.9: ptr NULL -> 100000."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtPointerGetAttributes(0)
    assert e.value.code == 100000
    assert backend.aclrtPointerGetAttributes(0, null_outputs=1)[0] == 100000


def test_pointer_attributes_null_attributes_is_100000(dev, backend):
    """docs/runtime-model.md §4.9: attributes NULL -> 100000."""
    ptr = raw.aclrtMalloc(64)
    assert backend.aclrtPointerGetAttributes(ptr, null_outputs=1)[0] == 100000


@pytest.mark.open_question(15)
@pytest.mark.parametrize(
    ("size", "policy", "page"),
    [
        (64, MallocPolicy.HUGE_FIRST, 4096),
        (64, MallocPolicy.NORMAL_ONLY, 4096),
        (3 * MiB, MallocPolicy.HUGE_FIRST, 2 * MiB),
        (64, MallocPolicy.HUGE_ONLY, 2 * MiB),
    ],
)
def test_pointer_attributes_device_memory(dev, size, policy, page):
    """docs/runtime-model.md §4.9 / open question 15: DEVICE, id 0, pageSize 4096 (normal) or 2 MiB
    (huge)."""
    ptr = raw.aclrtMalloc(size, policy)
    attrs = raw.aclrtPointerGetAttributes(ptr)
    assert (attrs.type, attrs.id, attrs.pageSize) == (MemLocationType.DEVICE, 0, page)
    assert raw.aclrtPointerGetAttributes(ptr + size - 1) == attrs


@pytest.mark.open_question(15)
def test_pointer_attributes_giant_page_block(dev):
    """docs/runtime-model.md §4.9 / open question 15: a HUGE1G_ONLY block reports pageSize 1 GiB."""
    need_giant_pages()
    ptr = raw.aclrtMalloc(1, MallocPolicy.HUGE1G_ONLY)
    attrs = raw.aclrtPointerGetAttributes(ptr)
    assert (attrs.type, attrs.id, attrs.pageSize) == (MemLocationType.DEVICE, 0, GiB)


def test_pointer_attributes_device_1_reports_id_1(dev):
    """docs/runtime-model.md §4.9: location.id is the (user) device id of the block."""
    need_two_devices()
    raw.aclrtSetDevice(1)
    try:
        ptr = raw.aclrtMalloc(64)
    finally:
        raw.aclrtSetDevice(0)
    try:
        attrs = raw.aclrtPointerGetAttributes(ptr)
        assert (attrs.type, attrs.id) == (MemLocationType.DEVICE, 1)
    finally:
        raw.aclrtFree(ptr)
        raw.aclrtResetDevice(1)
        raw.aclrtResetDevice(0)


def test_pointer_attributes_pinned_host(dev):
    """docs/runtime-model.md §4.9: aclrtMallocHost memory -> HOST, id 0."""
    ptr = raw.aclrtMallocHost(100)
    try:
        attrs = raw.aclrtPointerGetAttributes(ptr)
        assert (attrs.type, attrs.id) == (MemLocationType.HOST, 0)
        assert raw.aclrtPointerGetAttributes(ptr + 50).type == MemLocationType.HOST
    finally:
        raw.aclrtFreeHost(ptr)


def test_pointer_attributes_host_memory_id_by_release(dev, cann):
    """docs/runtime-model.md §4.9 Releases: host memory reports location.id 0 from 9.0.1; 8.5.0
    reports the driver's device id there (the fake: the calling thread's current device), so
    with device 1 current it says 1. Device memory reports its own device on every release."""
    need_two_devices()
    host = raw.aclrtMallocHost(100)
    on0 = raw.aclrtMalloc(64)
    raw.aclrtSetDevice(1)
    try:
        attrs = raw.aclrtPointerGetAttributes(host)
        device_attrs = raw.aclrtPointerGetAttributes(on0)
    finally:
        raw.aclrtSetDevice(0)
        raw.aclrtResetDevice(1)
    try:
        assert (attrs.type, attrs.id) == (MemLocationType.HOST,
                                          0 if since(cann, "9.0.1") else 1)
        assert (device_attrs.type, device_attrs.id) == (MemLocationType.DEVICE, 0)
        assert raw.aclrtPointerGetAttributes(host).id == 0  # device 0 current
    finally:
        raw.aclrtFreeHost(host)
        raw.aclrtFree(on0)
        raw.aclrtResetDevice(0)


def test_pointer_attributes_numpy_is_unregistered(dev):
    """docs/runtime-model.md §4.9: plain host memory (a numpy array) -> UNREGISTERED."""
    arr = np.zeros(1000, dtype=np.uint8)
    assert raw.aclrtPointerGetAttributes(arr.ctypes.data).type == MemLocationType.UNREGISTERED


@pytest.mark.open_question(15)
def test_pointer_attributes_without_context(dev):
    """docs/runtime-model.md §4.9: works from a thread with no current context."""
    ptr = raw.aclrtMalloc(64)
    result, error = in_fresh_thread(lambda: raw.aclrtPointerGetAttributes(ptr))
    assert error is None
    assert isinstance(result, raw.PtrAttributes)
    assert (result.type, result.id, result.pageSize) == (MemLocationType.DEVICE, 0, 4096)


def test_pointer_attributes_pythonic(dev):
    """docs/runtime-model.md §4.9 through DeviceBuffer/HostBuffer.attributes()."""
    buf = dev.malloc(64)
    assert buf.attributes().type == MemLocationType.DEVICE
    host = dev.malloc_host(64)
    try:
        assert host.attributes().type == MemLocationType.HOST
    finally:
        host.free()
