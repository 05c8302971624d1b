"""Virtual-memory calls of :mod:`acl_mem.raw` (docs/runtime-model.md §4), re-exported there."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from . import _backend
from ._args import c_int, c_uint
from ._hints import check
from ._structs import aclrtMemAccessDesc, aclrtPhysicalMemProp

__all__ = [
    "aclrtFreePhysical",
    "aclrtMallocPhysical",
    "aclrtMapMem",
    "aclrtMemExportToShareableHandle",
    "aclrtMemGetAllocationGranularity",
    "aclrtMemGetAllocationPropertiesFromHandle",
    "aclrtMemImportFromShareableHandle",
    "aclrtMemRetainAllocationHandle",
    "aclrtMemSetAccess",
    "aclrtMemSetPidToShareableHandle",
    "aclrtReleaseMemAddress",
    "aclrtReserveMemAddress",
    "aclrtUnmapMem",
]


def _prop(prop: object, call: str) -> aclrtPhysicalMemProp | None:
    if prop is None:
        return None
    if not isinstance(prop, aclrtPhysicalMemProp):
        raise TypeError(f"{call}: prop must be an aclrtPhysicalMemProp or None, got "
                        f"{type(prop).__name__}")
    return prop.checked(call)


def _ptr(value: object, call: str, name: str) -> int:
    return c_uint(value, call, name, 64, "void *")


def aclrtReserveMemAddress(size: int, alignment: int = 0, expectPtr: int = 0,
                           flags: int = 0) -> int:
    """Reserve virtual addresses; expectPtr 0 lets the driver choose (docs/runtime-model.md
    §4.2)."""
    call = "aclrtReserveMemAddress"
    n = c_uint(size, call, "size")
    a = c_uint(alignment, call, "alignment")
    e = _ptr(expectPtr, call, "expectPtr")
    f = c_uint(flags, call, "flags", 64, "uint64_t")
    rc, ptr = _backend.get().aclrtReserveMemAddress(n, a, e, f)
    check(rc, call, size=n, alignment=a, expectPtr=e, flags=f)
    return ptr


def aclrtReleaseMemAddress(virPtr: int) -> None:
    """Release a reservation; it must be unmapped first (docs/runtime-model.md §4.2)."""
    p = _ptr(virPtr, "aclrtReleaseMemAddress", "virPtr")
    rc = _backend.get().aclrtReleaseMemAddress(p)
    check(rc, "aclrtReleaseMemAddress", virPtr=p)


def aclrtMallocPhysical(size: int, prop: aclrtPhysicalMemProp | None,
                        flags: int = 0) -> int:
    """Physical memory of ``size`` bytes (a multiple of the granularity), docs/runtime-model.md
    §4.3."""
    call = "aclrtMallocPhysical"
    n = c_uint(size, call, "size")
    checked = _prop(prop, call)
    f = c_uint(flags, call, "flags", 64, "uint64_t")
    rc, handle = _backend.get().aclrtMallocPhysical(n, checked, f)
    check(rc, call, size=n, prop=checked, flags=f)
    return handle


def aclrtFreePhysical(handle: int) -> None:
    """Free a physical handle; while mapped, released at the last unmap (docs/runtime-model.md
    §4.3)."""
    h = _ptr(handle, "aclrtFreePhysical", "handle")
    rc = _backend.get().aclrtFreePhysical(h)
    check(rc, "aclrtFreePhysical", handle=h)


def aclrtMapMem(virPtr: int, size: int, offset: int, handle: int, flags: int = 0) -> None:
    """Map a whole physical handle at ``virPtr`` inside a reservation (docs/runtime-model.md
    §4.4)."""
    call = "aclrtMapMem"
    p = _ptr(virPtr, call, "virPtr")
    n = c_uint(size, call, "size")
    o = c_uint(offset, call, "offset")
    h = _ptr(handle, call, "handle")
    f = c_uint(flags, call, "flags", 64, "uint64_t")
    rc = _backend.get().aclrtMapMem(p, n, o, h, f)
    check(rc, call, virPtr=p, size=n, offset=o, handle=h, flags=f)


def aclrtUnmapMem(virPtr: int) -> None:
    """Unmap the mapping made at ``virPtr`` (docs/runtime-model.md §4.4); no implicit
    synchronisation."""
    p = _ptr(virPtr, "aclrtUnmapMem", "virPtr")
    rc = _backend.get().aclrtUnmapMem(p)
    check(rc, "aclrtUnmapMem", virPtr=p)


def aclrtMemGetAllocationGranularity(prop: aclrtPhysicalMemProp | None,
                                     option: int = 0) -> int:
    """The granularity physical sizes must be a multiple of (docs/runtime-model.md §4.5)."""
    call = "aclrtMemGetAllocationGranularity"
    checked = _prop(prop, call)
    o = c_uint(option, call, "option", 32, "aclrtMemGranularityOptions")
    rc, granularity = _backend.get().aclrtMemGetAllocationGranularity(checked, o)
    check(rc, call, prop=checked, option=o)
    return granularity


def aclrtMemSetAccess(virPtr: int, size: int, desc: Sequence[aclrtMemAccessDesc] | None,
                      count: int) -> None:
    """Set access of a mapped range for the locations in ``desc`` (docs/runtime-model.md §4.7)."""
    call = "aclrtMemSetAccess"
    p = _ptr(virPtr, call, "virPtr")
    n = c_uint(size, call, "size")
    entries = None
    if desc is not None:
        if isinstance(desc, aclrtMemAccessDesc):
            desc = [desc]
        entries = [d.checked(call, f"desc[{i}]") if isinstance(d, aclrtMemAccessDesc)
                   else _bad_desc(call, i, d)
                   for i, d in enumerate(_array(desc, call, "desc", "aclrtMemAccessDesc"))]
    k = c_uint(count, call, "count")
    if entries is not None and k > len(entries):
        raise ValueError(f"{call}: count={k} exceeds the {len(entries)} desc entries given")
    rc = _backend.get().aclrtMemSetAccess(p, n, entries, k)
    check(rc, call, virPtr=p, size=n, count=k)


def _array(values: object, call: str, name: str, item: str) -> list[object]:
    """The entries of a C array argument given as a sequence (not a str or bytes)."""
    if isinstance(values, Iterable) and not isinstance(values, (str, bytes, bytearray,
                                                                memoryview)):
        return list(values)
    raise TypeError(f"{call}: {name} must be a sequence of {item} or None, got "
                    f"{type(values).__name__}")


def _bad_desc(call: str, index: int, value: object) -> aclrtMemAccessDesc:
    raise TypeError(f"{call}: desc[{index}] must be an aclrtMemAccessDesc, got "
                    f"{type(value).__name__}")


def aclrtMemExportToShareableHandle(handle: int, handleType: int = 0, flags: int = 0) -> int:
    """A shareable handle another process can import (docs/runtime-model.md §4.6)."""
    call = "aclrtMemExportToShareableHandle"
    h = _ptr(handle, call, "handle")
    t = c_uint(handleType, call, "handleType", 32, "aclrtMemHandleType")
    f = c_uint(flags, call, "flags", 64, "uint64_t")
    rc, shareable = _backend.get().aclrtMemExportToShareableHandle(h, t, f)
    check(rc, call, handle=h, handleType=t, flags=f)
    return shareable


def aclrtMemImportFromShareableHandle(shareableHandle: int, deviceId: int) -> int:
    """Import memory exported by another process, onto ``deviceId`` (docs/runtime-model.md §4.6)."""
    call = "aclrtMemImportFromShareableHandle"
    s = c_uint(shareableHandle, call, "shareableHandle", 64, "uint64_t")
    d = c_int(deviceId, call, "deviceId")
    rc, handle = _backend.get().aclrtMemImportFromShareableHandle(s, d)
    check(rc, call, shareableHandle=s, deviceId=d)
    return handle


def aclrtMemSetPidToShareableHandle(shareableHandle: int, pid: Sequence[int] | None,
                                    pidNum: int) -> None:
    """Allow the processes ``pid`` to import ``shareableHandle`` (docs/runtime-model.md §4.6)."""
    call = "aclrtMemSetPidToShareableHandle"
    s = c_uint(shareableHandle, call, "shareableHandle", 64, "uint64_t")
    pids = None if pid is None else [c_int(p, call, f"pid[{i}]")
                                     for i, p in enumerate(_array(pid, call, "pid", "int"))]
    n = c_uint(pidNum, call, "pidNum")
    if pids is not None and n > len(pids):
        raise ValueError(f"{call}: pidNum={n} exceeds the {len(pids)} pids given")
    rc = _backend.get().aclrtMemSetPidToShareableHandle(s, pids, n)
    check(rc, call, shareableHandle=s, pidNum=n)


def aclrtMemRetainAllocationHandle(virPtr: int) -> int:
    """The physical handle mapped at ``virPtr`` (docs/runtime-model.md §4)."""
    p = _ptr(virPtr, "aclrtMemRetainAllocationHandle", "virPtr")
    rc, handle = _backend.get().aclrtMemRetainAllocationHandle(p)
    check(rc, "aclrtMemRetainAllocationHandle", virPtr=p)
    return handle


def aclrtMemGetAllocationPropertiesFromHandle(handle: int) -> aclrtPhysicalMemProp:
    """The properties ``handle`` was allocated with (docs/runtime-model.md §4)."""
    h = _ptr(handle, "aclrtMemGetAllocationPropertiesFromHandle", "handle")
    rc, prop = _backend.get().aclrtMemGetAllocationPropertiesFromHandle(h)
    check(rc, "aclrtMemGetAllocationPropertiesFromHandle", handle=h)
    assert prop is not None
    return prop
