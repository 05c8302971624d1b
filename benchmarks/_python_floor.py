"""The floor of a device-memory fake written in Python: what engine_bench.py's figures 1
and 2 would read for an engine that checks nothing.

``ToyDevice`` hands out addresses from a free list, keeps live buffers in a dict and
moves bytes with ctypes.memmove: no context, no lock, no size rounding, no page pools,
no copy-kind or bounds rules beyond one test, no interrupt safety. No real fake can be
faster than this in Python; the benchmark reports it next to acl_mem's figures so that
a goal can be told apart from what the language allows.
"""

from __future__ import annotations

import ctypes
from typing import Any

import _cffi_backend

_FFI = _cffi_backend.FFI()
_ADDRESS = _FFI.typeof("uintptr_t")

__all__ = ["ToyBuffer", "ToyDevice"]


class ToyBuffer:
    __slots__ = ("address", "size")

    def __init__(self, address: int, size: int) -> None:
        self.address = address
        self.size = size


class ToyDevice:
    """``malloc``/``free`` of at most ``count`` buffers of up to ``slot`` bytes each."""

    def __init__(self, slot: int, count: int) -> None:
        self._arena = (ctypes.c_char * (slot * count))()
        base = ctypes.addressof(self._arena)
        self._free = [base + i * slot for i in range(count)]
        self._slot = slot
        self._live: dict[int, ToyBuffer] = {}

    def malloc(self, size: int) -> ToyBuffer:
        if size > self._slot:
            raise ValueError("larger than a slot")
        buffer = ToyBuffer(self._free.pop(), size)
        self._live[buffer.address] = buffer
        return buffer

    def free(self, buffer: ToyBuffer) -> None:
        del self._live[buffer.address]
        self._free.append(buffer.address)

    def copy_from(self, buffer: ToyBuffer, array: Any) -> None:
        if buffer.address not in self._live or array.nbytes > buffer.size:
            raise ValueError("freed buffer or too many bytes")
        ctypes.memmove(buffer.address, _address(array), array.nbytes)

    def copy_to(self, buffer: ToyBuffer, array: Any) -> None:
        if buffer.address not in self._live or array.nbytes > buffer.size:
            raise ValueError("freed buffer or too many bytes")
        ctypes.memmove(_address(array), buffer.address, array.nbytes)


def _address(array: Any) -> int:
    # The fastest way Python has to an array's address (numpy's .ctypes.data is slower).
    return int(_FFI.cast(_ADDRESS, _FFI.from_buffer(array)))
