"""Helpers shared by the conformance checks."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import pytest

from acl_mem import raw
from acl_mem.enums import MemAttr
from acl_mem.errors import AclError

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
