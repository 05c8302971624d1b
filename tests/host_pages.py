"""Host address space taken as a sanitizer takes it, for the tests (mmap through ctypes)."""

from __future__ import annotations

import ctypes

__all__ = ["reserve_address_space"]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_MAP_PRIVATE, _MAP_ANONYMOUS, _MAP_NORESERVE, _MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x4000, 0x100000


def reserve_address_space(base: int, size: int) -> bool:
    """Map ``[base, base+size)`` PROT_NONE, as a sanitizer's shadow memory would take it:
    False when something is there already."""
    flags = _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE | _MAP_FIXED_NOREPLACE
    return _libc.mmap(base, size, 0, flags, -1, 0) == base
