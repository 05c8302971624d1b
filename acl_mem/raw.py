"""The C API one to one, under the C names (docs/runtime-model.md §3).

Pointers are Python ints (0 is NULL); outputs are returned; a non-zero aclError is
raised as the :class:`~acl_mem.AclError` subclass for its code. Arguments are checked
against their C types first (TypeError / ValueError naming the call and argument),
so both backends see the same values. Semantics are the runtime's: nothing here
rounds, caches or retries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from . import _backend
from ._args import c_int, c_uint, path_or_none
from ._hints import check
from ._lifecycle import state
from ._raw_events import (
    aclrtCreateContext,
    aclrtCreateEvent,
    aclrtCreateEventExWithFlag,
    aclrtCreateEventWithFlag,
    aclrtDestroyContext,
    aclrtDestroyEvent,
    aclrtEventElapsedTime,
    aclrtGetCurrentContext,
    aclrtQueryEvent,
    aclrtQueryEventStatus,
    aclrtRecordEvent,
    aclrtResetEvent,
    aclrtSetCurrentContext,
    aclrtStreamWaitEvent,
    aclrtSynchronizeEvent,
)
from ._raw_vmm import (
    aclrtFreePhysical,
    aclrtMallocPhysical,
    aclrtMapMem,
    aclrtMemExportToShareableHandle,
    aclrtMemGetAllocationGranularity,
    aclrtMemGetAllocationPropertiesFromHandle,
    aclrtMemImportFromShareableHandle,
    aclrtMemRetainAllocationHandle,
    aclrtMemSetAccess,
    aclrtMemSetPidToShareableHandle,
    aclrtReleaseMemAddress,
    aclrtReserveMemAddress,
    aclrtUnmapMem,
)
from ._structs import aclrtMemAccessDesc, aclrtMemLocation, aclrtPhysicalMemProp
from .enums import MallocPolicy, MemcpyKind, MemLocationType
from .errors import HazardError

__all__ = [
    "PtrAttributes",
    "aclFinalize",
    "aclInit",
    "acldvppFree",
    "acldvppMalloc",
    "aclrtCreateContext",
    "aclrtCreateEvent",
    "aclrtCreateEventExWithFlag",
    "aclrtCreateEventWithFlag",
    "aclrtCreateStream",
    "aclrtDestroyContext",
    "aclrtDestroyEvent",
    "aclrtDestroyStream",
    "aclrtDestroyStreamForce",
    "aclrtEventElapsedTime",
    "aclrtFree",
    "aclrtFreeHost",
    "aclrtFreePhysical",
    "aclrtGetCurrentContext",
    "aclrtGetDevice",
    "aclrtGetDeviceCount",
    "aclrtGetLastError",
    "aclrtGetMemInfo",
    "aclrtGetRunMode",
    "aclrtGetSocName",
    "aclrtGetVersion",
    "aclrtMalloc",
    "aclrtMallocAlign32",
    "aclrtMallocCached",
    "aclrtMallocHost",
    "aclrtMallocPhysical",
    "aclrtMapMem",
    "aclrtMemAccessDesc",
    "aclrtMemExportToShareableHandle",
    "aclrtMemGetAddressRange",
    "aclrtMemGetAllocationGranularity",
    "aclrtMemGetAllocationPropertiesFromHandle",
    "aclrtMemImportFromShareableHandle",
    "aclrtMemLocation",
    "aclrtMemRetainAllocationHandle",
    "aclrtMemSetAccess",
    "aclrtMemSetPidToShareableHandle",
    "aclrtMemcpy",
    "aclrtMemcpyAsync",
    "aclrtMemset",
    "aclrtMemsetAsync",
    "aclrtPeekAtLastError",
    "aclrtPhysicalMemProp",
    "aclrtPointerGetAttributes",
    "aclrtQueryEvent",
    "aclrtQueryEventStatus",
    "aclrtRecordEvent",
    "aclrtReleaseMemAddress",
    "aclrtReserveMemAddress",
    "aclrtResetDevice",
    "aclrtResetDeviceForce",
    "aclrtResetEvent",
    "aclrtSetCurrentContext",
    "aclrtSetDevice",
    "aclrtStreamWaitEvent",
    "aclrtSynchronizeDevice",
    "aclrtSynchronizeEvent",
    "aclrtSynchronizeStream",
    "aclrtUnmapMem",
    "aclsysGetVersionStr",
    "hi_mpi_dvpp_free",
    "hi_mpi_dvpp_malloc",
]


class PtrAttributes(NamedTuple):
    """``aclrtPtrAttributes`` without its reserved words (docs/runtime-model.md §4.9).

    ``type`` is a :class:`MemLocationType`, or the plain int when a newer runtime
    reports a value the ACL 1.17 header does not name (e.g. 3, MANAGED).
    """

    type: MemLocationType | int
    id: int
    pageSize: int


_SIZE_LIMIT = 1 << 64
_U32_LIMIT = 1 << 32




def aclInit(configPath: object = None) -> None:
    """Initialise ACL; a repeat raises RepeatInitializeError (100002), docs/runtime-model.md
    §3.1."""
    path = path_or_none(configPath, "aclInit", "configPath")
    rc = _backend.get().aclInit(path)
    check(rc, "aclInit", configPath=path)


def aclFinalize() -> None:
    """Tear ACL down (resets every device); a repeat raises 100037, docs/runtime-model.md §3.1."""
    with state.lock:
        try:
            rc = _backend.get().aclFinalize()
        except HazardError:
            state.teardown(keeps_host=True)  # raised after the runtime released everything
            raise
        check(rc, "aclFinalize")
        # Pinned host memory is not the devices': it stays allocated (§3.7).
        state.teardown(keeps_host=True)


def aclrtSetDevice(deviceId: int) -> None:
    """Make ``deviceId`` current for this thread, adding one reference (docs/runtime-model.md
    §3.2)."""
    dev = c_int(deviceId, "aclrtSetDevice", "deviceId")
    # The runtime call and its mirror move together, or a reset racing with a set on
    # another thread could leave live tokens on released memory.
    with state.lock:
        rc = _backend.get().aclrtSetDevice(dev)
        check(rc, "aclrtSetDevice", deviceId=dev)
        state.device_set(dev)


def aclrtResetDevice(deviceId: int) -> None:
    """Drop one reference; at zero the device's memory is released (docs/runtime-model.md §3.2)."""
    _reset("aclrtResetDevice", deviceId, state.device_reset)


def aclrtResetDeviceForce(deviceId: int) -> None:
    """Drop every reference of aclrtSetDevice at once: the device's default context and its
    memory are released (created contexts still hold it open); no reference left -> 507007
    (docs/runtime-model.md §3.2)."""
    _reset("aclrtResetDeviceForce", deviceId, state.device_reset_force)


def _reset(call: str, deviceId: int, mirror: Callable[[int], None]) -> None:
    dev = c_int(deviceId, call, "deviceId")
    reset = getattr(_backend.get(), call)
    with state.lock:
        try:
            rc = reset(dev)
        except HazardError:
            mirror(dev)  # raised after the reset took effect
            raise
        check(rc, call, deviceId=dev)
        mirror(dev)


def aclrtGetDevice() -> int:
    """The calling thread's current device; 107002 if it never set one (docs/runtime-model.md
    §3.2)."""
    rc, dev = _backend.get().aclrtGetDevice()
    check(rc, "aclrtGetDevice")
    return dev


def aclrtGetDeviceCount() -> int:
    """Number of visible devices (docs/runtime-model.md §3.2)."""
    rc, count = _backend.get().aclrtGetDeviceCount()
    check(rc, "aclrtGetDeviceCount")
    return count


def aclrtGetRunMode() -> int:
    """0 ``ACL_DEVICE`` (RC: running on the board's control CPU) or 1 ``ACL_HOST`` (EP);
    works before aclInit (docs/runtime-model.md §3.16)."""
    rc, mode = _backend.get().aclrtGetRunMode()
    check(rc, "aclrtGetRunMode")
    return mode


def aclrtGetVersion() -> tuple[int, int, int]:
    """``(major, minor, patch)`` of the ACL interface: 1.16.0 on CANN 8.5.0, 1.17.0 on 9.0.1
    and 9.1.0 (docs/runtime-model.md §0.1)."""
    rc, major, minor, patch = _backend.get().aclrtGetVersion()
    check(rc, "aclrtGetVersion")
    return major, minor, patch


def aclrtGetLastError(level: int = 0) -> int:
    """The calling thread's last failure of the runtime itself (a 107xxx, 207xxx or 507xxx
    code, 0 if none), then forgotten: the next call returns 0 until another call fails. The
    ACL layer's own refusals (1000xx) are not kept. Only level 0 (ACL_RT_THREAD_LEVEL)
    exists: others raise InvalidParamError (docs/runtime-model.md §3.1.2)."""
    return _last_error("aclrtGetLastError", level)


def aclrtPeekAtLastError(level: int = 0) -> int:
    """Like :func:`aclrtGetLastError`, but the code stays (docs/runtime-model.md §3.1.2)."""
    return _last_error("aclrtPeekAtLastError", level)


def _last_error(call: str, level: int) -> int:
    lvl = c_int(level, call, "level")
    backend = _backend.get()
    rc = backend.aclrtGetLastError(lvl) if call == "aclrtGetLastError" \
        else backend.aclrtPeekAtLastError(lvl)
    if rc == 100000 and lvl != 0:  # the getter's own refusal, never a kept code
        check(rc, call, level=lvl)
    return rc


def aclsysGetVersionStr(pkgName: str) -> str:
    """Version string of an installed CANN package, e.g. ``aclsysGetVersionStr("runtime")``
    -> ``"9.1.0"`` (500000 if the package is not installed)."""
    if not isinstance(pkgName, str):
        raise TypeError(f"aclsysGetVersionStr: pkgName must be a str, got "
                        f"{type(pkgName).__name__}")
    rc, version = _backend.get().aclsysGetVersionStr(pkgName)
    check(rc, "aclsysGetVersionStr", pkgName=pkgName)
    return version


def aclrtGetSocName() -> str:
    """The SoC name (e.g. ``"Ascend910B1"``); decides the padding size (docs/runtime-model.md
    §3.5)."""
    return _backend.get().soc_name()


def _malloc(call: str, size: object, policy: object) -> int:
    # Plain in-range ints, the common case, skip the checking calls.
    nbytes = size if type(size) is int and 0 <= size < _SIZE_LIMIT else \
        c_uint(size, call, "size")
    pol = policy if (type(policy) is int or type(policy) is MallocPolicy) and \
        0 <= policy < _U32_LIMIT else c_uint(policy, call, "policy", 32, "aclrtMemMallocPolicy")
    backend = _backend._active or _backend.get()
    rc, ptr = getattr(backend, call)(nbytes, pol)
    try:
        if rc:
            check(rc, call, size=nbytes, policy=pol)
        return int(ptr)
    except BaseException:
        # Interrupted before the caller got the pointer: the allocation must not stay.
        if not rc and ptr:
            backend.aclrtFree(ptr)
        raise


def aclrtMalloc(size: int, policy: int = MallocPolicy.HUGE_FIRST) -> int:
    """Device memory of ``ALIGN_UP(size,32)+padding`` bytes (docs/runtime-model.md §3.5)."""
    # _malloc spelled out for the common case (plain in-range ints), the hottest call:
    # no helper frame, no call looked up by name. Anything else takes _malloc's checks.
    if not (type(size) is int and (type(policy) is int or type(policy) is MallocPolicy)
            and 0 <= size < _SIZE_LIMIT and 0 <= policy < _U32_LIMIT):
        return _malloc("aclrtMalloc", size, policy)
    backend = _backend._active or _backend.get()
    rc, ptr = backend.aclrtMalloc(size, policy)
    try:
        if rc:
            check(rc, "aclrtMalloc", size=size, policy=policy)
        return ptr if type(ptr) is int else int(ptr)
    except BaseException:
        # Interrupted before the caller got the pointer: the allocation must not stay.
        if not rc and ptr:
            backend.aclrtFree(ptr)
        raise


def aclrtMallocAlign32(size: int, policy: int = MallocPolicy.HUGE_FIRST) -> int:
    """Device memory of ``ALIGN_UP(size,32)`` bytes, no padding (docs/runtime-model.md §3.5)."""
    return _malloc("aclrtMallocAlign32", size, policy)


def aclrtMallocCached(size: int, policy: int = MallocPolicy.HUGE_FIRST) -> int:
    """Cacheable device memory, sized like aclrtMalloc (docs/runtime-model.md §3.5)."""
    return _malloc("aclrtMallocCached", size, policy)


def _free(call: str, arg: str, ptr: object) -> None:
    address = ptr if type(ptr) is int and 0 <= ptr < _SIZE_LIMIT else \
        c_uint(ptr, call, arg, 64, "void *")
    rc = getattr(_backend._active or _backend.get(), call)(address)
    if rc:  # the hot path: no call at all on success
        check(rc, call, **{arg: address})


def aclrtFree(devPtr: int) -> None:
    """Free aclrtMalloc-family memory at once, without synchronising (docs/runtime-model.md
    §3.6)."""
    # _free spelled out for a plain in-range int (see aclrtMalloc).
    if type(devPtr) is int and 0 <= devPtr < _SIZE_LIMIT:
        rc = (_backend._active or _backend.get()).aclrtFree(devPtr)
        if rc:
            check(rc, "aclrtFree", devPtr=devPtr)
        return
    _free("aclrtFree", "devPtr", devPtr)


def aclrtMallocHost(size: int) -> int:
    """Page-locked host memory of ``ALIGN_UP(size,32)`` bytes (docs/runtime-model.md §3.7)."""
    nbytes = c_uint(size, "aclrtMallocHost", "size")
    rc, ptr = _backend.get().aclrtMallocHost(nbytes)
    check(rc, "aclrtMallocHost", size=nbytes)
    return int(ptr)


def aclrtFreeHost(hostPtr: int) -> None:
    """Free aclrtMallocHost memory (docs/runtime-model.md §3.7)."""
    _free("aclrtFreeHost", "hostPtr", hostPtr)


def acldvppMalloc(size: int) -> int:
    """Huge-page media memory, 128-byte aligned, ``ALIGN_UP(size,32)+32`` (docs/runtime-model.md
    §3.8)."""
    nbytes = c_uint(size, "acldvppMalloc", "size")
    rc, ptr = _backend.get().acldvppMalloc(nbytes)
    check(rc, "acldvppMalloc", size=nbytes)
    return int(ptr)


def acldvppFree(devPtr: int) -> None:
    """Free acldvppMalloc memory (docs/runtime-model.md §3.8)."""
    _free("acldvppFree", "devPtr", devPtr)


def hi_mpi_dvpp_malloc(dev_id: int, size: int) -> int:
    """Media V2 memory; ``dev_id`` is reserved and ignored (docs/runtime-model.md §3.9)."""
    dev = c_uint(dev_id, "hi_mpi_dvpp_malloc", "dev_id", 32, "hi_u32")
    nbytes = c_uint(size, "hi_mpi_dvpp_malloc", "size", 64, "hi_u64")
    rc, ptr = _backend.get().hi_mpi_dvpp_malloc(dev, nbytes)
    check(rc, "hi_mpi_dvpp_malloc", dev_id=dev, size=nbytes)
    return int(ptr)


def hi_mpi_dvpp_free(dev_ptr: int) -> None:
    """Free hi_mpi_dvpp_malloc memory (docs/runtime-model.md §3.9)."""
    _free("hi_mpi_dvpp_free", "dev_ptr", dev_ptr)


def aclrtMemcpy(dst: int, destMax: int, src: int, count: int, kind: int) -> None:
    """Synchronous copy; the runtime decides the direction from the addresses (docs/runtime-model.md
    §3.10)."""
    call = "aclrtMemcpy"
    # The four size_t values in range at once: their bitwise OR is negative when one is,
    # and reaches 2**64 when one does.
    if (type(dst) is type(destMax) is type(src) is type(count) is int
            and (type(kind) is int or type(kind) is MemcpyKind)
            and 0 <= (dst | destMax | src | count) < _SIZE_LIMIT
            and 0 <= kind < _U32_LIMIT):
        d, dm, s, n, k = dst, destMax, src, count, kind
    else:
        d = c_uint(dst, call, "dst", 64, "void *")
        dm = c_uint(destMax, call, "destMax")
        s = c_uint(src, call, "src", 64, "const void *")
        n = c_uint(count, call, "count")
        k = c_uint(kind, call, "kind", 32, "aclrtMemcpyKind")
    rc = (_backend._active or _backend.get()).aclrtMemcpy(d, dm, s, n, k)
    if rc:  # the hot path: no call at all on success
        check(rc, call, dst=d, destMax=dm, src=s, count=n, kind=k)


def aclrtMemset(devPtr: int, maxCount: int, value: int, count: int) -> None:
    """Set ``count`` bytes to the low byte of ``value`` (docs/runtime-model.md §3.11)."""
    call = "aclrtMemset"
    p = c_uint(devPtr, call, "devPtr", 64, "void *")
    mc = c_uint(maxCount, call, "maxCount")
    v = c_int(value, call, "value")
    n = c_uint(count, call, "count")
    rc = _backend.get().aclrtMemset(p, mc, v, n)
    check(rc, call, devPtr=p, maxCount=mc, value=v, count=n)


def aclrtGetMemInfo(attr: int) -> tuple[int, int]:
    """``(free, total)`` bytes of the page pool ``attr`` names (docs/runtime-model.md §3.12)."""
    a = c_uint(attr, "aclrtGetMemInfo", "attr", 32, "aclrtMemAttr")
    rc, free, total = _backend.get().aclrtGetMemInfo(a)
    check(rc, "aclrtGetMemInfo", attr=a)
    return free, total


def aclrtMemGetAddressRange(ptr: int) -> tuple[int, int]:
    """``(base, size)`` of the block holding ``ptr``, size page-rounded (docs/runtime-model.md
    §4.8)."""
    p = c_uint(ptr, "aclrtMemGetAddressRange", "ptr", 64, "void *")
    rc, base, size = _backend.get().aclrtMemGetAddressRange(p)
    check(rc, "aclrtMemGetAddressRange", ptr=p)
    return base, size


def aclrtPointerGetAttributes(ptr: int) -> PtrAttributes:
    """Where ``ptr`` lives: DEVICE (with user device id), HOST or UNREGISTERED
    (docs/runtime-model.md §4.9)."""
    p = c_uint(ptr, "aclrtPointerGetAttributes", "ptr", 64, "const void *")
    rc, loc_type, loc_id, page = _backend.get().aclrtPointerGetAttributes(p)
    check(rc, "aclrtPointerGetAttributes", ptr=p)
    known = loc_type in MemLocationType._value2member_map_
    return PtrAttributes(MemLocationType(loc_type) if known else loc_type, loc_id, page)


# -- streams and asynchronous copies (§3.4, §3.10, §3.11) ------------------------------------------


def aclrtCreateStream() -> int:
    """A new stream in the calling thread's context (docs/runtime-model.md §3.4)."""
    rc, stream = _backend.get().aclrtCreateStream()
    check(rc, "aclrtCreateStream")
    return stream


def aclrtDestroyStream(stream: int) -> None:
    """Destroy ``stream`` after its queued work ran; NULL -> 100000 (docs/runtime-model.md §3.4)."""
    handle = c_uint(stream, "aclrtDestroyStream", "stream", 64, "aclrtStream")
    rc = _backend.get().aclrtDestroyStream(handle)
    check(rc, "aclrtDestroyStream", stream=handle)


def aclrtDestroyStreamForce(stream: int) -> None:
    """Destroy ``stream`` without waiting: its queued work is dropped, never run; events
    recorded on it complete. NULL -> 100000 (docs/runtime-model.md §3.4)."""
    handle = c_uint(stream, "aclrtDestroyStreamForce", "stream", 64, "aclrtStream")
    rc = _backend.get().aclrtDestroyStreamForce(handle)
    check(rc, "aclrtDestroyStreamForce", stream=handle)


def aclrtSynchronizeStream(stream: int = 0) -> None:
    """Wait for ``stream``'s queued work; 0 (NULL) is the default stream (docs/runtime-model.md
    §3.4)."""
    handle = c_uint(stream, "aclrtSynchronizeStream", "stream", 64, "aclrtStream")
    rc = _backend.get().aclrtSynchronizeStream(handle)
    check(rc, "aclrtSynchronizeStream", stream=handle)


def aclrtSynchronizeDevice() -> None:
    """Wait for every stream of the current context (docs/runtime-model.md §3.4)."""
    rc = _backend.get().aclrtSynchronizeDevice()
    check(rc, "aclrtSynchronizeDevice")


def aclrtMemcpyAsync(dst: int, destMax: int, src: int, count: int, kind: int,
                     stream: int = 0) -> None:
    """Queue a copy on ``stream``; the runtime corrects ``kind`` from the addresses (§3.10)."""
    call = "aclrtMemcpyAsync"
    d = c_uint(dst, call, "dst", 64, "void *")
    dm = c_uint(destMax, call, "destMax")
    s = c_uint(src, call, "src", 64, "const void *")
    n = c_uint(count, call, "count")
    k = c_uint(kind, call, "kind", 32, "aclrtMemcpyKind")
    h = c_uint(stream, call, "stream", 64, "aclrtStream")
    rc = _backend.get().aclrtMemcpyAsync(d, dm, s, n, k, h)
    check(rc, call, dst=d, destMax=dm, src=s, count=n, kind=k, stream=h)


def aclrtMemsetAsync(devPtr: int, maxCount: int, value: int, count: int,
                     stream: int = 0) -> None:
    """Queue a memset of the low byte of ``value`` on ``stream`` (docs/runtime-model.md §3.11)."""
    call = "aclrtMemsetAsync"
    p = c_uint(devPtr, call, "devPtr", 64, "void *")
    mc = c_uint(maxCount, call, "maxCount")
    v = c_int(value, call, "value")
    n = c_uint(count, call, "count")
    h = c_uint(stream, call, "stream", 64, "aclrtStream")
    rc = _backend.get().aclrtMemsetAsync(p, mc, v, n, h)
    check(rc, call, devPtr=p, maxCount=mc, value=v, count=n, stream=h)
