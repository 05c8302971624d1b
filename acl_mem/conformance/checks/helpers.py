"""Helpers shared by the conformance checks."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import pytest

from acl_mem import raw
from acl_mem.enums import MemAttr
from acl_mem.errors import AclError, FeatureNotSupportError
from acl_mem.sizes import soc_padding

#: How long a helper thread may take before the test gives up on it.
THREAD_TIMEOUT = 30.0


# -- threads ---------------------------------------------------------------------------------------


def in_fresh_thread(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """Run ``fn`` in a new thread that never set a device; return ``(result, exception)``.

    Exactly one of the two is meaningful: ``exception`` is None when ``fn`` returned.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed back to the test thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout=THREAD_TIMEOUT)
    if thread.is_alive():
        raise TimeoutError(f"{fn!r} still running after {THREAD_TIMEOUT} s in a fresh thread")
    return box.get("value"), box.get("error")


def raise_from_fresh_thread(fn: Callable[[], Any]) -> Any:
    """:func:`in_fresh_thread`, but return the result or re-raise the exception."""
    value, error = in_fresh_thread(fn)
    if error is not None:
        raise error
    return value


# -- devices and memory ----------------------------------------------------------------------------


def need_two_devices() -> None:
    if raw.aclrtGetDeviceCount() < 2:
        pytest.skip("needs at least two devices")


def address_of(buf: bytearray) -> int:
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


def free_pools() -> tuple[int, int]:
    """(free bytes of normal pages, free bytes of huge pages) of the current device."""
    return (raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)[0],
            raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0])


def taken(fn: Callable[[], int]) -> tuple[int, int, int]:
    """Run an allocation; return (pointer, normal bytes taken, huge bytes taken)."""
    normal0, huge0 = free_pools()
    ptr = fn()
    normal1, huge1 = free_pools()
    return ptr, normal0 - normal1, huge0 - huge1


# -- run mode (docs/runtime-model.md §3.16) --------------------------------------------------------
#: aclrtGetRunMode's answers: the program runs on the board's control CPU (RC) or on a host
#: driving the device over PCIe (EP).
ACL_DEVICE = 0
ACL_HOST = 1


def rc_mode() -> bool:
    """Whether aclrtGetRunMode reports ACL_DEVICE (RC mode, docs/runtime-model.md §3.16): host
    and device share one memory, the control CPU reads device memory, and copies with a host
    kind run as device-to-device, so an asynchronous HOST_TO_HOST copy is accepted instead of
    207000 (§3.10)."""
    return raw.aclrtGetRunMode() == ACL_DEVICE


# -- CANN releases (docs/runtime-model.md §0.1) ----------------------------------------------------
#: Why checks of a stale stream handle on 8.5.0 / 9.0.1 run on the fake only.
STALE_HANDLE_BEFORE_9_1 = ("8.5.0 and 9.0.1 use a destroyed stream handle unchecked (undefined "
                           "behaviour, it may crash); the fake answers 107017 where it looks the "
                           "stream up, after the parameter checks (docs/fidelity.md row 66)")


def _numbers(release: str) -> tuple[int, ...]:
    parts: list[int] = []
    for part in release.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def since(cann: str, first: str) -> bool:
    """Whether the release ``cann`` (the ``cann`` fixture) is ``first`` or later. A release
    string without numbers (the runtime would not say) counts as the newest."""
    numbers = _numbers(cann)
    return not numbers or numbers >= _numbers(first)


def runtime_release() -> str:
    """The active backend's CANN release (aclsysGetVersionStr("runtime")), "" if it cannot
    say; for helpers that have no ``cann`` fixture at hand."""
    try:
        return raw.aclsysGetVersionStr("runtime")
    except AclError:
        return ""


def address_range(ptr: int, cann: str) -> tuple[int, int] | None:
    """aclrtMemGetAddressRange(ptr), or None on a release without the call (8.5.0,
    docs/runtime-model.md §4.8): for checks that only use it to look at a block."""
    return raw.aclrtMemGetAddressRange(ptr) if since(cann, "9.0.1") else None


def padding() -> int:
    """The padding aclrtMalloc adds on this SoC under the backend's CANN release: the SoC's
    ``padding_size`` from 9.1.0 (0 on Ascend950), a fixed 32 on every SoC before
    (docs/runtime-model.md §3.5)."""
    return soc_padding(raw.aclrtGetSocName(), runtime_release())


# -- what the device has (docs/runtime-model.md §3.5, §3.8, §3.13, §4.2) ---------------------------
# Facts the runtime reports (the SoC name from aclrtGetSocName, the pools from aclrtGetMemInfo),
# so that one check run on any device (and under every profile of the fake) expects what that
# device supports. A check of a fact the device does not have skips with a reason naming the
# SoC; the device's own answer (207000) is checked where the check is about support.

#: SoCs without separate DVPP memory: acldvppMalloc and hi_mpi_dvpp_malloc answer 207000
#: (docs/runtime-model.md §3.8).
_NO_DVPP = ("Ascend950",)
#: The SoC family without DVPP V2 (hi_mpi_dvpp_malloc / hi_mpi_dvpp_free, libacl_dvpp_mpi.so):
#: the Atlas 200/300/500 inference products, SoC "Ascend310" (docs/runtime-model.md §3.9).
#: Ascend310P (Atlas inference series) and Ascend310B (Atlas 200I/500 A2) have it, so the
#: rule is the prefix "Ascend310" not followed by P or B. The Atlas training series (the
#: first Ascend910) lacks it too but has no profile and is not told apart here.
_NO_MPI_DVPP = "Ascend310"
_MPI_DVPP_VARIANTS = ("Ascend310P", "Ascend310B")
#: SoCs whose aclrtReserveMemAddress takes expectPtr NULL only: any fixed address is 207000
#: (docs/runtime-model.md §4.2, docs/fidelity.md row 39).
_NULL_EXPECT_PTR_ONLY = ("Ascend950",)


def soc_name() -> str:
    """What aclrtGetSocName reports for the device under test."""
    return raw.aclrtGetSocName()


def has_dvpp_memory() -> bool:
    """Whether the SoC has DVPP memory (docs/runtime-model.md §3.8)."""
    return not soc_name().startswith(_NO_DVPP)


def need_dvpp_memory() -> None:
    """Skip a check of DVPP memory on a SoC that has none (docs/runtime-model.md §3.8)."""
    if not has_dvpp_memory():
        pytest.skip(f"{soc_name()} has no separate DVPP memory: acldvppMalloc and "
                    "hi_mpi_dvpp_malloc answer 207000 there (docs/runtime-model.md §3.8; "
                    "test_spec_3_8_dvpp_support_follows_the_soc checks that answer)")


def has_mpi_dvpp() -> bool:
    """Whether hi_mpi_dvpp_malloc gives DVPP memory on this SoC (docs/runtime-model.md §3.9):
    it needs DVPP memory (§3.8) and DVPP V2, which the Atlas 200/300/500 inference products
    (Ascend310, not 310P/310B) do not have; there it answers 207000 (the fake's choice of
    code, docs/fidelity.md row 73) while acldvppMalloc works."""
    name = soc_name()
    lacks_v2 = name.startswith(_NO_MPI_DVPP) and not name.startswith(_MPI_DVPP_VARIANTS)
    return has_dvpp_memory() and not lacks_v2


def need_mpi_dvpp() -> None:
    """Skip a check of hi_mpi_dvpp_malloc memory on a SoC where the call is not supported
    (docs/runtime-model.md §3.8, §3.9)."""
    need_dvpp_memory()
    if not has_mpi_dvpp():
        pytest.skip(f"{soc_name()} (Atlas 200/300/500 inference) has no DVPP V2: "
                    "hi_mpi_dvpp_malloc answers 207000 there (docs/runtime-model.md §3.9; "
                    "test_spec_3_9_hi_mpi_support_follows_the_soc checks that answer)")


def need_dvpp_api(api: str) -> None:
    """Skip a check of memory from ``api`` ("acldvppMalloc" or "hi_mpi_dvpp_malloc") on a SoC
    where that call is not supported (docs/runtime-model.md §3.8, §3.9)."""
    if api == "hi_mpi_dvpp_malloc":  # AllocApi is a str enum: AllocApi.HI_MPI_DVPP_MALLOC too
        need_mpi_dvpp()
    else:
        need_dvpp_memory()


def takes_fixed_addresses() -> bool:
    """Whether aclrtReserveMemAddress accepts a non-NULL expectPtr on this SoC
    (docs/runtime-model.md §4.2)."""
    return not soc_name().startswith(_NULL_EXPECT_PTR_ONLY)


def need_fixed_addresses() -> None:
    """Skip a check of the fixed-address window on a SoC that takes expectPtr NULL only."""
    if not takes_fixed_addresses():
        pytest.skip(f"{soc_name()} accepts only expectPtr NULL: there is no fixed-address "
                    "window, any expectPtr is 207000 (docs/runtime-model.md §4.2; "
                    "test_reserve_expect_ptr_returns_that_address checks that answer)")


def has_giant_pages() -> bool:
    """Whether the device has 1 GiB pages (Atlas A2 and A3 with a driver that offers them,
    docs/runtime-model.md §3.5, §3.13), as aclrtGetMemInfo(ACL_HBM_MEM_HUGE1G) reports it:
    a chip without them answers exactly 207000 (§3.12 step 4)."""
    try:
        raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE1G)
    except FeatureNotSupportError as exc:
        assert exc.code == 207000
        return False
    return True


def need_giant_pages() -> None:
    """Skip a check of 1 GiB pages on a device without them (docs/runtime-model.md §3.13)."""
    if not has_giant_pages():
        pytest.skip(f"{soc_name()} has no 1 GiB pages: aclrtGetMemInfo(ACL_HBM_MEM_HUGE1G) "
                    "answers 207000 (Atlas A2 and A3 only, docs/runtime-model.md §3.13)")


def padding_reason(what: str) -> str:
    """Why a check worked out for one padding skips: ``what``, the SoC and the release."""
    release = runtime_release()
    return (f"{what}; {soc_name()} pads {padding()} bytes on CANN {release or 'this release'} "
            "(docs/runtime-model.md §3.5)")
