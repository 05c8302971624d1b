"""Enumerations with the exact values of ``acl_rt.h`` (ACL 1.17, docs/runtime-model.md §2)."""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "VMM_EXPORT_FLAG_DEFAULT",
    "VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION",
    "MallocPolicy",
    "MemAccessFlags",
    "MemAllocationType",
    "MemAttr",
    "MemGranularityOptions",
    "MemHandleType",
    "MemLocationType",
    "MemcpyKind",
]


class MallocPolicy(IntEnum):
    """``aclrtMemMallocPolicy`` (docs/runtime-model.md §2, §3.13).

    The first eight values are page policies. The last three are flag bits that the
    docs allow to OR onto a page policy; aclrtMalloc, aclrtMallocAlign32 and
    aclrtMallocCached compare the policy by exact equality, so any OR-ed value silently
    takes the default policy (HUGE_FIRST) on those calls (docs/runtime-model.md §3.5).
    """

    #: Requests whose padded size is <= 1 MiB get normal (4 KiB) pages; larger ones
    #: try huge (2 MiB) pages first and fall back to normal pages.
    HUGE_FIRST = 0
    #: Huge (2 MiB) pages only; 207001 when the huge-page pool is exhausted.
    HUGE_ONLY = 1
    #: Normal (4 KiB) pages only; 207001 when the normal-page pool is exhausted.
    NORMAL_ONLY = 2
    #: HUGE_FIRST for memory that another device copies from or to.
    HUGE_FIRST_P2P = 3
    #: HUGE_ONLY for memory that another device copies from or to.
    HUGE_ONLY_P2P = 4
    #: NORMAL_ONLY for memory that another device copies from or to.
    NORMAL_ONLY_P2P = 5
    #: Giant (1 GiB) pages only (Atlas A2/A3); 207000 where the chip lacks them.
    HUGE1G_ONLY = 6
    #: HUGE1G_ONLY for memory that another device copies from or to.
    HUGE1G_ONLY_P2P = 7
    #: Allocate from the LOW-bandwidth memory (no effect except on IPV350; one Huawei
    #: page describes this flag and the next one the wrong way round, docs/runtime-model.md §3.13).
    TYPE_LOW_BAND_WIDTH = 0x100
    #: Allocate from the HIGH-bandwidth memory (no effect except on IPV350).
    TYPE_HIGH_BAND_WIDTH = 0x1000
    #: Read-only from user space; honoured only by aclrtMallocWithCfg (docs/runtime-model.md §3.13).
    ACCESS_USER_SPACE_READONLY = 0x100000


class MemcpyKind(IntEnum):
    """``aclrtMemcpyKind`` (docs/runtime-model.md §2, §3.10)."""

    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3
    #: The runtime decides the direction from the two addresses.
    DEFAULT = 4
    HOST_TO_BUF_TO_DEVICE = 5
    #: In the enum, but rejected by aclrtMemcpy(Async) with 100000 (docs/runtime-model.md §3.10).
    INNER_DEVICE_TO_DEVICE = 6
    #: In the enum, but rejected by aclrtMemcpy(Async) with 100000 (docs/runtime-model.md §3.10).
    INTER_DEVICE_TO_DEVICE = 7


class MemAttr(IntEnum):
    """``aclrtMemAttr``: which page pool aclrtGetMemInfo reports (docs/runtime-model.md §2, §3.12).

    0-11 name DDR or HBM explicitly (legacy); 12-17 let the runtime pick the device's
    memory and are the recommended values. ``*_MEM`` is huge + normal, ``*_HUGE`` the
    2 MiB pool, ``*_HUGE1G`` the 1 GiB pool, everything else the normal-page pool.
    """

    DDR_MEM = 0
    HBM_MEM = 1
    DDR_MEM_HUGE = 2
    DDR_MEM_NORMAL = 3
    HBM_MEM_HUGE = 4
    HBM_MEM_NORMAL = 5
    DDR_MEM_P2P_HUGE = 6
    DDR_MEM_P2P_NORMAL = 7
    HBM_MEM_P2P_HUGE = 8
    HBM_MEM_P2P_NORMAL = 9
    HBM_MEM_HUGE1G = 10
    HBM_MEM_P2P_HUGE1G = 11
    MEM_NORMAL = 12
    MEM_HUGE = 13
    MEM_HUGE1G = 14
    MEM_P2P_NORMAL = 15
    MEM_P2P_HUGE = 16
    MEM_P2P_HUGE1G = 17


class MemLocationType(IntEnum):
    """``aclrtMemLocationType`` (docs/runtime-model.md §2, §4.9)."""

    HOST = 0
    DEVICE = 1
    #: Plain host memory the runtime does not know (malloc, numpy, bytes).
    UNREGISTERED = 2
    HOST_NUMA = 4


class MemHandleType(IntEnum):
    """``aclrtMemHandleType`` (docs/runtime-model.md §2): only NONE is accepted by the VMM calls
    (§4.3)."""

    NONE = 0
    POSIX = 2


class MemAllocationType(IntEnum):
    """``aclrtMemAllocationType`` (docs/runtime-model.md §2)."""

    PINNED = 0


class MemGranularityOptions(IntEnum):
    """``aclrtMemGranularityOptions`` (docs/runtime-model.md §2, §4.5)."""

    MINIMUM = 0
    RECOMMENDED = 1
    UNDEF = 0xFFFF


class MemAccessFlags(IntEnum):
    """``aclrtMemAccessFlags`` (docs/runtime-model.md §2, §4.7): only READWRITE is supported."""

    NONE = 0
    READ = 1
    READWRITE = 3


#: aclrtMemExportToShareableHandle flags (docs/runtime-model.md §2, §4.6).
VMM_EXPORT_FLAG_DEFAULT = 0x0
VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION = 0x1
