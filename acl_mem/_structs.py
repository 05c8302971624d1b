"""The VMM structs as small typed Python objects with the C field names (docs/runtime-model.md §2).

Re-exported by :mod:`acl_mem.raw`; both backends receive these objects (None is NULL).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._args import c_uint
from .enums import MemAccessFlags, MemAllocationType, MemAttr, MemHandleType, MemLocationType

__all__ = ["aclrtMemAccessDesc", "aclrtMemLocation", "aclrtPhysicalMemProp"]


@dataclass
class aclrtMemLocation:
    """``{ uint32_t id; aclrtMemLocationType type; }`` (id first, as in C)."""

    id: int = 0
    type: int = MemLocationType.DEVICE

    def checked(self, call: str, name: str) -> aclrtMemLocation:
        return aclrtMemLocation(c_uint(self.id, call, f"{name}.id", 32, "uint32_t"),
                                c_uint(self.type, call, f"{name}.type", 32,
                                       "aclrtMemLocationType"))


@dataclass
class aclrtPhysicalMemProp:
    """What aclrtMallocPhysical allocates (docs/runtime-model.md §4.3)."""

    handleType: int = MemHandleType.NONE
    allocationType: int = MemAllocationType.PINNED
    memAttr: int = MemAttr.HBM_MEM_HUGE
    location: aclrtMemLocation = field(default_factory=aclrtMemLocation)
    reserve: int = 0

    def checked(self, call: str, name: str = "prop") -> aclrtPhysicalMemProp:
        """A copy with every field checked against its C type (TypeError / ValueError)."""
        if not isinstance(self.location, aclrtMemLocation):
            raise TypeError(f"{call}: {name}.location must be an aclrtMemLocation, got "
                            f"{type(self.location).__name__}")
        return aclrtPhysicalMemProp(
            c_uint(self.handleType, call, f"{name}.handleType", 32, "aclrtMemHandleType"),
            c_uint(self.allocationType, call, f"{name}.allocationType", 32,
                   "aclrtMemAllocationType"),
            c_uint(self.memAttr, call, f"{name}.memAttr", 32, "aclrtMemAttr"),
            self.location.checked(call, f"{name}.location"),
            c_uint(self.reserve, call, f"{name}.reserve", 64, "uint64_t"),
        )


@dataclass
class aclrtMemAccessDesc:
    """One entry of aclrtMemSetAccess (docs/runtime-model.md §4.7)."""

    flags: int = MemAccessFlags.READWRITE
    location: aclrtMemLocation = field(default_factory=aclrtMemLocation)
    rsv: bytes = bytes(12)

    def checked(self, call: str, name: str = "desc") -> aclrtMemAccessDesc:
        if not isinstance(self.location, aclrtMemLocation):
            raise TypeError(f"{call}: {name}.location must be an aclrtMemLocation")
        if not isinstance(self.rsv, (bytes, bytearray)) or len(self.rsv) != 12:
            raise ValueError(f"{call}: {name}.rsv must be 12 bytes")
        return aclrtMemAccessDesc(
            c_uint(self.flags, call, f"{name}.flags", 32, "aclrtMemAccessFlags"),
            self.location.checked(call, f"{name}.location"), bytes(self.rsv))
