"""Where the fake's virtual memory lives and what backs it (spec §4).

Reservations come from the fixed-address window [16 TiB, 24 TiB) (spec §4.2), which the
host never maps. Physical memory is a range of a per-device ``memfd`` (sparse: pages
exist once written); a mapping puts that range at the reservation address's *mirror*
in [56 TiB, 64 TiB) with ``MAP_SHARED | MAP_FIXED``, so every mapping of one handle
shows the same bytes, a copy across neighbouring mappings is one ``memmove``, and
another process can open the same memfd through ``/proc/<pid>/fd``.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from .hostmem import _libc, ffi

__all__ = ["MIRROR_OFFSET", "VMM_WINDOW", "PhysicalPool", "map_mirror", "unmap_mirror"]

TiB = 1 << 40
#: The fixed-address window of aclrtReserveMemAddress (spec §4.2, §7).
VMM_WINDOW = (16 * TiB, 24 * TiB)
#: A virtual address ``va`` of the window has its host bytes at ``va + MIRROR_OFFSET``.
MIRROR_OFFSET = 40 * TiB
_PROT_RW = 0x3
_MAP_SHARED, _MAP_PRIVATE, _MAP_FIXED, _MAP_ANON, _MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000
_FALLOC_PUNCH_HOLE = 0x03  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE



def map_mirror(va: int, size: int, fd: int, offset: int) -> bool:
    """Show ``fd[offset:offset+size]`` at the mirror of ``va``; False if the host refused."""
    got: Any = _libc.mmap(ffi.cast("void *", va + MIRROR_OFFSET), size, _PROT_RW,
                          _MAP_SHARED | _MAP_FIXED, fd, offset)
    return int(ffi.cast("uintptr_t", got)) == va + MIRROR_OFFSET


def unmap_mirror(va: int, size: int) -> None:
    """Put the reserved PROT_NONE placeholder back over the mirror of ``va``."""
    _libc.mmap(ffi.cast("void *", va + MIRROR_OFFSET), size, 0,
               _MAP_PRIVATE | _MAP_FIXED | _MAP_ANON | _MAP_NORESERVE, -1, 0)


class PhysicalPool:
    """One memfd per memory location; ranges of it are physical handles."""

    def __init__(self, name: str, size: int) -> None:
        self.size = size
        self.fd = os.memfd_create(f"acl_mem_fake_{name}", 0)
        os.ftruncate(self.fd, size)
        # A discarded fake device must not keep its descriptor (mappings keep the memory).
        self._closer = weakref.finalize(self, os.close, self.fd)

    def discard(self, offset: int, size: int) -> None:
        """Return the pages of a freed range to the host."""
        _libc.fallocate(self.fd, _FALLOC_PUNCH_HOLE, offset, size)

    def close(self) -> None:
        closer = getattr(self, "_closer", None)
        if closer is not None:
            closer()
        else:
            os.close(self.fd)
