"""The arithmetic of Huawei's memory documentation and the runtime, usable without a device.

Every function here is pure: plan memory on a laptop, get the numbers the device
will use. Rules and sources: docs/runtime-model.md §3.5 (rounding and padding), §3.7-§3.9 (host and
DVPP), §3.13 (page policies), §3.14 (secondary allocation), §7 (quick reference).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import Enum, IntEnum

from .enums import MallocPolicy

__all__ = [
    "GIANT_PAGE",
    "HUGE_FIRST_THRESHOLD",
    "HUGE_PAGE",
    "NORMAL_PAGE",
    "SIZE_T_MAX",
    "AllocApi",
    "GiB",
    "KiB",
    "MiB",
    "PageKind",
    "TiB",
    "align_up",
    "allocation_size",
    "effective_policy",
    "format_size",
    "page_kinds",
    "plan_segments",
    "segment_alignment",
    "segment_size",
    "soc_padding",
]

#: Binary size units: the one home of these constants in acl_mem.
KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB
SIZE_T_MAX = 2**64 - 1
NORMAL_PAGE = 4 * KiB
HUGE_PAGE = 2 * MiB
GIANT_PAGE = 1 * GiB
#: HUGE_FIRST takes huge pages only when the *padded* size exceeds this (docs/runtime-model.md
#: §3.5).
HUGE_FIRST_THRESHOLD = 1 * MiB


class AllocApi(str, Enum):
    """The allocation calls whose size and alignment rules differ (values are C names)."""

    MALLOC = "aclrtMalloc"
    MALLOC_ALIGN32 = "aclrtMallocAlign32"
    MALLOC_CACHED = "aclrtMallocCached"
    MALLOC_HOST = "aclrtMallocHost"
    DVPP_MALLOC = "acldvppMalloc"
    HI_MPI_DVPP_MALLOC = "hi_mpi_dvpp_malloc"


class PageKind(IntEnum):
    """Page sizes the driver rounds to (value = bytes per page)."""

    NORMAL = NORMAL_PAGE
    HUGE = HUGE_PAGE
    GIANT = GIANT_PAGE


def pool_of_page(page_size: int) -> str | None:
    """The page pool a page size belongs to ("normal", "huge", "giant"), None for another."""
    return PageKind(page_size).name.lower() if page_size in PageKind._value2member_map_ else None


_DEVICE_MALLOCS = (AllocApi.MALLOC, AllocApi.MALLOC_ALIGN32, AllocApi.MALLOC_CACHED)
_DVPP = (AllocApi.DVPP_MALLOC, AllocApi.HI_MPI_DVPP_MALLOC)
_HUGE1G = (MallocPolicy.HUGE1G_ONLY, MallocPolicy.HUGE1G_ONLY_P2P)
#: aclrtMallocCached maps only these values; everything else becomes the default (§3.5).
_CACHED_POLICIES = frozenset(
    {MallocPolicy.HUGE_FIRST, MallocPolicy.HUGE_ONLY, MallocPolicy.NORMAL_ONLY,
     MallocPolicy.HUGE1G_ONLY}
)
#: Platform-config ``padding_size`` by SoC-name prefix; 32 elsewhere (docs/runtime-model.md §3.5).
_PADDING_BY_SOC_PREFIX = (("Ascend950", 0), ("Ascend350", 0), ("Ascend035", 16))
#: The first CANN release that pads by the SoC's ``padding_size``; earlier releases add a
#: fixed 32 bytes on every SoC (docs/runtime-model.md §3.5).
_SOC_PADDING_SINCE = (9, 1)
_RELEASE_NUMBERS = re.compile(r"\s*(\d+(?:\.\d+)*)")


def _api(api: AllocApi | str) -> AllocApi:
    return api if isinstance(api, AllocApi) else AllocApi(api)


def _release_before(release: str | None, first: tuple[int, ...]) -> bool:
    """Whether the CANN release string ``release`` (``"9.0.1"``, ``"8.3.RC1"``) is older than
    ``first``; False for None, ``""`` or a string no number leads (taken for the newest)."""
    found = _RELEASE_NUMBERS.match(release or "")
    return found is not None and tuple(int(p) for p in found.group(1).split(".")) < first


def align_up(length: int, k: int) -> int:
    """``ALIGN_UP(len, k) = ((len - 1) / k + 1) * k`` as Huawei documents it (docs/runtime-model.md
    §3.14);
    0 stays 0."""
    if k <= 0:
        raise ValueError(f"align_up: k must be positive, got {k}")
    if length < 0:
        raise ValueError(f"align_up: length must be >= 0, got {length}")
    return -(-length // k) * k


def soc_padding(soc_name: str, release: str | None = None) -> int:
    """The ``padding_size`` aclrtMalloc adds on ``soc_name`` (32, 16 on Ascend035*, 0 on 950).

    ``release`` is the CANN release of the runtime (``aclsysGetVersionStr("runtime")``,
    e.g. ``"9.0.1"``): releases before 9.1.0 pad a fixed 32 bytes on every SoC
    (docs/runtime-model.md §3.5). None, ``""`` or a string that names no release number
    mean 9.1.0 or later: the padding of the SoC.
    """
    if _release_before(release, _SOC_PADDING_SINCE):
        return 32
    for prefix, padding in _PADDING_BY_SOC_PREFIX:
        if soc_name.startswith(prefix):
            return padding
    return 32


def effective_policy(api: AllocApi | str, policy: int) -> MallocPolicy:
    """The page policy the runtime really uses for ``policy`` (docs/runtime-model.md §3.5).

    aclrtMalloc and aclrtMallocAlign32 accept exactly 0-7; aclrtMallocCached only
    HUGE_FIRST, HUGE_ONLY, NORMAL_ONLY and HUGE1G_ONLY. Anything else, OR-ed
    combinations included, silently becomes HUGE_FIRST. DVPP memory is huge-page
    memory (docs/runtime-model.md §3.8), reported here as HUGE_ONLY.
    """
    api = _api(api)
    if api in _DVPP:
        return MallocPolicy.HUGE_ONLY
    if 0 <= policy <= 7:
        chosen = MallocPolicy(policy)
        if api is not AllocApi.MALLOC_CACHED or chosen in _CACHED_POLICIES:
            return chosen
    return MallocPolicy.HUGE_FIRST


def allocation_size(
    api: AllocApi | str, size: int, policy: int = MallocPolicy.HUGE_FIRST, *, padding: int = 32
) -> int:
    """Bytes the ACL layer really reserves for ``api(size, policy)`` (docs/runtime-model.md §3.5,
    §3.7-§3.9).

    ``padding`` is the SoC's padding size (:func:`soc_padding`). aclrtMalloc and
    aclrtMallocCached: ``floor((size + 32 + pad - 1) / 32) * 32`` with ``pad = padding``
    unless the policy value is exactly HUGE1G_ONLY(_P2P); aclrtMallocAlign32 and
    aclrtMallocHost: ``ALIGN_UP(size, 32)``; DVPP: ``ALIGN_UP(size, 32) + 32``.
    The driver then rounds further to whole pages (:func:`page_kinds`).
    """
    api = _api(api)
    if size < 0:
        raise ValueError(f"allocation_size: size must be >= 0, got {size}")
    if api in (AllocApi.MALLOC, AllocApi.MALLOC_CACHED):
        pad = 0 if policy in _HUGE1G else padding
        return (size + 32 + pad - 1) // 32 * 32
    if api in (AllocApi.MALLOC_ALIGN32, AllocApi.MALLOC_HOST):
        return align_up(size, 32)
    return (size + 63) // 32 * 32


def page_kinds(padded_size: int, policy: MallocPolicy) -> tuple[PageKind, ...]:
    """Page kinds the driver tries, in order, for an effective ``policy`` (docs/runtime-model.md
    §3.5, §3.13).

    HUGE_FIRST(_P2P) takes huge pages when the padded size exceeds 1 MiB and falls
    back to normal pages; at or below 1 MiB it takes normal pages only.
    """
    base = policy if isinstance(policy, MallocPolicy) else MallocPolicy(policy)
    if base in (MallocPolicy.HUGE_FIRST, MallocPolicy.HUGE_FIRST_P2P):
        if padded_size > HUGE_FIRST_THRESHOLD:
            return (PageKind.HUGE, PageKind.NORMAL)
        return (PageKind.NORMAL,)
    if base in (MallocPolicy.HUGE_ONLY, MallocPolicy.HUGE_ONLY_P2P):
        return (PageKind.HUGE,)
    if base in (MallocPolicy.NORMAL_ONLY, MallocPolicy.NORMAL_ONLY_P2P):
        return (PageKind.NORMAL,)
    if base in _HUGE1G:
        return (PageKind.GIANT,)
    raise ValueError(f"page_kinds: {base!r} is a flag, not a page policy")


def segment_size(length: int, *, padded: bool = True) -> int:
    """Bytes one sub-allocated segment of ``length`` must take (docs/runtime-model.md §3.14).

    ``m = ALIGN_UP(len, 32) + 32``; pass ``padded=False`` on Ascend950, whose
    aclrtMalloc rule has no +32.
    """
    if length <= 0:
        raise ValueError(f"segment_size: length must be > 0, got {length}")
    return align_up(length, 32) + (32 if padded else 0)


def segment_alignment(api: AllocApi | str, *, mixed_media: bool = False) -> int:
    """Start alignment of segments carved from ``api`` memory (docs/runtime-model.md §3.14).

    64 bytes for the aclrtMalloc family and aclrtMallocHost, 128 for DVPP memory;
    ``mixed_media=True`` (media and inference buffers in one pool) gives 128 always.
    """
    api = _api(api)
    return 128 if mixed_media or api in _DVPP else 64


def plan_segments(
    lengths: Iterable[int], api: AllocApi | str, *, mixed_media: bool = False,
    padded: bool = True,
) -> tuple[list[int], int]:
    """Offsets of consecutive segments of ``lengths`` in one block, and the block size needed.

    Each segment takes :func:`segment_size` bytes and starts on
    :func:`segment_alignment`; the block must hold the last segment whole.
    """
    alignment = segment_alignment(api, mixed_media=mixed_media)
    offsets: list[int] = []
    cursor = 0
    for length in lengths:
        start = align_up(cursor, alignment)
        offsets.append(start)
        cursor = start + segment_size(length, padded=padded)
    return offsets, cursor


def format_size(n: int) -> str:
    """Bytes in binary units with about three significant digits: 64 GiB, 63.9 GiB."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    value = float(n)
    unit = 0
    while abs(value) >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{n} B"
    text = f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text} {units[unit]}"
