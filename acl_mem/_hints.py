"""What an error code most likely means for the call that returned it, and what to do.

The raw layer raises every non-zero code through :func:`error`, so each hint is written
once. Hints are computed only on the failure path; the figures of an out-of-memory
hint come from aclrtGetMemInfo at that moment (best effort: a failing query only
shortens the hint).
"""

from __future__ import annotations

import threading

from . import _backend
from ._hint_texts import TEXTS
from ._runtime_facts import padding_of
from ._structs import aclrtPhysicalMemProp
from .enums import MemAttr
from .errors import AclError
from .sizes import (
    AllocApi,
    GiB,
    KiB,
    MiB,
    allocation_size,
    effective_policy,
    page_kinds,
)

__all__ = ["check", "describe", "error", "host_address_space_hint"]

_CONTEXT_NULL = 107002
_PARAM_INVALID = 107000
_DEVICE_ID = 107001
_OOM = 207001
_STREAM_CONTEXT = 107003

#: Each free call and the allocation calls whose memory it takes.
_FREES = {
    "aclrtFree": "aclrtMalloc, aclrtMallocAlign32 or aclrtMallocCached",
    "aclrtFreeHost": "aclrtMallocHost",
    "acldvppFree": "acldvppMalloc",
    "hi_mpi_dvpp_free": "hi_mpi_dvpp_malloc",
}
_MALLOCS = {api.value: api for api in AllocApi}
_VMM = {
    "aclrtReleaseMemAddress": TEXTS["release_reservation"],
    "aclrtUnmapMem": TEXTS["unmap"],
    "aclrtFreePhysical": TEXTS["free_physical"],
    "aclrtMapMem": TEXTS["map"],
}


#: Arguments shown in hexadecimal: addresses, handles and flag-like words.
_HEX = frozenset({"dst", "src", "devPtr", "hostPtr", "dev_ptr", "ptr", "virPtr", "handle",
                  "shareableHandle", "expectPtr", "stream", "policy"})


def check(rc: int, call: str, /, **args: object) -> None:
    """The raw layer's one error path: raise the AclError for ``rc`` (unless 0) from
    ``call`` with ``args``, the arguments as the runtime got them."""
    if rc:
        active = _backend._active
        if active is not None:
            active.note_failure(rc)
        size = args.get("size")
        policy = args.get("policy", 0)
        raise error(rc, describe(call, args), size=size if isinstance(size, int) else None,
                    policy=policy if isinstance(policy, int) else 0, prop=args.get("prop"))


def describe(call: str, args: dict[str, object]) -> str:
    """``call(name=value, ...)`` as error messages show it (addresses in hexadecimal)."""
    shown = ", ".join(
        f"{name}={value:#x}" if name in _HEX and isinstance(value, int) else
        f"{name}={value}" if isinstance(value, int) else f"{name}={value!r}"
        for name, value in args.items())
    return f"{call}({shown})"


def error(rc: int, what: str, *, size: int | None = None, policy: int = 0,
          prop: object = None) -> AclError:
    """The AclError for ``rc`` from ``what`` (``"call(args)"``), with a hint where one helps.

    ``size`` and ``policy`` are the allocation's arguments, for out-of-memory figures;
    ``prop`` is aclrtMallocPhysical's, for its granularity.
    """
    return AclError(rc, what, _hint(rc, what.partition("(")[0], size, policy, prop))


def _hint(rc: int, call: str, size: int | None, policy: int, prop: object = None) -> str:
    if rc == _CONTEXT_NULL:
        thread = threading.current_thread()
        return (TEXTS["context_null"].format(thread=f"thread {thread.name!r}") +
                " (the end of a `with Device(n)` block and Device.reset() are such resets). "
                "Call acl_mem.Device(n).use() or raw.aclrtSetDevice(n) in this thread first")
    if rc == _PARAM_INVALID and call in _FREES:
        return TEXTS["free_not_live"].format(allocators=_FREES[call])
    if rc == _PARAM_INVALID and call in _VMM:
        return _VMM[call]
    if rc == _PARAM_INVALID and call == "aclrtMallocPhysical":
        return _granularity_hint(size, prop)
    if rc == _DEVICE_ID:
        return _device_id_hint()
    if rc == _STREAM_CONTEXT:
        return TEXTS["stream_context"]
    if rc == _OOM and call == "aclrtReserveMemAddress":
        return _address_space_hint(size)
    if rc == _OOM and call in _OPENS_DEVICE and _is_fake():
        return host_address_space_hint()
    if rc == _OOM:
        return _oom_hint(call, size, policy)
    return ""


def _device_id_hint() -> str:
    try:
        backend = _backend.get()
        rc, count = backend.aclrtGetDeviceCount()
        if rc:
            return ""
        return device_count_hint(count, backend.name == "fake")
    except Exception:  # a broken backend (a count that is no int) only shortens the hint
        return ""


def device_count_hint(count: int, fake: bool) -> str:
    """The valid device ids, and on the fake how to have more."""
    more = (f"; the fake has {count} device(s): acl_mem.fake.configure(device_count=n) "
            "gives it more") if fake else ""
    return TEXTS["device_ids"].format(last=count - 1, count=count) + more


def _granularity_hint(size: int | None, prop: object) -> str:
    """aclrtMallocPhysical's size must be a multiple of the granularity of its memory."""
    granularity = 0
    if isinstance(prop, aclrtPhysicalMemProp):
        try:
            rc, granularity = _backend.get().aclrtMemGetAllocationGranularity(prop, 0)
            if rc:
                granularity = 0
        except Exception:  # a broken backend only shortens the hint
            granularity = 0
    if not granularity:
        return ("The size must be a multiple of the allocation granularity "
                "(aclrtMemGetAllocationGranularity, acl_mem.vmm.granularity()), and prop "
                "must name a page attribute and location this device has")
    rule = (TEXTS["granularity"].format(granularity=_human(granularity)) +
            " (acl_mem.vmm.granularity(device, attr))")
    if size is not None and size % granularity:
        rounded = -(-size // granularity) * granularity
        return f"{rule}: " + TEXTS["granularity_round"].format(size=size, rounded=rounded)
    return f"{rule}; check also that prop names a page attribute and location this device has"


def _address_space_hint(size: int | None) -> str:
    asked = f"Asked to reserve {_human(size)} of" if size is not None else "Out of"
    return TEXTS["address_space"].format(
        asked=asked, how=" (VirtualRange.close(), closing an ExpandablePool, ExpandableSegment "
        "or MappedMemory)") + " (a smaller max_size)"


def _oom_hint(call: str, size: int | None, policy: int) -> str:
    parts = []
    api = _MALLOCS.get(call)
    if api is AllocApi.MALLOC_HOST:
        asked = f"Asked for {_human(size)} of" if size is not None else "Out of"
        return TEXTS["host_oom"].format(asked=asked)
    if api is not None and size is not None:
        try:
            backend = _backend.get()
            padded = allocation_size(api, size, policy, padding=padding_of(backend))
            kinds = page_kinds(padded, effective_policy(api, policy))
            pages = " then ".join(kind.name.lower() for kind in kinds)
            parts.append(TEXTS["oom_request"].format(asked=_human(size), padded=_human(padded),
                                                     pages=pages))
        except Exception:
            parts.append(f"Asked for {_human(size)}")
    pools = _pool_figures()
    if pools:
        parts.append(TEXTS["oom_pools"].format(pools=pools))
    parts.append("free memory you no longer need (buffer.free(); a SegmentPool's or "
                 "ExpandablePool's release_unused() gives back what no segment uses), or ask "
                 "for less" + _fake_size_advice())
    return "; ".join(parts)


def _fake_size_advice() -> str:
    try:
        if _backend.get().name != "fake":
            return ""
    except Exception:  # a broken backend only shortens the hint
        return ""
    return ("; on the fake, a profile with more memory or acl_mem.fake.configure(hbm_bytes=n) "
            "gives the device more")


#: The device-neutral attrs first; CANN 8.5.0 rejects them (docs/runtime-model.md §3.12), so
#: then the HBM and the DDR ones, whichever the device has.
_HUGE_ATTRS = (MemAttr.MEM_HUGE, MemAttr.HBM_MEM_HUGE, MemAttr.DDR_MEM_HUGE)
_NORMAL_ATTRS = (MemAttr.MEM_NORMAL, MemAttr.HBM_MEM_NORMAL, MemAttr.DDR_MEM_NORMAL)


def _pool_figures() -> str:
    figures = []
    try:
        backend = _backend.get()
        for name, attrs in (("huge-page pool", _HUGE_ATTRS), ("normal-page pool", _NORMAL_ATTRS)):
            for attr in attrs:
                rc, free, total = backend.aclrtGetMemInfo(int(attr))
                if rc == 0:
                    if total:
                        figures.append(f"{name} {_human(free)} of {_human(total)}")
                    break
    except Exception:
        return ""
    return ", ".join(figures)


def _human(n: int) -> str:
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if n >= unit:
            return f"{n / unit:.2f} {name} ({n} bytes)" if n % unit else f"{n // unit} {name}"
    return f"{n} bytes"


# -- the fake under an address-space limit (docs/fidelity.md row 76) ---------------------------

#: Calls after which the fake maps a device's backing; their 207001 is the host's refusal.
_OPENS_DEVICE = frozenset({"aclrtSetDevice", "aclrtCreateContext"})


def _is_fake() -> bool:
    try:
        return type(_backend.get()).__module__.startswith("acl_mem._fake")
    except Exception:  # a broken backend only loses the hint
        return False


def host_address_space_hint() -> str:
    """Why the fake's device memory found no host address space, and the ways out."""
    import resource  # only on this path, and only where it exists

    try:
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (OSError, ValueError):
        limit = resource.RLIM_INFINITY
    if limit == resource.RLIM_INFINITY:
        # No limit, so the kernel said no: in strict overcommit (vm.overcommit_memory=2)
        # even MAP_NORESERVE mappings count against the commit limit.
        cause = ("this process has no address-space limit (RLIMIT_AS, `ulimit -v`), so the "
                 "kernel refused it (vm.overcommit_memory=2 counts sparse mappings too)")
        remedy = "Give the fake a smaller device"
    else:
        cause = f"this process's address-space limit (RLIMIT_AS, `ulimit -v`) is {_human(limit)}"
        remedy = "Raise the limit, or give the fake a smaller device"
    return ("The fake backs each device's memory with sparse host mappings of about twice "
            "its capacity plus 16 GiB for DVPP (no RAM is used until bytes are written), and "
            f"{cause}. {remedy}: acl_mem.fake.configure(hbm_bytes=...), or "
            "ACL_MEM_FAKE_PROFILE=atlas-200dk")
