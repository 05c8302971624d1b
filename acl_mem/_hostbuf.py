"""Addresses of host objects for the Pythonic layer (cffi, no driver involved)."""

from __future__ import annotations

import threading
from typing import Any

import cffi

__all__ = ["HostSpan", "ffi", "host_span", "vouched", "vouching"]

ffi = cffi.FFI()
# Parsed now, not on a call path: cffi parses a type string under a lock on first use.
for _name in ("uintptr_t", "char *", "void *"):
    ffi.typeof(_name)
_vouched = threading.local()


def vouching(spans: tuple[tuple[int, int], ...]) -> None:
    """This thread's next calls pass host ranges ``(address, nbytes)`` of buffer objects
    the caller holds alive; ``vouching(())`` ends it.

    The fake proves every other host range usable before touching it (a wild pointer
    must give 107000, not a crash), which costs system calls; these need no proof.
    """
    _vouched.spans = spans


def vouched(address: int, count: int) -> bool:
    """Whether ``[address, address+count)`` lies in a range this thread vouched for."""
    spans: tuple[tuple[int, int], ...] = getattr(_vouched, "spans", ())
    # A plain loop: any() over a generator costs a frame on every copy.
    for start, size in spans:  # noqa: SIM110
        if start <= address and address + count <= start + size:
            return True
    return False


class HostSpan:
    """Address and length of a buffer-protocol object, kept alive while in use."""

    __slots__ = ("address", "keepalive", "nbytes")

    def __init__(self, address: int, nbytes: int, keepalive: Any) -> None:
        self.address = address
        self.nbytes = nbytes
        self.keepalive = keepalive


def host_span(obj: object, *, writable: bool, call: str, name: str) -> HostSpan:
    """The bytes behind ``obj`` (bytes, bytearray, memoryview, numpy array ...).

    TypeError when ``obj`` has no buffer; ValueError when it is not contiguous or not
    writable where it must be written.
    """
    try:
        cdata = ffi.from_buffer(obj, require_writable=writable)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(
            f"{call}: {name} must be an acl_mem buffer or a buffer-protocol object "
            f"(bytes, bytearray, memoryview, numpy array), got {type(obj).__name__}"
        ) from None
    except BufferError:
        raise ValueError(f"{call}: {name} is read-only but is written to") from None
    except ValueError as exc:
        # numpy reports a read-only array as a ValueError too: say which it is.
        if writable and _readonly(obj):
            raise ValueError(f"{call}: {name} is read-only but is written to") from None
        raise ValueError(f"{call}: {name} must be C-contiguous ({exc})") from None
    return HostSpan(int(ffi.cast("uintptr_t", cdata)), len(cdata), cdata)


def _readonly(obj: object) -> bool:
    try:
        return memoryview(obj).readonly  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
