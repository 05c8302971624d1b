"""Raw access to host memory for the fake: addresses checked before they are touched.

The fake copies to and from host addresses it did not allocate (numpy arrays,
bytes, plain malloc memory). A wrong address must become an error code, not a
segfault, so every unregistered host range is checked with ``mincore`` first: it
fails with ENOMEM when any page of the range is unmapped. Device addresses live in
a range reserved here with PROT_NONE, so the host never maps anything there.
"""

from __future__ import annotations

import mmap
import sys
from typing import Any

import cffi

__all__ = ["HOST_PAGE", "address_of", "ffi", "host_range_mapped", "reserve_address_space"]

ffi = cffi.FFI()
ffi.cdef(
    """
    void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);
    int mincore(void *addr, size_t length, unsigned char *vec);
    """
)
_libc: Any = ffi.dlopen(None)
HOST_PAGE = mmap.PAGESIZE
_MAP_PRIVATE = 0x02
_MAP_ANONYMOUS = 0x20 if sys.platform.startswith("linux") else 0x1000
_MAP_NORESERVE = 0x4000 if sys.platform.startswith("linux") else 0
_MAP_FIXED_NOREPLACE = 0x100000 if sys.platform.startswith("linux") else 0
_PROT_NONE = 0


def address_of(buffer: Any) -> int:
    """Address of the first byte of a writable or read-only buffer object."""
    return int(ffi.cast("uintptr_t", ffi.from_buffer(buffer)))


def reserve_address_space(base: int, size: int) -> bool:
    """Map ``[base, base+size)`` PROT_NONE so no host allocation can land there.

    Returns False when the range is taken or the platform cannot pin it; the fake
    still works, only the "never a host address" guarantee is lost.
    """
    flags = _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE | _MAP_FIXED_NOREPLACE
    got = _libc.mmap(ffi.cast("void *", base), size, _PROT_NONE, flags, -1, 0)
    return int(ffi.cast("uintptr_t", got)) == base


def host_range_mapped(address: int, size: int) -> bool:
    """True when every page of ``[address, address+size)`` is mapped in this process."""
    if address <= 0 or size <= 0 or address + size > 1 << 64:
        return size == 0 and address > 0
    first = address - address % HOST_PAGE
    length = address + size - first
    pages = -(-length // HOST_PAGE)
    vec = ffi.new("unsigned char[]", pages)
    return int(_libc.mincore(ffi.cast("void *", first), length, vec)) == 0
