"""Virtual memory without leaks: ranges, physical memory and mappings as owning objects.

Every multi-step helper here is transactional: when a step fails, what the earlier
steps did is undone (unmap, free, release) and the original AclError is raised, so an
address range is never left half mapped (the failure users of cuda.core and
vllm-ascend's camem hit). Spec §4.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import TracebackType
from typing import Any

from . import raw
from ._hostbuf import ffi, host_span
from ._lifecycle import State, state
from ._structs import aclrtMemLocation, aclrtPhysicalMemProp
from .enums import MemAttr, MemcpyKind, MemLocationType

__all__ = ["ExpandableSegment", "MappedMemory", "Mapping", "PhysicalMemory", "VirtualRange",
           "granularity", "reserve_and_map"]


def _prop(device: int, attr: int, location: int) -> aclrtPhysicalMemProp:
    return aclrtPhysicalMemProp(memAttr=attr, location=aclrtMemLocation(
        id=device if location == MemLocationType.DEVICE else 0, type=location))


def granularity(device: int = 0, attr: int = MemAttr.HBM_MEM_HUGE,
                location: int = MemLocationType.DEVICE) -> int:
    """aclrtMemGetAllocationGranularity for this kind of memory (spec §4.5)."""
    return raw.aclrtMemGetAllocationGranularity(_prop(device, attr, location))


class _Owned:
    """Release-once ownership shared by the objects below.

    An object dropped without ``close()`` is released when collected, unless the runtime
    already took everything (aclFinalize, fake reconfigured) or this is a forked child.
    """

    _released: bool = False
    _token: tuple[int, int] | None = None
    _lifecycle: State = state

    def _release(self) -> None:
        raise NotImplementedError

    def _owned(self) -> None:
        """Call once the resource exists: from now on a forgotten object is released."""
        self._token = state.token(None)

    def close(self) -> None:
        """Release now; a second call does nothing."""
        if not self._released:
            self._released = True
            self._release()

    def __del__(self) -> None:
        if self._released or self._token is None or \
                not self._lifecycle.is_live(None, self._token):
            return
        self._released = True
        # A finalizer must never raise; what cannot be released is lost to this process.
        try:  # noqa: SIM105 - no module globals in a finalizer
            self._release()
        except Exception:
            pass

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class VirtualRange(_Owned):
    """A reservation from aclrtReserveMemAddress (spec §4.2); ``close()`` releases it."""

    def __init__(self, size: int, *, expect: int = 0, flags: int = 0) -> None:
        self.size = size
        self.base = raw.aclrtReserveMemAddress(size, 0, expect, flags)
        self._owned()

    def _release(self) -> None:
        raw.aclrtReleaseMemAddress(self.base)

    def map(self, physical: PhysicalMemory, offset: int = 0) -> Mapping:
        """Map ``physical`` whole at ``base + offset`` (spec §4.4)."""
        if offset < 0 or offset + physical.size > self.size:
            raise ValueError(f"VirtualRange.map: [{offset}, {offset + physical.size}) is "
                             f"outside the {self.size}-byte range")
        return Mapping(self.base + offset, physical, self)


class PhysicalMemory(_Owned):
    """A handle from aclrtMallocPhysical (spec §4.3); ``close()`` frees it.

    Freeing while mapped is allowed: the runtime releases the memory at the last unmap.
    """

    def __init__(self, size: int, *, device: int = 0, attr: int = MemAttr.HBM_MEM_HUGE,
                 location: int = MemLocationType.DEVICE) -> None:
        self.size = size
        self.device = device
        self.prop = _prop(device, attr, location)
        self.handle = raw.aclrtMallocPhysical(size, self.prop)
        self._owned()

    def _release(self) -> None:
        raw.aclrtFreePhysical(self.handle)


class Mapping(_Owned):
    """``physical`` mapped at ``address`` (aclrtMapMem); ``close()`` unmaps (spec §4.4)."""

    def __init__(self, address: int, physical: PhysicalMemory,
                 within: VirtualRange | None = None) -> None:
        raw.aclrtMapMem(address, physical.size, 0, physical.handle)
        # Held so that a forgotten range is released only after its mappings are gone.
        self.range = within
        self.address = address
        self.size = physical.size
        self.physical = physical
        self._owned()

    def _release(self) -> None:
        raw.aclrtUnmapMem(self.address)


class _Contents:
    """``read`` / ``write`` of mapped bytes, bounds-checked against what is mapped now."""

    @property
    def address(self) -> int:
        raise NotImplementedError

    def _mapped(self) -> int:
        raise NotImplementedError

    def write(self, data: object, offset: int = 0) -> None:
        """Copy a buffer-protocol object to ``address + offset`` (H2D)."""
        span = host_span(data, writable=False, call="write", name="data")
        self._check("write", offset, span.nbytes)
        raw.aclrtMemcpy(self.address + offset, self._mapped() - offset, span.address,
                        span.nbytes, MemcpyKind.HOST_TO_DEVICE)

    def read(self, count: int, offset: int = 0) -> bytes:
        """A bytes copy of ``count`` bytes from ``address + offset`` (D2H)."""
        self._check("read", offset, count)
        out = bytearray(count)
        if count:
            raw.aclrtMemcpy(_address(out), count, self.address + offset, count,
                            MemcpyKind.DEVICE_TO_HOST)
        return bytes(out)

    def _check(self, what: str, offset: int, count: int) -> None:
        if offset < 0 or count < 0 or offset + count > self._mapped():
            raise ValueError(f"{type(self).__name__}.{what}: [{offset}, {offset + count}) "
                             f"is outside the {self._mapped()} mapped bytes")


def _undo(steps: list[Callable[[], None]]) -> None:
    """Run cleanup steps newest first; failures here must not hide the original error."""
    for step in reversed(steps):
        # The caller re-raises the first error; a failing cleanup must not replace it.
        with contextlib.suppress(Exception):
            step()


class MappedMemory(_Owned, _Contents):
    """A range, its physical memory and the mapping, made in one call (reserve_and_map).

    ``offload()`` copies the contents to host memory and gives the physical memory back
    while keeping the addresses; ``restore()`` maps fresh physical memory at the same
    addresses and copies the contents back (the sleep / wake pattern).
    """

    def __init__(self, size: int, *, device: int = 0,
                 attr: int = MemAttr.HBM_MEM_HUGE) -> None:
        self.device, self.attr = device, attr
        self.size = -(-size // granularity(device, attr)) * granularity(device, attr)
        undo: list[Callable[[], None]] = []
        try:
            self.range = VirtualRange(self.size)
            undo.append(self.range.close)
            self._physical: PhysicalMemory | None = PhysicalMemory(self.size, device=device,
                                                                   attr=attr)
            undo.append(self._physical.close)
            self._mapping: Mapping | None = self.range.map(self._physical)
        except BaseException:
            _undo(undo)
            raise
        self._saved: bytearray | None = None
        self._owned()

    @property
    def address(self) -> int:
        return self.range.base

    @property
    def offloaded(self) -> bool:
        return self._mapping is None

    def _mapped(self) -> int:
        return 0 if self._mapping is None else self.size

    def offload(self) -> None:
        """Copy to host, unmap and free the physical memory; addresses stay reserved."""
        if self._mapping is None or self._physical is None:
            return
        saved = bytearray(self.size)
        raw.aclrtMemcpy(_address(saved), self.size, self.address, self.size,
                        MemcpyKind.DEVICE_TO_HOST)
        self._mapping.close()
        self._physical.close()
        self._mapping = self._physical = None
        self._saved = saved

    def restore(self) -> None:
        """Map fresh physical memory at the same addresses and copy the contents back."""
        if self._mapping is not None:
            return
        physical = PhysicalMemory(self.size, device=self.device, attr=self.attr)
        try:
            mapping = self.range.map(physical)
        except BaseException:
            physical.close()
            raise
        if self._saved is not None:
            try:
                raw.aclrtMemcpy(self.address, self.size, _address(self._saved), self.size,
                                MemcpyKind.HOST_TO_DEVICE)
            except BaseException:
                _undo([physical.close, mapping.close])
                raise
        self._physical, self._mapping, self._saved = physical, mapping, None

    def _release(self) -> None:
        if self._mapping is not None:
            self._mapping.close()
        if self._physical is not None:
            self._physical.close()
        self.range.close()


def reserve_and_map(size: int, *, device: int = 0,
                    attr: int = MemAttr.HBM_MEM_HUGE) -> MappedMemory:
    """Reserve, allocate and map ``size`` bytes (rounded up to the granularity) at once.

    If any step fails, the earlier ones are undone and the original error is raised.
    """
    return MappedMemory(size, device=device, attr=attr)


class ExpandableSegment(_Owned, _Contents):
    """One contiguous address range that grows and shrinks by granularity-sized chunks.

    The whole ``max_size`` is reserved up front; ``grow`` maps new chunks at the end,
    ``shrink`` unmaps and frees chunks from the end (torch_npu's expandable segments).
    A failed grow leaves the segment as it was.
    """

    def __init__(self, max_size: int, *, device: int = 0,
                 attr: int = MemAttr.HBM_MEM_HUGE) -> None:
        self.device, self.attr = device, attr
        self.chunk = granularity(device, attr)
        self.max_size = -(-max_size // self.chunk) * self.chunk
        self.range = VirtualRange(self.max_size)
        self._chunks: list[tuple[PhysicalMemory, Mapping]] = []
        self._owned()

    @property
    def address(self) -> int:
        return self.range.base

    @property
    def size(self) -> int:
        """Bytes mapped now (from ``address``)."""
        return len(self._chunks) * self.chunk

    def _mapped(self) -> int:
        return self.size

    def grow(self, size: int) -> None:
        """Map chunks until at least ``size`` bytes are mapped; all or nothing."""
        wanted = -(-size // self.chunk)
        if wanted * self.chunk > self.max_size:
            raise ValueError(f"ExpandableSegment.grow: {size} exceeds max_size {self.max_size}")
        added: list[tuple[PhysicalMemory, Mapping]] = []
        try:
            while len(self._chunks) + len(added) < wanted:
                physical = PhysicalMemory(self.chunk, device=self.device, attr=self.attr)
                try:
                    offset = (len(self._chunks) + len(added)) * self.chunk
                    added.append((physical, self.range.map(physical, offset)))
                except BaseException:
                    physical.close()
                    raise
        except BaseException:
            _undo([step for physical, mapping in added
                   for step in (physical.close, mapping.close)])
            raise
        self._chunks += added

    def shrink(self, size: int) -> None:
        """Unmap and free chunks from the end until at most ``size`` bytes stay mapped."""
        keep = -(-size // self.chunk)
        while len(self._chunks) > keep:
            physical, mapping = self._chunks[-1]
            mapping.close()  # if this raises, the chunk stays tracked
            self._chunks.pop()
            physical.close()

    def _release(self) -> None:
        self.shrink(0)
        self.range.close()


def _address(buffer: bytearray) -> int:
    return int(ffi.cast("uintptr_t", ffi.from_buffer(buffer)))
