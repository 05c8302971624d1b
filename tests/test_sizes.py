"""The size arithmetic as public functions (docs/runtime-model.md §3.5, §3.7-§3.9, §3.13, §3.14,
§7).

Pure functions: no backend involved. Expected numbers are worked out by hand from the
the runtime model's formulas and examples.
"""

import pytest

from acl_mem import sizes
from acl_mem.enums import MallocPolicy as P
from acl_mem.sizes import AllocApi, PageKind

MiB = 1 << 20
GiB = 1 << 30


@pytest.mark.parametrize(
    ("length", "k", "expected"),
    [(0, 32, 0), (1, 32, 32), (32, 32, 32), (33, 32, 64), (65, 64, 128), (100, 128, 128)],
)
def test_align_up_matches_seed_formula(length, k, expected):
    """docs/runtime-model.md §3.14: ALIGN_UP(len,k) = ((len-1)/k + 1) * k."""
    assert sizes.align_up(length, k) == expected


@pytest.mark.parametrize(
    ("api", "size", "expected"),
    [
        # docs/runtime-model.md §3.5 example: size 1 -> 64 (Malloc) / 32 (Align32); 32 -> 64 / 32;
        # 33 -> 96 / 64.
        (AllocApi.MALLOC, 1, 64), (AllocApi.MALLOC_ALIGN32, 1, 32),
        (AllocApi.MALLOC, 32, 64), (AllocApi.MALLOC_ALIGN32, 32, 32),
        (AllocApi.MALLOC, 33, 96), (AllocApi.MALLOC_ALIGN32, 33, 64),
        (AllocApi.MALLOC_CACHED, 33, 96),
        (AllocApi.MALLOC_HOST, 33, 64),  # runtime model §3.7: ALIGN_UP(size, 32), no +32
        (AllocApi.DVPP_MALLOC, 1, 64),   # runtime model §3.8: floor((size+63)/32)*32
        (AllocApi.DVPP_MALLOC, 0, 32),
        (AllocApi.HI_MPI_DVPP_MALLOC, 100, 160),  # docs/runtime-model.md §3.9: ALIGN_UP(100,32)+32
    ],
)
def test_allocation_size_per_api(api, size, expected):
    assert sizes.allocation_size(api, size) == expected


def test_allocation_size_huge1g_policies_drop_the_padding():
    """docs/runtime-model.md §3.5: pad = 0 when the policy is exactly HUGE1G_ONLY(_P2P)."""
    assert sizes.allocation_size(AllocApi.MALLOC, 33, P.HUGE1G_ONLY) == 64
    assert sizes.allocation_size(AllocApi.MALLOC, 33, P.HUGE1G_ONLY_P2P) == 64
    assert sizes.allocation_size(AllocApi.MALLOC, 33, P.HUGE_ONLY) == 96


def test_allocation_size_on_a_padding_zero_soc():
    """docs/runtime-model.md §3.5: on Ascend950 (padding 0) aclrtMalloc gives ALIGN_UP(size, 32)."""
    padding = sizes.soc_padding("Ascend950PR")
    assert padding == 0
    assert sizes.allocation_size(AllocApi.MALLOC, 33, padding=padding) == 64
    assert sizes.soc_padding("Ascend910B1") == 32
    assert sizes.soc_padding("Ascend035A") == 16


@pytest.mark.parametrize(
    ("api", "policy", "expected"),
    [
        (AllocApi.MALLOC, P.NORMAL_ONLY, P.NORMAL_ONLY),
        (AllocApi.MALLOC, P.HUGE_FIRST | P.TYPE_HIGH_BAND_WIDTH, P.HUGE_FIRST),
        (AllocApi.MALLOC, P.NORMAL_ONLY | P.TYPE_LOW_BAND_WIDTH, P.HUGE_FIRST),
        (AllocApi.MALLOC, 99, P.HUGE_FIRST),
        (AllocApi.MALLOC_ALIGN32, P.HUGE_ONLY_P2P, P.HUGE_ONLY_P2P),
        (AllocApi.MALLOC_CACHED, P.HUGE_ONLY_P2P, P.HUGE_FIRST),
        (AllocApi.MALLOC_CACHED, P.HUGE1G_ONLY, P.HUGE1G_ONLY),
        (AllocApi.MALLOC_CACHED, P.HUGE1G_ONLY_P2P, P.HUGE_FIRST),
    ],
)
def test_effective_policy_exact_equality(api, policy, expected):
    """docs/runtime-model.md §3.5: exact-equality policy mapping; anything else becomes the
    default."""
    assert sizes.effective_policy(api, policy) == expected


@pytest.mark.parametrize(
    ("padded", "policy", "expected"),
    [
        (MiB, P.HUGE_FIRST, (PageKind.NORMAL,)),
        (MiB + 32, P.HUGE_FIRST, (PageKind.HUGE, PageKind.NORMAL)),
        (64, P.HUGE_ONLY, (PageKind.HUGE,)),
        (3 * MiB, P.NORMAL_ONLY_P2P, (PageKind.NORMAL,)),
        (64, P.HUGE1G_ONLY, (PageKind.GIANT,)),
    ],
)
def test_page_kinds_threshold_on_padded_size(padded, policy, expected):
    """docs/runtime-model.md §3.5/§3.13: huge-first above 1 MiB of *padded* size, with normal
    fallback."""
    assert sizes.page_kinds(padded, policy) == expected


def test_page_kinds_rejects_flag_values():
    with pytest.raises(ValueError):
        sizes.page_kinds(64, P.TYPE_LOW_BAND_WIDTH)


def test_segment_rules():
    """docs/runtime-model.md §3.14: m = ALIGN_UP(len,32)+32; start 64 B (malloc family) or 128 B
    (DVPP)."""
    assert sizes.segment_size(1) == 64
    assert sizes.segment_size(100) == 160
    assert sizes.segment_size(100, padded=False) == 128
    assert sizes.segment_alignment(AllocApi.MALLOC) == 64
    assert sizes.segment_alignment(AllocApi.MALLOC_HOST) == 64
    assert sizes.segment_alignment(AllocApi.DVPP_MALLOC) == 128
    assert sizes.segment_alignment("hi_mpi_dvpp_malloc") == 128
    assert sizes.segment_alignment(AllocApi.MALLOC, mixed_media=True) == 128


def test_plan_segments_spacing():
    """docs/runtime-model.md §3.14: each segment starts at ALIGN_UP of the previous end to the
    alignment."""
    offsets, total = sizes.plan_segments([1, 100, 33], AllocApi.MALLOC)
    # 1 -> m=64 at 0; 100 -> m=160 at 64; 33 -> m=96 at ALIGN_UP(224,64)=256; end 352.
    assert offsets == [0, 64, 256]
    assert total == 352
    offsets, total = sizes.plan_segments([1, 1], AllocApi.DVPP_MALLOC)
    assert offsets == [0, 128]
    assert total == 192


@pytest.mark.parametrize("bad", [0, -1])
def test_segment_size_rejects_empty_segments(bad):
    with pytest.raises(ValueError):
        sizes.segment_size(bad)


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError):
        sizes.align_up(-1, 32)
    with pytest.raises(ValueError):
        sizes.align_up(1, 0)
    with pytest.raises(ValueError):
        sizes.allocation_size(AllocApi.MALLOC, -5)
    with pytest.raises(ValueError):
        sizes.allocation_size("aclrtNope", 5)
