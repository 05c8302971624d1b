"""Where the fake's virtual memory lives and what backs it (docs/runtime-model.md §4).

Reservations come from the fixed-address window [16 TiB, 24 TiB) (docs/runtime-model.md §4.2), which
the host never maps. Physical memory is a range of a per-device ``memfd`` (sparse: pages
exist once written); a mapping puts that range at the reservation address's *mirror*
in [56 TiB, 64 TiB) with ``MAP_SHARED | MAP_FIXED``, so every mapping of one handle
shows the same bytes, a copy across neighbouring mappings is one ``memmove``, and
another process can open the same memfd through ``/proc/<pid>/fd``.

It also holds what the VMM calls and the address map share: physical handles
(:class:`Physical`), mappings, reservations and the :class:`ReservationIndex` that
finds the reservation and mapping an address falls in.
"""

from __future__ import annotations

import bisect
import os
import weakref
from dataclasses import dataclass, field
from typing import Any

from .._structs import aclrtPhysicalMemProp
from ..sizes import GIANT_PAGE, HUGE_PAGE, PageKind, TiB
from .hostmem import _libc, ffi

__all__ = ["MIRROR_OFFSET", "VMM_WINDOW", "Mapping", "Physical", "PhysicalPool", "Reservation",
           "ReservationIndex", "granularity_of", "map_mirror", "page_kind", "unmap_mirror"]

#: The fixed-address window of aclrtReserveMemAddress (docs/runtime-model.md §4.2, §7).
VMM_WINDOW = (16 * TiB, 24 * TiB)
#: A virtual address ``va`` of the window has its host bytes at ``va + MIRROR_OFFSET``.
MIRROR_OFFSET = 40 * TiB
_PROT_RW = 0x3
_MAP_SHARED, _MAP_PRIVATE, _MAP_FIXED, _MAP_ANON, _MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000
_FALLOC_PUNCH_HOLE = 0x03  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
_GIANT_ATTRS = frozenset({10, 14, 17})
#: Attributes taken from the normal-page pool; every other device attribute takes huge
#: pages (ACL_HBM_MEM_NORMAL is allocated as 2 MiB pages, docs/runtime-model.md §4.3).
_NORMAL_POOL_ATTRS = frozenset({12, 15})



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


@dataclass
class Physical:
    handle: int
    size: int
    prop: aclrtPhysicalMemProp
    device: int | None
    pool: PhysicalPool
    offset: int
    imported_from: int = 0
    mappings: int = 0
    freed: bool = False
    exported: int = 0

    @property
    def kind(self) -> PageKind:
        return page_kind(self.prop.memAttr)

    @property
    def granularity(self) -> int:
        """Size unit and mapping alignment of this memory (docs/runtime-model.md §4.4, §4.5)."""
        return granularity_of(self.prop.memAttr)


def page_kind(mem_attr: int) -> PageKind:
    """The device page pool physical memory of ``mem_attr`` comes from (docs/fidelity.md row 47)."""
    if mem_attr in _GIANT_ATTRS:
        return PageKind.GIANT
    return PageKind.NORMAL if mem_attr in _NORMAL_POOL_ATTRS else PageKind.HUGE


def granularity_of(mem_attr: int) -> int:
    return GIANT_PAGE if mem_attr in _GIANT_ATTRS else HUGE_PAGE


@dataclass(frozen=True)
class Held:
    """A virtual-memory resource the process still holds (for leaks() and the summary):
    a reservation, a physical handle not freed yet, or a mapping (which keeps its
    physical memory even after that handle was freed)."""

    api: str
    address: int
    size: int
    device: int | None
    #: Page pool of physical memory (normal, huge, giant); "-" for the others.
    pool: str = "-"


@dataclass
class Mapping:
    va: int
    size: int
    physical: Physical


@dataclass
class Reservation:
    base: int
    size: int
    span: int
    mappings: dict[int, Mapping] = field(default_factory=dict)
    #: Mapping addresses, sorted: lookups and overlap checks by bisection.
    starts: list[int] = field(default_factory=list)
    #: What the mapped handles are bound to: (device, imported?) of the first mapping.
    binding: tuple[int | None, bool] | None = None

    def mapping_at(self, address: int) -> Mapping | None:
        i = bisect.bisect_right(self.starts, address) - 1
        if i < 0:
            return None
        mapping = self.mappings.get(self.starts[i])
        return mapping if mapping is not None and address < mapping.va + mapping.size \
            else None

    def overlaps(self, va: int, size: int) -> bool:
        i = bisect.bisect_left(self.starts, va + size) - 1
        mapping = self.mappings.get(self.starts[i]) if i >= 0 else None
        return mapping is not None and mapping.va + mapping.size > va

    # add and discard are idempotent and keep the dict ahead of the sorted starts, so an
    # interrupted one is completed or undone by calling it (or the other) again.
    def add(self, mapping: Mapping) -> None:
        self.mappings[mapping.va] = mapping
        i = bisect.bisect_left(self.starts, mapping.va)
        if i == len(self.starts) or self.starts[i] != mapping.va:
            self.starts.insert(i, mapping.va)

    def discard(self, va: int) -> None:
        i = bisect.bisect_left(self.starts, va)
        if i < len(self.starts) and self.starts[i] == va:
            del self.starts[i]
        self.mappings.pop(va, None)
        if not self.mappings:
            self.binding = None


class ReservationIndex:
    """The live reservations by base address, and which one (and which mapping) holds an
    address, by bisection."""

    __slots__ = ("reservations", "starts")

    def __init__(self) -> None:
        self.reservations: dict[int, Reservation] = {}
        self.starts: list[int] = []

    def add(self, reservation: Reservation) -> None:
        self.reservations[reservation.base] = reservation
        i = bisect.bisect_left(self.starts, reservation.base)
        if i == len(self.starts) or self.starts[i] != reservation.base:
            self.starts.insert(i, reservation.base)

    def remove(self, base: int) -> None:
        """Idempotent, like :meth:`add`: an interrupted remove is finished by another."""
        i = bisect.bisect_left(self.starts, base)
        if i < len(self.starts) and self.starts[i] == base:
            del self.starts[i]
        self.reservations.pop(base, None)

    def of(self, address: int) -> Reservation | None:
        i = bisect.bisect_right(self.starts, address) - 1
        if i < 0:
            return None
        reservation = self.reservations.get(self.starts[i])
        return reservation if reservation is not None and \
            address < reservation.base + reservation.span else None

    def mapping_at(self, address: int) -> Mapping | None:
        reservation = self.of(address)
        return None if reservation is None else reservation.mapping_at(address)

    def covering(self, address: int, count: int) -> tuple[Mapping, ...] | None:
        """The mappings of ``[address, address+count)`` if it is mapped end to end."""
        mapping = self.mapping_at(address)
        if mapping is None:
            return None
        found = [mapping]
        end = address + count
        while mapping.va + mapping.size < end:
            mapping = self.mapping_at(mapping.va + mapping.size)
            if mapping is None:
                return None
            found.append(mapping)
        return tuple(found)

    def is_mapped(self, mapping: object) -> bool:
        """Whether ``mapping`` (captured by queued work) is still mapped."""
        if not isinstance(mapping, Mapping):
            return False
        reservation = self.of(mapping.va)
        return reservation is not None and reservation.mappings.get(mapping.va) is mapping

    def unmap_all_mirrors(self) -> None:
        """Put the placeholder back over every mapping's mirror (forked child)."""
        for reservation in self.reservations.values():
            for mapping in reservation.mappings.values():
                unmap_mirror(mapping.va, mapping.size)
