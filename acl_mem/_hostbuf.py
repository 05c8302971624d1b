"""Addresses of host objects for the Pythonic layer (cffi, no driver involved)."""

from __future__ import annotations

from typing import Any

import cffi

__all__ = ["HostSpan", "ffi", "host_span"]

ffi = cffi.FFI()


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
        raise ValueError(f"{call}: {name} must be C-contiguous ({exc})") from None
    return HostSpan(int(ffi.cast("uintptr_t", cdata)), len(ffi.buffer(cdata)), cdata)
