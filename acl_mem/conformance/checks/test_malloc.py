"""Conformance: aclrtMalloc / aclrtMallocAlign32 / aclrtMallocCached (docs/runtime-model.md §3.5),
aclrtFree (docs/runtime-model.md §3.6) and the page policies (docs/runtime-model.md §3.13).

Page use is observed through the pools aclrtGetMemInfo reports (free bytes before and
after) and through aclrtMemGetAddressRange (from CANN 9.0.1; 8.5.0 lacks the call). Expected
numbers are worked out here from the runtime model's formulas; the padding comes from the SoC
name and the CANN release: a fixed 32 before 9.1.0 (docs/runtime-model.md §3.5).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial

import pytest

import acl_mem
from acl_mem import raw
from acl_mem.enums import MallocPolicy, MemAttr
from acl_mem.errors import (
    ContextNullError,
    FeatureNotSupportError,
    InvalidParamError,
    MemoryAllocationError,
    RtParamInvalidError,
)
from acl_mem.sizes import soc_padding

from .helpers import (
    address_of,
    free_pools,
    need_giant_pages,
    padding_reason,
    raise_from_fresh_thread,
    runtime_release,
    since,
    soc_name,
    taken,
)

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
NORMAL_PAGE = 4 * KiB
HUGE_PAGE = 2 * MiB
GIANT_PAGE = 1 * GiB
SIZE_T_MAX = 2**64 - 1

APIS = ["aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached"]

# -- helpers ---------------------------------------------------------------------------------------


def alloc(api: str, size: int, policy: int = MallocPolicy.HUGE_FIRST) -> int:
    call: Callable[[int, int], int] = getattr(raw, api)
    return call(size, policy)


def padding() -> int:
    """The padding of the SoC under the backend's CANN release (32 on every SoC before
    9.1.0)."""
    return soc_padding(raw.aclrtGetSocName(), runtime_release())


def round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def spec_padded(api: str, size: int, policy: int) -> int:
    """docs/runtime-model.md §3.5: ``floor((size + 32 + pad - 1) / 32) * 32``; pad is the SoC
    padding for aclrtMalloc / aclrtMallocCached unless the policy is exactly HUGE1G_ONLY(_P2P)."""
    pad = padding() if api != "aclrtMallocAlign32" else 0
    if policy in (6, 7):
        pad = 0
    return (size + 32 + pad - 1) // 32 * 32


def giant_free() -> int | None:
    """Free bytes of the 1 GiB page pool, or None when the device has no 1 GiB pages."""
    try:
        return raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE1G)[0]
    except FeatureNotSupportError as exc:
        assert exc.code == 207000
        return None


def giant_taken(giant0: int) -> int:
    """Bytes of the 1 GiB page pool taken since it had ``giant0`` free (the pool must exist)."""
    giant1 = giant_free()
    assert giant1 is not None, "the 1 GiB page pool disappeared"
    return giant0 - giant1


def no_p2p_soc() -> bool:
    """P2P policies are not offered on Atlas inference / 200I/500 A2 (docs/runtime-model.md §3.5
    Products)."""
    return raw.aclrtGetSocName().startswith("Ascend310")


# -- §3.5 check order ------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_spec_3_5_size_zero_is_100000_even_without_context(backend, api):
    """docs/runtime-model.md §3.5: size 0 -> 100000, decided in the ACL layer before the context
    lookup."""
    with pytest.raises(InvalidParamError) as e:
        raise_from_fresh_thread(lambda: alloc(api, 0))
    assert e.value.code == 100000


@pytest.mark.parametrize("api", APIS)
def test_spec_3_5_size_zero_is_100000_with_context(dev, api):
    """docs/runtime-model.md §3.5: size 0 -> 100000 for every policy."""
    for policy in (MallocPolicy.HUGE_FIRST, MallocPolicy.HUGE_ONLY, MallocPolicy.NORMAL_ONLY):
        with pytest.raises(InvalidParamError) as e:
            alloc(api, 0, policy)
        assert e.value.code == 100000


@pytest.mark.parametrize("api", APIS)
def test_spec_3_5_size_overflow_is_100000(dev, api):
    """docs/runtime-model.md §3.5: size + append wrapping around size_t -> 100000 (not 207001)."""
    for policy in (MallocPolicy.HUGE_FIRST, MallocPolicy.HUGE1G_ONLY):
        with pytest.raises(InvalidParamError) as e:
            alloc(api, SIZE_T_MAX, policy)
        assert e.value.code == 100000


@pytest.mark.parametrize("api", APIS)
def test_spec_3_5_size_overflow_is_100000_without_context(backend, api):
    """docs/runtime-model.md §3.5: the overflow check is an ACL-layer check: it wins over "no
    context"."""
    with pytest.raises(InvalidParamError) as e:
        raise_from_fresh_thread(lambda: alloc(api, SIZE_T_MAX))
    assert e.value.code == 100000


@pytest.mark.parametrize("api", ["aclrtMalloc", "aclrtMallocCached"])
def test_spec_3_5_padded_size_overflow_is_100000(dev, api):
    """docs/runtime-model.md §3.5: with the +32 append, 2**64 - 32 already wraps -> 100000."""
    if padding() == 0:
        pytest.skip(padding_reason("no +32 append to wrap"))
    with pytest.raises(InvalidParamError) as e:
        alloc(api, 2**64 - 32)
    assert e.value.code == 100000


@pytest.mark.parametrize("api", APIS)
def test_spec_3_5_overflow_boundary_is_where_size_plus_append_wraps(backend, cann, api):
    """docs/runtime-model.md §3.5 step 3: 100000 exactly when size + 32 + pad exceeds size_t
    (before 9.1.0: size + 64, whatever the call), before the context lookup; one byte less is
    a valid size (then no context -> 107002)."""
    pad = 0 if api == "aclrtMallocAlign32" else padding()
    first_wrapping = 2**64 - 32 - pad if since(cann, "9.1.0") else 2**64 - 64
    with pytest.raises(InvalidParamError) as e:
        raise_from_fresh_thread(partial(alloc, api, first_wrapping))
    assert e.value.code == 100000
    with pytest.raises(ContextNullError) as e2:
        raise_from_fresh_thread(partial(alloc, api, first_wrapping - 1))
    assert e2.value.code == 107002


@pytest.mark.parametrize("api", APIS)
def test_spec_3_5_no_context_is_107002(backend, api):
    """docs/runtime-model.md §3.5: a valid request in a thread without context -> 107002."""
    for policy in (MallocPolicy.HUGE_FIRST, MallocPolicy.HUGE_ONLY, 0x1000):
        with pytest.raises(ContextNullError) as e:
            raise_from_fresh_thread(partial(alloc, api, 1, policy))
        assert e.value.code == 107002


@pytest.mark.parametrize("api", APIS)
def test_spec_3_5_null_devptr_is_100000(backend, api):
    """docs/runtime-model.md §3.5: devPtr == NULL -> 100000, first of all checks (before size and
    context)."""
    call = getattr(backend, api)
    # Without a context, and with size 0 too: NULL is checked first.
    assert raise_from_fresh_thread(lambda: call(16, 0, null_outputs=1))[0] == 100000
    assert raise_from_fresh_thread(lambda: call(0, 0, null_outputs=1))[0] == 100000
    raw.aclrtSetDevice(0)
    try:
        normal0, huge0 = free_pools()
        assert call(16, 0, null_outputs=1) == (100000, 0)
        assert call(3 * MiB, MallocPolicy.HUGE_ONLY, null_outputs=1)[0] == 100000
        assert free_pools() == (normal0, huge0)
    finally:
        raw.aclrtResetDevice(0)


# -- §3.5 / §3.13 size rounding and page kinds -----------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_spec_3_5_small_request_uses_one_normal_page(dev, api):
    """docs/runtime-model.md §3.5: aclrtMalloc(1) -> 64 bytes (32 for Align32) -> one 4 KiB normal
    page."""
    ptr, normal, huge = taken(lambda: alloc(api, 1))
    assert (normal, huge) == (NORMAL_PAGE, 0)
    raw.aclrtFree(ptr)


@pytest.mark.cann("9.0.1", "9.1.0")  # aclrtMemGetAddressRange (docs/runtime-model.md §4.8)
@pytest.mark.open_question(15)
@pytest.mark.parametrize("api", APIS)
def test_spec_4_8_small_request_address_range_is_one_page(dev, api):
    """docs/runtime-model.md §3.5 / §4.8 / §8.15: a 64-byte block reports (ptr, 4096), also from
    inside."""
    ptr = alloc(api, 1)
    assert raw.aclrtMemGetAddressRange(ptr) == (ptr, NORMAL_PAGE)
    assert raw.aclrtMemGetAddressRange(ptr + 40) == (ptr, NORMAL_PAGE)
    raw.aclrtFree(ptr)


def test_spec_3_5_malloc_1mib_goes_huge_but_align32_1mib_goes_normal(dev):
    """docs/runtime-model.md §3.5: HUGE_FIRST compares the padded size with 1 MiB: aclrtMalloc(1
    MiB) is 1 MiB + 32 -> one 2 MiB huge page; aclrtMallocAlign32(1 MiB) is 1 MiB -> 256 normal
    pages. (On a padding-0 SoC aclrtMalloc(1 MiB) stays at 1 MiB -> normal pages.)"""
    ptr, normal, huge = taken(lambda: raw.aclrtMalloc(1 * MiB, MallocPolicy.HUGE_FIRST))
    assert (normal, huge) == ((0, 2 * MiB) if padding() else (1 * MiB, 0))
    raw.aclrtFree(ptr)
    ptr, normal, huge = taken(lambda: raw.aclrtMallocAlign32(1 * MiB, MallocPolicy.HUGE_FIRST))
    assert (normal, huge) == (1 * MiB, 0)
    raw.aclrtFree(ptr)
    ptr, normal, huge = taken(lambda: raw.aclrtMallocCached(1 * MiB, MallocPolicy.HUGE_FIRST))
    assert (normal, huge) == ((0, 2 * MiB) if padding() else (1 * MiB, 0))
    raw.aclrtFree(ptr)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("size", [1 * MiB - 64, 1 * MiB - 32, 1 * MiB - 31, 1 * MiB,
                                  1 * MiB + 1, 3 * MiB, 4 * MiB])
def test_spec_3_5_huge_first_threshold_is_padded_size_over_1mib(dev, api, size):
    """docs/runtime-model.md §3.5 / §3.13: HUGE_FIRST: padded > 1 MiB -> 2 MiB pages, else 4 KiB
    pages."""
    padded = spec_padded(api, size, MallocPolicy.HUGE_FIRST)
    if padded > 1 * MiB:
        expected = (0, round_up(padded, HUGE_PAGE))
    else:
        expected = (round_up(padded, NORMAL_PAGE), 0)
    ptr, normal, huge = taken(lambda: alloc(api, size))
    assert (normal, huge) == expected
    raw.aclrtFree(ptr)


def test_spec_3_5_huge_first_examples_a2(dev):
    """docs/runtime-model.md §3.5 / §7 on a padding-32 SoC: 1 MiB - 32 -> exactly 1 MiB of normal
    pages; 1 MiB - 31 -> 1 MiB + 32 -> one huge page; 3 MiB -> 3 MiB + 32 -> 4 MiB; Align32 4 MiB
    -> exactly 4 MiB; aclrtMalloc 4 MiB -> 4 MiB + 32 -> 6 MiB."""
    if padding() != 32:
        pytest.skip(padding_reason("numbers worked out for padding 32 (A2/A3/910/310P/310B)"))
    cases = [
        ("aclrtMalloc", 1 * MiB - 32, (1 * MiB, 0)),
        ("aclrtMalloc", 1 * MiB - 31, (0, 2 * MiB)),
        ("aclrtMalloc", 3 * MiB, (0, 4 * MiB)),
        ("aclrtMallocAlign32", 4 * MiB, (0, 4 * MiB)),
        ("aclrtMalloc", 4 * MiB, (0, 6 * MiB)),
        ("aclrtMallocCached", 4 * MiB, (0, 6 * MiB)),
        ("aclrtMallocAlign32", 1 * MiB + 1, (0, 2 * MiB)),
    ]
    for api, size, expected in cases:
        ptr, normal, huge = taken(partial(alloc, api, size))
        assert (normal, huge) == expected, (api, size)
        raw.aclrtFree(ptr)


@pytest.mark.cann("9.0.1", "9.1.0")  # aclrtMemGetAddressRange (docs/runtime-model.md §4.8)
@pytest.mark.open_question(15)
def test_spec_4_8_huge_block_address_range_is_whole_huge_pages(dev):
    """docs/runtime-model.md §4.8 / §8.15: a huge-page block reports its 2 MiB-rounded size."""
    pad = padding()
    ptr = raw.aclrtMalloc(3 * MiB, MallocPolicy.HUGE_FIRST)
    assert raw.aclrtMemGetAddressRange(ptr) == (ptr, 4 * MiB)
    assert raw.aclrtMemGetAddressRange(ptr + 3 * MiB) == (ptr, 4 * MiB)
    raw.aclrtFree(ptr)
    ptr = raw.aclrtMalloc(4 * MiB, MallocPolicy.HUGE_ONLY)
    assert raw.aclrtMemGetAddressRange(ptr) == (ptr, 6 * MiB if pad else 4 * MiB)
    raw.aclrtFree(ptr)


@pytest.mark.parametrize("api", APIS)
def test_spec_3_13_huge_only_small_takes_a_2mib_page(dev, api):
    """docs/runtime-model.md §3.13: HUGE_ONLY rounds to 2 MiB pages even for 1 byte."""
    ptr, normal, huge = taken(lambda: alloc(api, 1, MallocPolicy.HUGE_ONLY))
    assert (normal, huge) == (0, HUGE_PAGE)
    raw.aclrtFree(ptr)


@pytest.mark.cann("9.0.1", "9.1.0")  # aclrtMemGetAddressRange (docs/runtime-model.md §4.8)
@pytest.mark.open_question(15)
@pytest.mark.parametrize("api", APIS)
def test_spec_4_8_huge_only_small_address_range(dev, api):
    """docs/runtime-model.md §4.8 / §8.15: a 1-byte HUGE_ONLY block spans one 2 MiB page."""
    ptr = alloc(api, 1, MallocPolicy.HUGE_ONLY)
    assert raw.aclrtMemGetAddressRange(ptr) == (ptr, HUGE_PAGE)
    raw.aclrtFree(ptr)


@pytest.mark.parametrize("api", APIS)
def test_spec_3_13_normal_only_large_takes_normal_pages(dev, api):
    """docs/runtime-model.md §3.13: NORMAL_ONLY takes 4 KiB pages whatever the size: 5 MiB + 32 -> 5
    MiB + 4 KiB (Align32: exactly 5 MiB)."""
    padded = spec_padded(api, 5 * MiB, MallocPolicy.NORMAL_ONLY)
    ptr, normal, huge = taken(lambda: alloc(api, 5 * MiB, MallocPolicy.NORMAL_ONLY))
    assert (normal, huge) == (round_up(padded, NORMAL_PAGE), 0)
    if api != "aclrtMallocAlign32" and padding() == 32:
        assert normal == 5 * MiB + 4 * KiB
    raw.aclrtFree(ptr)


@pytest.mark.cann("9.0.1", "9.1.0")  # aclrtMemGetAddressRange (docs/runtime-model.md §4.8)
@pytest.mark.open_question(15)
def test_spec_4_8_normal_only_large_address_range(dev):
    """docs/runtime-model.md §4.8 / §8.15: a NORMAL_ONLY block reports its 4 KiB-rounded size."""
    ptr = raw.aclrtMallocAlign32(5 * MiB + 1, MallocPolicy.NORMAL_ONLY)
    assert raw.aclrtMemGetAddressRange(ptr) == (ptr, 5 * MiB + NORMAL_PAGE)
    raw.aclrtFree(ptr)


@pytest.mark.parametrize("api", ["aclrtMalloc", "aclrtMallocAlign32"])
def test_spec_3_5_p2p_policies_use_the_same_pages(dev, api):
    """docs/runtime-model.md §3.5 / §3.13: the P2P policies take the same page kinds as their base
    policy."""
    if no_p2p_soc():
        pytest.skip(f"{soc_name()}: P2P policies are not offered on this product "
                    "(docs/runtime-model.md §3.5, §3.13)")
    ptr, normal, huge = taken(lambda: alloc(api, 1, MallocPolicy.HUGE_ONLY_P2P))
    assert (normal, huge) == (0, HUGE_PAGE)
    raw.aclrtFree(ptr)
    padded = spec_padded(api, 3 * MiB, MallocPolicy.NORMAL_ONLY_P2P)
    ptr, normal, huge = taken(lambda: alloc(api, 3 * MiB, MallocPolicy.NORMAL_ONLY_P2P))
    assert (normal, huge) == (round_up(padded, NORMAL_PAGE), 0)
    raw.aclrtFree(ptr)
    ptr, normal, huge = taken(lambda: alloc(api, 1, MallocPolicy.HUGE_FIRST_P2P))
    assert (normal, huge) == (NORMAL_PAGE, 0)
    raw.aclrtFree(ptr)
    padded = spec_padded(api, 3 * MiB, MallocPolicy.HUGE_FIRST_P2P)
    ptr, normal, huge = taken(lambda: alloc(api, 3 * MiB, MallocPolicy.HUGE_FIRST_P2P))
    assert (normal, huge) == (0, round_up(padded, HUGE_PAGE))
    raw.aclrtFree(ptr)


# -- §3.13 1 GiB pages -----------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_spec_3_13_huge1g_rounds_1_9gib_to_2gib(dev, api):
    """docs/runtime-model.md §3.13: HUGE1G_ONLY: 1.9 GiB -> 2 GiB of 1 GiB pages; 207000 without 1G
    pages."""
    size = int(1.9 * GiB)
    giant0 = giant_free()
    if giant0 is None:
        with pytest.raises(FeatureNotSupportError) as e:
            alloc(api, size, MallocPolicy.HUGE1G_ONLY)
        assert e.value.code == 207000
        return
    normal0 = free_pools()[0]
    ptr = alloc(api, size, MallocPolicy.HUGE1G_ONLY)
    assert giant_taken(giant0) == 2 * GiB
    assert free_pools()[0] == normal0
    raw.aclrtFree(ptr)
    assert giant_free() == giant0


@pytest.mark.cann("9.0.1", "9.1.0")  # aclrtMemGetAddressRange (docs/runtime-model.md §4.8)
@pytest.mark.open_question(15)
def test_spec_4_8_huge1g_address_range_is_whole_giant_pages(dev):
    """docs/runtime-model.md §4.8 / §8.15: a 1.9 GiB HUGE1G_ONLY block spans 2 GiB."""
    need_giant_pages()
    ptr = raw.aclrtMalloc(int(1.9 * GiB), MallocPolicy.HUGE1G_ONLY)
    assert raw.aclrtMemGetAddressRange(ptr) == (ptr, 2 * GiB)
    raw.aclrtFree(ptr)


@pytest.mark.parametrize("api", APIS)
def test_spec_3_5_huge1g_has_no_padding(dev, api):
    """docs/runtime-model.md §3.5: HUGE1G_ONLY drops the padding: aclrtMalloc(1 GiB) -> exactly 1
    GiB, one giant page (with +32 it would be two)."""
    giant0 = giant_free()
    if giant0 is None:
        with pytest.raises(FeatureNotSupportError) as e:
            alloc(api, 1 * GiB, MallocPolicy.HUGE1G_ONLY)
        assert e.value.code == 207000
        return
    ptr = alloc(api, 1 * GiB, MallocPolicy.HUGE1G_ONLY)
    assert giant_taken(giant0) == 1 * GiB
    raw.aclrtFree(ptr)


def test_spec_3_5_huge1g_p2p_has_no_padding(dev):
    """docs/runtime-model.md §3.5: HUGE1G_ONLY_P2P also drops the padding: aclrtMalloc(1 GiB) -> 1
    GiB."""
    giant0 = giant_free()
    if giant0 is None or no_p2p_soc():
        with pytest.raises(FeatureNotSupportError) as e:
            raw.aclrtMalloc(1 * GiB, MallocPolicy.HUGE1G_ONLY_P2P)
        assert e.value.code == 207000
        return
    ptr = raw.aclrtMalloc(1 * GiB, MallocPolicy.HUGE1G_ONLY_P2P)
    assert giant_taken(giant0) == 1 * GiB
    raw.aclrtFree(ptr)


def test_spec_3_5_cached_huge1g_p2p_is_default_policy_without_padding(dev):
    """docs/runtime-model.md §3.5: aclrtMallocCached maps HUGE1G_ONLY_P2P to the default policy (no
    error, even without 1 GiB pages) but the padding is still dropped for that exact value:
    1 GiB -> exactly 1 GiB -> 512 huge pages, no normal pages."""
    ptr, normal, huge = taken(
        lambda: raw.aclrtMallocCached(1 * GiB, MallocPolicy.HUGE1G_ONLY_P2P))
    assert (normal, huge) == (0, 1 * GiB)
    raw.aclrtFree(ptr)


# -- §3.5 / §3.13 combined and unknown policies ----------------------------------------------------

ODD_POLICIES = [
    pytest.param(MallocPolicy.HUGE_FIRST | MallocPolicy.TYPE_HIGH_BAND_WIDTH, id="HF|HIGH"),
    pytest.param(MallocPolicy.TYPE_LOW_BAND_WIDTH, id="LOW"),
    pytest.param(MallocPolicy.TYPE_HIGH_BAND_WIDTH, id="HIGH"),
    pytest.param(0x100, id="0x100"),
    pytest.param(99, id="99"),
    pytest.param(8, id="8"),
    pytest.param(MallocPolicy.ACCESS_USER_SPACE_READONLY, id="READONLY"),
    pytest.param(MallocPolicy.HUGE_ONLY | MallocPolicy.TYPE_HIGH_BAND_WIDTH, id="HO|HIGH"),
    pytest.param(MallocPolicy.NORMAL_ONLY | MallocPolicy.TYPE_LOW_BAND_WIDTH, id="NO|LOW"),
    pytest.param(MallocPolicy.HUGE1G_ONLY | MallocPolicy.TYPE_HIGH_BAND_WIDTH, id="1G|HIGH"),
    pytest.param(MallocPolicy.HUGE_ONLY | MallocPolicy.ACCESS_USER_SPACE_READONLY,
                 id="HO|READONLY"),
    pytest.param(2**32 - 1, id="0xffffffff"),
]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("policy", ODD_POLICIES)
def test_spec_3_5_combined_or_unknown_policy_is_the_default(dev, api, policy):
    """docs/runtime-model.md §3.5 / §3.13: a policy not exactly 0-7 is silently the default
    (HUGE_FIRST), with the padding: 1 byte -> one normal page; 3 MiB -> huge pages. Never an
    error."""
    ptr, normal, huge = taken(lambda: alloc(api, 1, policy))
    assert (normal, huge) == (NORMAL_PAGE, 0)
    raw.aclrtFree(ptr)
    padded = spec_padded(api, 3 * MiB, MallocPolicy.HUGE_FIRST)
    ptr, normal, huge = taken(lambda: alloc(api, 3 * MiB, policy))
    assert (normal, huge) == (0, round_up(padded, HUGE_PAGE))
    raw.aclrtFree(ptr)


@pytest.mark.parametrize("policy", [MallocPolicy.HUGE_FIRST_P2P, MallocPolicy.HUGE_ONLY_P2P,
                                    MallocPolicy.NORMAL_ONLY_P2P, MallocPolicy.HUGE1G_ONLY_P2P])
def test_spec_3_5_cached_p2p_policy_is_the_default(dev, policy):
    """docs/runtime-model.md §3.5: aclrtMallocCached maps only
    HUGE_FIRST/HUGE_ONLY/NORMAL_ONLY/HUGE1G_ONLY; a P2P value silently becomes the default: 1 byte
    -> a normal page (not huge for HUGE_ONLY_P2P), 3 MiB -> huge pages (not normal for
    NORMAL_ONLY_P2P)."""
    ptr, normal, huge = taken(lambda: raw.aclrtMallocCached(1, policy))
    assert (normal, huge) == (NORMAL_PAGE, 0)
    raw.aclrtFree(ptr)
    padded = spec_padded("aclrtMallocCached", 3 * MiB, policy)
    ptr, normal, huge = taken(lambda: raw.aclrtMallocCached(3 * MiB, policy))
    assert (normal, huge) == (0, round_up(padded, HUGE_PAGE))
    raw.aclrtFree(ptr)


# -- §3.13 exhaustion ------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["aclrtMalloc", "aclrtMallocAlign32"])
def test_spec_3_13_huge_only_beyond_huge_pool_is_207001(dev, api):
    """docs/runtime-model.md §3.13: HUGE_ONLY larger than the free huge pool -> 207001, no
    fallback."""
    normal0, huge0 = free_pools()
    with pytest.raises(MemoryAllocationError) as e:
        alloc(api, huge0 + 1, MallocPolicy.HUGE_ONLY)
    assert e.value.code == 207001
    assert free_pools() == (normal0, huge0)


@pytest.mark.parametrize("api", ["aclrtMalloc", "aclrtMallocAlign32"])
def test_spec_3_13_normal_only_beyond_normal_pool_is_207001(dev, api):
    """docs/runtime-model.md §3.13: NORMAL_ONLY larger than the free normal pool -> 207001, no
    fallback."""
    normal0, huge0 = free_pools()
    with pytest.raises(MemoryAllocationError) as e:
        alloc(api, normal0 + 1, MallocPolicy.NORMAL_ONLY)
    assert e.value.code == 207001
    assert free_pools() == (normal0, huge0)


def test_spec_3_13_huge_first_falls_back_to_normal_pages(dev):
    """docs/runtime-model.md §3.13: with the huge pool exhausted, HUGE_FIRST takes normal pages:
    3 MiB + pad -> whole 4 KiB pages from the normal pool."""
    huge0 = free_pools()[1]
    fill = raw.aclrtMallocAlign32(huge0 // HUGE_PAGE * HUGE_PAGE, MallocPolicy.HUGE_ONLY)
    try:
        assert free_pools()[1] < HUGE_PAGE
        padded = spec_padded("aclrtMalloc", 3 * MiB, MallocPolicy.HUGE_FIRST)
        ptr, normal, huge = taken(lambda: raw.aclrtMalloc(3 * MiB, MallocPolicy.HUGE_FIRST))
        assert (normal, huge) == (round_up(padded, NORMAL_PAGE), 0)
        raw.aclrtFree(ptr)
        # HUGE_ONLY now fails; HUGE_FIRST beyond the normal pool fails too.
        with pytest.raises(MemoryAllocationError) as e:
            raw.aclrtMalloc(3 * MiB, MallocPolicy.HUGE_ONLY)
        assert e.value.code == 207001
        with pytest.raises(MemoryAllocationError) as e2:
            raw.aclrtMallocAlign32(free_pools()[0] + 1, MallocPolicy.HUGE_FIRST)
        assert e2.value.code == 207001
    finally:
        raw.aclrtFree(fill)
    assert free_pools()[1] == huge0


# -- §3.5 alignment --------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_spec_3_5_pointers_are_64_byte_aligned_and_disjoint(dev, api):
    """docs/runtime-model.md §3.5: returned addresses are 64-byte aligned; live blocks never
    overlap."""
    blocks = []
    for policy in (MallocPolicy.HUGE_FIRST, MallocPolicy.NORMAL_ONLY, MallocPolicy.HUGE_ONLY):
        for size in (1, 31, 33, 100, 4095, 4097, 1 * MiB + 5, 3 * MiB):
            ptr = alloc(api, size, policy)
            assert ptr != 0
            assert ptr % 64 == 0, (hex(ptr), size, policy)
            blocks.append((ptr, spec_padded(api, size, policy)))
    spans = sorted(blocks)
    for (a, a_len), (b, _) in itertools.pairwise(spans):
        assert a + a_len <= b
    for ptr, _ in blocks:
        raw.aclrtFree(ptr)


# -- §3.6 aclrtFree --------------------------------------------------------------------------------


def test_spec_3_6_free_null_is_100000(dev):
    """docs/runtime-model.md §3.6: aclrtFree(NULL) -> 100000."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtFree(0)
    assert e.value.code == 100000


def test_spec_3_6_free_null_is_100000_without_context(backend):
    """docs/runtime-model.md §3.6: aclrtFree(NULL) -> 100000 also in a thread without context."""
    with pytest.raises(InvalidParamError) as e:
        raise_from_fresh_thread(lambda: raw.aclrtFree(0))
    assert e.value.code == 100000


@pytest.mark.parametrize("api", APIS)
def test_spec_3_6_free_gives_the_pages_back(dev, api):
    """docs/runtime-model.md §3.6: aclrtFree frees at once: the pools are back where they were."""
    before = free_pools()
    ptrs = [alloc(api, 1), alloc(api, 3 * MiB), alloc(api, 1, MallocPolicy.HUGE_ONLY),
            alloc(api, 5 * MiB, MallocPolicy.NORMAL_ONLY)]
    assert free_pools() != before
    for ptr in ptrs:
        raw.aclrtFree(ptr)
    assert free_pools() == before


@pytest.mark.open_question(1)
@pytest.mark.parametrize("api", APIS)
def test_spec_3_6_double_free_is_107000(dev, api):
    """docs/runtime-model.md §3.6 / §8.1: freeing an already freed pointer -> 107000 (fake's
    choice)."""
    ptr = alloc(api, 64)
    raw.aclrtFree(ptr)
    before = free_pools()
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtFree(ptr)
    assert e.value.code == 107000
    assert free_pools() == before


@pytest.mark.open_question(1)
def test_spec_3_6_interior_pointer_is_107000_and_block_survives(dev):
    """docs/runtime-model.md §3.6 / §8.1: freeing a pointer inside a block -> 107000; the block
    stays."""
    before = free_pools()
    ptr = raw.aclrtMalloc(3 * MiB, MallocPolicy.HUGE_FIRST)
    during = free_pools()
    for inside in (ptr + 64, ptr + 1, ptr + 2 * MiB):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtFree(inside)
        assert e.value.code == 107000
    assert free_pools() == during
    raw.aclrtFree(ptr)
    assert free_pools() == before


@pytest.mark.open_question(1)
def test_spec_3_6_never_allocated_pointer_is_107000(dev):
    """docs/runtime-model.md §3.6 / §8.1: a pointer no allocation returned (host memory) ->
    107000."""
    plain = bytearray(4096)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtFree(address_of(plain))
    assert e.value.code == 107000


def test_spec_3_6_free_needs_no_context(dev):
    """docs/runtime-model.md §3.6: aclrtFree works in a thread that never set a device."""
    before = free_pools()
    small = raw.aclrtMalloc(100, MallocPolicy.HUGE_FIRST)
    large = raw.aclrtMallocAlign32(3 * MiB, MallocPolicy.HUGE_ONLY)
    raise_from_fresh_thread(lambda: raw.aclrtFree(small))
    raise_from_fresh_thread(lambda: raw.aclrtFree(large))
    assert free_pools() == before


# -- Pythonic layer: allocated_size follows the runtime model formula ------------------------------

# docs/runtime-model.md §3.5 by hand: floor((size + 32 + pad - 1) / 32) * 32, pad 0 for Align32.
ALLOCATED = {
    # padding: {size: (aclrtMalloc, aclrtMallocAlign32, aclrtMallocCached)}
    32: {1: (64, 32, 64), 32: (64, 32, 64), 33: (96, 64, 96), 100: (160, 128, 160)},
    16: {1: (32, 32, 32), 32: (64, 32, 64), 33: (64, 64, 64), 100: (128, 128, 128)},
    0: {1: (32, 32, 32), 32: (32, 32, 32), 33: (64, 64, 64), 100: (128, 128, 128)},
}


@pytest.mark.parametrize("size", [1, 32, 33, 100])
def test_spec_3_5_device_malloc_allocated_size(dev, size):
    """docs/runtime-model.md §3.5 / §7: Device.malloc* report the bytes the runtime reserves
    (1 -> 64 / 32 / 64; 33 -> 96 / 64 / 96 on padding-32 SoCs)."""
    want = ALLOCATED[padding()][size]
    got = []
    for method in (dev.malloc, dev.malloc_align32, dev.malloc_cached):
        with method(size) as buf:
            assert buf.size == size
            assert buf.ptr % 64 == 0
            got.append(buf.allocated_size)
    assert tuple(got) == want


def test_spec_3_5_device_malloc_pages_match_allocated_size(dev):
    """docs/runtime-model.md §3.5: a Device.malloc buffer takes the pages its allocated size
    implies."""
    normal0, huge0 = free_pools()
    buf = dev.malloc(4 * MiB)
    pad = padding()
    assert buf.allocated_size == 4 * MiB + pad
    assert free_pools() == (normal0, huge0 - (6 * MiB if pad else 4 * MiB))
    buf.free()
    assert free_pools() == (normal0, huge0)


# -- fake-only: profiles ---------------------------------------------------------------------------


@pytest.mark.fake_only("only the fake can switch to the Atlas-inference profile")
@pytest.mark.parametrize("api", ["aclrtMalloc", "aclrtMallocAlign32"])
def test_spec_3_5_atlas_inference_rejects_p2p_and_1g_policies(fake, api):
    """docs/runtime-model.md §3.5: P2P policies on a SoC without them and 1 GiB pages on a chip
    without them -> 207000; the pools are untouched."""
    acl_mem.fake.configure("atlas-inference")
    with acl_mem.Device(0):
        before = free_pools()
        for policy in (MallocPolicy.HUGE_FIRST_P2P, MallocPolicy.HUGE_ONLY_P2P,
                       MallocPolicy.NORMAL_ONLY_P2P, MallocPolicy.HUGE1G_ONLY,
                       MallocPolicy.HUGE1G_ONLY_P2P):
            with pytest.raises(FeatureNotSupportError) as e:
                alloc(api, 1 * MiB, policy)
            assert e.value.code == 207000, policy
        assert free_pools() == before
        with pytest.raises(FeatureNotSupportError) as e2:
            raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE1G)
        assert e2.value.code == 207000


@pytest.mark.fake_only("only the fake can switch to the Atlas-inference profile")
def test_spec_3_5_atlas_inference_checks_before_the_driver(fake):
    """docs/runtime-model.md §1.2 / §3.5: parameter and context checks come before "not
    supported"."""
    acl_mem.fake.configure("atlas-inference")
    with pytest.raises(ContextNullError) as e:
        raise_from_fresh_thread(lambda: raw.aclrtMalloc(1, MallocPolicy.HUGE1G_ONLY))
    assert e.value.code == 107002
    with acl_mem.Device(0):
        with pytest.raises(InvalidParamError) as e2:
            raw.aclrtMalloc(0, MallocPolicy.HUGE_ONLY_P2P)
        assert e2.value.code == 100000


@pytest.mark.fake_only("only the fake can switch to the Atlas-inference profile")
def test_spec_3_5_atlas_inference_cached_p2p_is_default_not_an_error(fake):
    """docs/runtime-model.md §3.5: aclrtMallocCached maps P2P values to the default, so even where
    P2P is unsupported they allocate (1 byte -> a normal page); HUGE1G_ONLY stays 207000."""
    acl_mem.fake.configure("atlas-inference")
    with acl_mem.Device(0):
        for policy in (MallocPolicy.HUGE_FIRST_P2P, MallocPolicy.HUGE_ONLY_P2P,
                       MallocPolicy.NORMAL_ONLY_P2P, MallocPolicy.HUGE1G_ONLY_P2P):
            ptr, normal, huge = taken(partial(raw.aclrtMallocCached, 1, policy))
            assert (normal, huge) == (NORMAL_PAGE, 0)
            raw.aclrtFree(ptr)
        with pytest.raises(FeatureNotSupportError) as e:
            raw.aclrtMallocCached(1, MallocPolicy.HUGE1G_ONLY)
        assert e.value.code == 207000


@pytest.mark.cann("9.1.0")
@pytest.mark.fake_only("only the fake can switch to the Ascend950 profile")
def test_spec_3_5_ascend950_has_no_padding(fake):
    """docs/runtime-model.md §3.5 (9.1.0): on 950 padding_size is 0: aclrtMalloc(1) reserves 32
    bytes (one 4 KiB page), 33 -> 64; aclrtMalloc(1 MiB) stays at 1 MiB -> normal pages;
    HUGE_ONLY 2 MiB -> exactly one huge page (A2 would take two)."""
    acl_mem.fake.configure("ascend950")
    with acl_mem.Device(0) as d:
        with d.malloc(1) as buf:
            assert buf.allocated_size == 32
            assert buf.address_range() == (buf.ptr, NORMAL_PAGE)
        with d.malloc(33) as buf:
            assert buf.allocated_size == 64
        with d.malloc_cached(1) as buf:
            assert buf.allocated_size == 32
        ptr, normal, huge = taken(lambda: raw.aclrtMalloc(1 * MiB, MallocPolicy.HUGE_FIRST))
        assert (normal, huge) == (1 * MiB, 0)
        raw.aclrtFree(ptr)
        ptr, normal, huge = taken(lambda: raw.aclrtMalloc(1 * MiB + 1, MallocPolicy.HUGE_FIRST))
        assert (normal, huge) == (0, 2 * MiB)
        raw.aclrtFree(ptr)
        ptr, normal, huge = taken(lambda: raw.aclrtMalloc(2 * MiB, MallocPolicy.HUGE_ONLY))
        assert (normal, huge) == (0, 2 * MiB)
        raw.aclrtFree(ptr)
        ptr, normal, huge = taken(lambda: raw.aclrtMallocCached(2 * MiB, MallocPolicy.HUGE_ONLY))
        assert (normal, huge) == (0, 2 * MiB)
        raw.aclrtFree(ptr)


@pytest.mark.cann("8.5.0", "9.0.1")
@pytest.mark.fake_only("only the fake can switch to the Ascend950 profile")
def test_spec_3_5_ascend950_pads_a_fixed_32_before_9_1(fake, cann):
    """docs/runtime-model.md §3.5 Releases: before 9.1.0 Ascend950 pads a fixed 32 bytes like
    every SoC: aclrtMalloc(1) reserves 64 bytes, 33 -> 96 (aclrtMallocAlign32 still 32);
    aclrtMalloc(1 MiB) is 1 MiB + 32 -> one huge page, 1 MiB - 32 -> 1 MiB of normal pages;
    HUGE_ONLY 2 MiB -> two huge pages; the overflow check adds 64, for every call."""
    acl_mem.fake.configure("ascend950")
    with acl_mem.Device(0) as d:
        with d.malloc(1) as buf:
            assert buf.allocated_size == 64
            if since(cann, "9.0.1"):
                assert buf.address_range() == (buf.ptr, NORMAL_PAGE)
        with d.malloc(33) as buf:
            assert buf.allocated_size == 96
        with d.malloc_cached(1) as buf:
            assert buf.allocated_size == 64
        with d.malloc_align32(1) as buf:
            assert buf.allocated_size == 32
        for call, size, policy, expected in [
            (raw.aclrtMalloc, 1 * MiB, MallocPolicy.HUGE_FIRST, (0, 2 * MiB)),
            (raw.aclrtMalloc, 1 * MiB - 32, MallocPolicy.HUGE_FIRST, (1 * MiB, 0)),
            (raw.aclrtMalloc, 2 * MiB, MallocPolicy.HUGE_ONLY, (0, 4 * MiB)),
            (raw.aclrtMallocCached, 2 * MiB, MallocPolicy.HUGE_ONLY, (0, 4 * MiB)),
            (raw.aclrtMallocAlign32, 2 * MiB, MallocPolicy.HUGE_ONLY, (0, 2 * MiB)),
        ]:
            ptr, normal, huge = taken(partial(call, size, policy))
            assert (normal, huge) == expected, (call.__name__, size)
            raw.aclrtFree(ptr)
        for api in APIS:
            with pytest.raises(InvalidParamError) as e:
                alloc(api, 2**64 - 64)
            assert e.value.code == 100000


@pytest.mark.fake_only("only the fake can switch to the Ascend950 profile")
def test_spec_3_13_ascend950_has_no_1g_pages(fake):
    """docs/runtime-model.md §3.13: 1 GiB pages exist on A2/A3 only: 950 -> 207000."""
    acl_mem.fake.configure("ascend950")
    with acl_mem.Device(0):
        for api in APIS:
            with pytest.raises(FeatureNotSupportError) as e:
                alloc(api, 1 * GiB, MallocPolicy.HUGE1G_ONLY)
            assert e.value.code == 207000


@pytest.mark.fake_only("the default fake profile (atlas-a2) has 1 GiB pages; hardware varies")
def test_spec_3_13_atlas_a2_1g_pool_takes_1_9gib_as_2gib(fake):
    """docs/runtime-model.md §3.13: on A2, HUGE1G_ONLY 1.9 GiB -> 2 GiB from the 1 GiB pool, no
    normal pages; aclrtMalloc(1 GiB, HUGE1G_ONLY) -> 1 GiB (no +32). Other SoCs have no 1 GiB
    pages (test_spec_3_13_huge1g_rounds_1_9gib_to_2gib checks their 207000)."""
    with acl_mem.Device(0):
        need_giant_pages()
        giant0 = giant_free()
        assert giant0 is not None
        normal0 = free_pools()[0]
        a = raw.aclrtMalloc(int(1.9 * GiB), MallocPolicy.HUGE1G_ONLY)
        assert giant_taken(giant0) == 2 * GiB
        b = raw.aclrtMalloc(1 * GiB, MallocPolicy.HUGE1G_ONLY)
        assert giant_taken(giant0) == 3 * GiB
        assert a % 64 == 0
        assert b % 64 == 0
        assert free_pools()[0] == normal0
        raw.aclrtFree(a)
        raw.aclrtFree(b)
        assert giant_free() == giant0
