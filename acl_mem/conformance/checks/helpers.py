"""Helpers shared by the conformance checks."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import pytest

from acl_mem import raw
from acl_mem.enums import MemAttr

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
