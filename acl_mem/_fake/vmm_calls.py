"""Virtual memory of the fake backend: reservations, physical handles, mappings
(docs/runtime-model.md §4).

The VMM part of :class:`~acl_mem._fake.backend.FakeBackend`: reservations (kept in the
state's :class:`~acl_mem._fake.vmm_space.ReservationIndex`, which the address map reads
too), physical handles and their backing pools, mappings, access and cross-process
sharing (``vmm_share.py``). Unmapping asks the diagnostics part for hazards with queued
work. Every check of docs/runtime-model.md §4 runs in the order the spec lists; driver-only checks
use the runtime model's suggested codes (docs/runtime-model.md §8.2-§8.8 and §8.12, see
docs/fidelity.md).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace

from .._structs import aclrtMemAccessDesc, aclrtPhysicalMemProp
from ..enums import MemAttr, MemLocationType
from ..errors import AclError
from ..sizes import GIANT_PAGE, HUGE_PAGE, GiB, MiB, PageKind, align_up
from . import codes
from .diagnostics import Diagnostics
from .extents import ExtentAllocator
from .state import EngineState
from .vmm_share import Record, ShareRegistry, new_shareable, self_identity
from .vmm_space import (
    VMM_WINDOW,
    Held,
    Mapping,
    Physical,
    PhysicalPool,
    Reservation,
    granularity_of,
    map_mirror,
    page_kind,
    unmap_mirror,
)

__all__ = ["VmmCalls"]

MAX_RESERVATION = 128 * GiB
#: memAttr values aclrtMallocPhysical accepts (docs/runtime-model.md §4.3 step 9).
_SUPPORTED_ATTRS = frozenset({2, 3, 4, 5, 6, 7, 10, 12, 13, 14, 15, 16, 17})
_HOST_ONLY_ATTRS = frozenset({2, 3, 6, 7})
_HANDLE_BASE, _HANDLE_STEP = 0x4A00_0000_0000, 0x40
_HOST_POOL_SIZE = 1 << 40
_MAX_PIDS = 65535
#: Fresh shareable numbers an export tries before giving up (docs/fidelity.md row 55).
_SHAREABLE_TRIES = 16


class VmmCalls:
    """aclrtReserveMemAddress ... aclrtMemGetAllocationPropertiesFromHandle for the fake."""

    def __init__(self, state: EngineState, diagnostics: Diagnostics) -> None:
        self._state = state
        self._diagnostics = diagnostics
        self._va_space = ExtentAllocator(VMM_WINDOW[0], VMM_WINDOW[1] - VMM_WINDOW[0],
                                         exact=True)
        self.physicals: dict[int, Physical] = {}
        self._next_handle = _HANDLE_BASE
        self._pools: dict[int | None, PhysicalPool] = {}
        self._pool_space: dict[int | None, ExtentAllocator] = {}
        self._registry: ShareRegistry | None = None
        self._still_shared: list[Physical] = []

    def after_fork(self) -> None:
        """Forked child: the parent's mappings must not write into its shared memory, and
        none of its reservations, handles or pools are this process's (call before the
        state's own after_fork)."""
        self._state.reservations.unmap_all_mirrors()
        self._va_space = ExtentAllocator(VMM_WINDOW[0], VMM_WINDOW[1] - VMM_WINDOW[0],
                                         exact=True)
        self.physicals = {}
        self._next_handle = _HANDLE_BASE
        self._pools = {}
        self._pool_space = {}
        self._registry = None
        self._still_shared = []

    def live_vmm(self) -> list[Held]:
        """What the process holds of virtual memory now, oldest kind first: reservations,
        then physical handles not freed, then mappings."""
        with self._state.lock:
            reservations = list(self._state.reservations.reservations.values())
            physicals = [p for p in self.physicals.values() if not p.freed]
            mappings = [m for r in reservations for m in r.mappings.values()]
        held = [Held("aclrtReserveMemAddress", r.base, r.size, None) for r in reservations]
        held += [Held("aclrtMemImportFromShareableHandle" if p.imported_from
                      else "aclrtMallocPhysical", p.handle, p.size, p.device,
                      p.kind.name.lower())
                 for p in physicals]
        held += [Held("aclrtMapMem", m.va, m.size, m.physical.device) for m in mappings]
        return held

    # -- reservations (§4.2) -----------------------------------------------------------------------
    def aclrtReserveMemAddress(self, size: int, alignment: int, expectPtr: int, flags: int,
                               null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1 or size == 0 or flags not in (0, 1):
            return codes.INVALID_PARAM, 0
        if alignment != 0:
            return codes.RT_PARAM_INVALID, 0
        if size > MAX_RESERVATION:
            return codes.MEMORY_ALLOCATION, 0
        span = align_up(size, HUGE_PAGE)
        with self._state.lock:
            fault = self._state.fault("aclrtReserveMemAddress")
            if fault:
                return fault, 0
            if expectPtr:
                if not self._state.profile.dvpp and self._state.profile.padding == 0:
                    return codes.FEATURE_NOT_SUPPORT, 0  # Ascend950: only NULL (§4.2)
                if expectPtr % _fixed_alignment(size):
                    return codes.RT_PARAM_INVALID, 0
                if not VMM_WINDOW[0] <= expectPtr or expectPtr + size > VMM_WINDOW[1]:
                    return codes.MEMORY_ALLOCATION, 0
                if not self._va_space.take(expectPtr, span):
                    return codes.MEMORY_ALLOCATION, 0
                base = expectPtr
            else:
                align = GIANT_PAGE if size >= GIANT_PAGE else HUGE_PAGE
                found = self._va_space.allocate(span, align)
                if found is None:
                    return codes.MEMORY_ALLOCATION, 0
                base = found
            self._state.reservations.add(Reservation(base, size, span))
            return codes.SUCCESS, base

    def aclrtReleaseMemAddress(self, virPtr: int) -> int:
        if virPtr == 0:
            return codes.INVALID_PARAM
        with self._state.lock:
            reservations = self._state.reservations
            reservation = reservations.reservations.get(virPtr)
            if reservation is None or reservation.mappings:
                return codes.RT_PARAM_INVALID
            reservations.remove(virPtr)
            self._va_space.release(reservation.base, reservation.span)
            return codes.SUCCESS

    # -- physical memory (§4.3, §4.5) --------------------------------------------------------------
    def _check_prop(self, prop: aclrtPhysicalMemProp, *, allocating: bool = False) -> int:
        """Steps 7-9 of docs/runtime-model.md §4.3 (ACL layer) then the device id (runtime)."""
        location = prop.location.type
        if location == MemLocationType.UNREGISTERED:
            return codes.INVALID_PARAM
        if allocating and location == _MANAGED and self._state.cann.physical_rejects_managed:
            return codes.INVALID_PARAM
        if location == MemLocationType.DEVICE and prop.memAttr in _HOST_ONLY_ATTRS:
            return codes.INVALID_PARAM
        if prop.memAttr not in _SUPPORTED_ATTRS:
            return codes.INVALID_PARAM
        if location == MemLocationType.DEVICE and not self._state.runtime.valid_device(
                prop.location.id):
            return codes.INVALID_DEVICEID
        return codes.SUCCESS

    def aclrtMallocPhysical(self, size: int, prop: aclrtPhysicalMemProp | None, flags: int,
                            null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1 or prop is None or size == 0 or flags != 0:
            return codes.INVALID_PARAM, 0
        if prop.handleType != 0 or prop.allocationType != 0:
            return codes.INVALID_PARAM, 0
        rc = self._check_prop(prop, allocating=True)
        if rc:
            return rc, 0
        location = prop.location.type
        with self._state.lock:
            if location == MemLocationType.HOST_NUMA:
                rc = codes.CONTEXT_NULL if self._state.runtime.current() is None else \
                    codes.FEATURE_NOT_SUPPORT
                return rc, 0
            if location not in (MemLocationType.HOST, MemLocationType.DEVICE):
                return codes.RT_PARAM_INVALID, 0
            fault = self._state.fault("aclrtMallocPhysical")
            if fault:
                return fault, 0
            if self._still_shared:
                self._reap_shared()
            kind = page_kind(prop.memAttr)
            if kind is PageKind.GIANT and not self._state.profile.giant_pages:
                return codes.FEATURE_NOT_SUPPORT, 0
            granularity = granularity_of(prop.memAttr)
            if size % granularity:
                return codes.RT_PARAM_INVALID, 0
            device = prop.location.id if location == MemLocationType.DEVICE else None
            devices = self._state.runtime.devices
            if device is not None and not devices[device].pools.take(kind, size):
                return codes.MEMORY_ALLOCATION, 0
            offset = self._pool_space_for(device).allocate(size, granularity)
            if offset is None:
                if device is not None:
                    devices[device].pools.give_back(kind, size)
                return codes.MEMORY_ALLOCATION, 0
            stored = replace(prop, location=replace(prop.location,
                                                    id=prop.location.id if device is not None
                                                    else 0))
            return codes.SUCCESS, self._new_handle(size, stored, device, self._pool_for(device),
                                                   offset)

    def _new_handle(self, size: int, prop: aclrtPhysicalMemProp, device: int | None,
                    pool: PhysicalPool, offset: int, imported_from: int = 0) -> int:
        self._next_handle += _HANDLE_STEP
        self.physicals[self._next_handle] = Physical(self._next_handle, size, prop, device,
                                                     pool, offset, imported_from)
        return self._next_handle

    def _pool_for(self, device: int | None) -> PhysicalPool:
        if device not in self._pools:
            size = self._state.profile.capacity if device is not None else _HOST_POOL_SIZE
            self._pools[device] = PhysicalPool(f"dev{device}" if device is not None
                                               else "host", size)
        return self._pools[device]

    def _pool_space_for(self, device: int | None) -> ExtentAllocator:
        if device not in self._pool_space:
            self._pool_space[device] = ExtentAllocator(0, self._pool_for(device).size)
        return self._pool_space[device]

    def aclrtFreePhysical(self, handle: int) -> int:
        if handle == 0:
            return codes.INVALID_PARAM
        with self._state.lock:
            physical = self.physicals.get(handle)
            if physical is None or physical.freed:
                return codes.RT_PARAM_INVALID
            try:
                physical.freed = True
                self._release_unmapped(physical)
            except BaseException:
                self._release_unmapped(physical)  # an interrupt: finish, then raise
                raise
            return codes.SUCCESS

    def _release_physical(self, physical: Physical) -> None:
        del self.physicals[physical.handle]
        if physical.imported_from:
            try:
                self._share().release(physical.imported_from, self_identity(),
                                      lambda: physical.pool.discard(physical.offset,
                                                                    physical.size))
            except AclError:
                pass  # unusable share directory: the exporter sees us gone when we exit
            finally:
                physical.pool.close()
            return
        if physical.exported and not self._owner_lets_go(physical):
            # Another process still holds it: the range stays taken until the last
            # holder lets go (docs/runtime-model.md §4.3); _reap_shared() asks again.
            self._still_shared.append(physical)
            return
        physical.pool.discard(physical.offset, physical.size)
        self._return_to_pools(physical)

    def _owner_lets_go(self, physical: Physical) -> bool:
        """Whether exported memory the exporter has freed is nobody's any more."""
        try:
            return self._share().release_owner(physical.exported)
        except AclError:
            return False  # the share directory is unusable now; keep it and ask again

    def reap_shared(self) -> None:
        """Give back exported memory nobody holds any more, if there is any to ask about."""
        if self._still_shared:
            self._reap_shared()

    def _reap_shared(self) -> None:
        """Give back exported memory whose importers have freed it or died meanwhile."""
        for physical in list(self._still_shared):
            if self._owner_lets_go(physical):
                self._still_shared.remove(physical)
                # A killed importer never discarded the pages; a punched hole is cheap.
                physical.pool.discard(physical.offset, physical.size)
                self._return_to_pools(physical)

    def _return_to_pools(self, physical: Physical) -> None:
        self._pool_space_for(physical.device).release(physical.offset, physical.size)
        if physical.device is not None:
            pools = self._state.runtime.devices[physical.device].pools
            pools.give_back(physical.kind, physical.size)

    def aclrtMemGetAllocationGranularity(self, prop: aclrtPhysicalMemProp | None, option: int,
                                         null_outputs: int = 0) -> tuple[int, int]:
        if prop is None or null_outputs & 1:
            return codes.INVALID_PARAM, 0
        if not self._state.cann.granularity_all_attrs:
            # 8.5.0: three device attributes only, and the runtime takes location.id for
            # a device id whatever the location (docs/runtime-model.md §4.5).
            if prop.memAttr not in _GRANULARITY_850:
                return codes.INVALID_PARAM, 0
            if not self._state.runtime.valid_device(prop.location.id):
                return codes.INVALID_DEVICEID, 0
            return codes.SUCCESS, granularity_of(prop.memAttr)
        rc = self._check_prop(prop)
        if rc:
            return rc, 0
        return codes.SUCCESS, granularity_of(prop.memAttr)

    # -- mappings (§4.4) ---------------------------------------------------------------------------
    def aclrtMapMem(self, virPtr: int, size: int, offset: int, handle: int, flags: int) -> int:
        if virPtr == 0 or handle == 0 or size == 0 or flags != 0:
            return codes.INVALID_PARAM
        with self._state.lock:
            physical = self.physicals.get(handle)
            reservation = self._state.reservations.of(virPtr)
            if physical is None or physical.freed or offset != 0 or size != physical.size:
                return codes.RT_PARAM_INVALID
            if reservation is None or virPtr % physical.granularity or \
                    virPtr + size > reservation.base + reservation.span:
                return codes.RT_PARAM_INVALID
            if reservation.overlaps(virPtr, size):
                return codes.RT_PARAM_INVALID
            binding = (physical.device, bool(physical.imported_from))
            if reservation.binding not in (None, binding):
                return codes.RT_PARAM_INVALID  # two devices, or mixed handles (§4.4, §8.5)
            fault = self._state.fault("aclrtMapMem")
            if fault:
                return fault
            mapping = Mapping(virPtr, size, physical)
            mapped, binding_before, count_before = False, reservation.binding, physical.mappings
            try:
                mapped = map_mirror(virPtr, size, physical.pool.fd, physical.offset)
                if not mapped:
                    return codes.MEMORY_ALLOCATION
                reservation.add(mapping)
                reservation.binding = binding
                physical.mappings = count_before + 1
                return codes.SUCCESS
            except BaseException:
                # Interrupted: as if never called.
                reservation.discard(virPtr)
                reservation.binding = binding_before
                physical.mappings = count_before
                unmap_mirror(virPtr, size)
                raise

    def aclrtUnmapMem(self, virPtr: int) -> int:
        if virPtr == 0:
            return codes.INVALID_PARAM
        with self._state.lock:
            reservation = self._state.reservations.of(virPtr)
            mapping = reservation.mappings.get(virPtr) if reservation is not None else None
            if reservation is None or mapping is None:
                return codes.RT_PARAM_INVALID
            # A hazard in raise mode propagates once the unmap is done.
            with self._state.hazards.held():
                if self._state.streams.any_pending():
                    self._diagnostics.check_pending(virPtr, mapping.size, access="free",
                                       what=f"mapping {virPtr:#x} unmapped",
                                       targets=(mapping,))
                self._state.wait_for_copies(virPtr, virPtr + mapping.size)
                physical = mapping.physical
                count_after = physical.mappings - 1
                checker = self._state.checker
                try:
                    reservation.discard(virPtr)
                    unmap_mirror(virPtr, mapping.size)
                    physical.mappings = count_after
                    if checker is not None:
                        checker.forget_range(virPtr, virPtr + mapping.size)
                    self._release_unmapped(physical)
                except BaseException:
                    # Interrupted half-way: finish (every step is idempotent), then raise.
                    reservation.discard(virPtr)
                    unmap_mirror(virPtr, mapping.size)
                    physical.mappings = count_after
                    if checker is not None:
                        checker.forget_range(virPtr, virPtr + mapping.size)
                    self._release_unmapped(physical)
                    raise
            return codes.SUCCESS

    def _release_unmapped(self, physical: Physical) -> None:
        """The last unmap of freed memory releases it (once: the unmap may be finishing
        an interrupted attempt of its own)."""
        if physical.freed and physical.mappings == 0 and \
                self.physicals.get(physical.handle) is physical:
            self._release_physical(physical)

    # -- access (§4.7) -----------------------------------------------------------------------------
    def aclrtMemSetAccess(self, virPtr: int, size: int, desc: list[aclrtMemAccessDesc] | None,
                          count: int) -> int:
        if virPtr == 0 or desc is None:
            return codes.RT_PARAM_INVALID
        with self._state.lock:
            mapping = self._state.reservations.mapping_at(virPtr)
            if mapping is None or mapping.va != virPtr or mapping.size != size:
                return codes.RT_PARAM_INVALID
            for entry in desc[:count]:
                if entry.flags != 3 or entry.location.type not in (0, 1) or any(entry.rsv):
                    return codes.RT_PARAM_INVALID
                if entry.location.type == 1 and not self._state.runtime.valid_device(
                        entry.location.id):
                    return codes.INVALID_DEVICEID
            return codes.SUCCESS

    # -- sharing (§4.6) ----------------------------------------------------------------------------
    def _share(self) -> ShareRegistry:
        if self._registry is None:
            self._registry = ShareRegistry()
        return self._registry

    def aclrtMemExportToShareableHandle(self, handle: int, handleType: int, flags: int,
                                        null_outputs: int = 0) -> tuple[int, int]:
        if handle == 0 or handleType != 0 or null_outputs & 1:
            return codes.INVALID_PARAM, 0
        if flags > 1:
            return codes.RT_PARAM_INVALID, 0
        with self._state.lock:
            physical = self.physicals.get(handle)
            if physical is None or physical.freed or physical.exported or \
                    physical.imported_from or physical.device is None:
                return codes.RT_PARAM_INVALID, 0
            memfd = os.fstat(physical.pool.fd)
            record = Record(owner=self_identity(), fd=physical.pool.fd,
                            inode=(memfd.st_dev, memfd.st_ino), offset=physical.offset,
                            size=physical.size, device=physical.device, flags=flags,
                            mem_attr=physical.prop.memAttr)
            for _ in range(_SHAREABLE_TRIES):
                shareable = new_shareable()
                # Marked before the record exists, and left marked if interrupted: freeing
                # the handle then removes the record if there is one, and a record no
                # handle of ours would ever remove cannot be left behind.
                physical.exported = shareable
                try:
                    published = self._share().publish(shareable, record)
                except AclError:
                    physical.exported = 0  # refused before anything was written
                    raise
                if published:
                    return codes.SUCCESS, shareable
                physical.exported = 0
            return codes.MEMORY_ALLOCATION, 0

    def aclrtMemSetPidToShareableHandle(self, shareableHandle: int, pid: list[int] | None,
                                        pidNum: int) -> int:
        if pid is None or pidNum == 0:
            return codes.INVALID_PARAM
        if pidNum > _MAX_PIDS:
            return codes.RT_PARAM_INVALID
        return self._share().allow(shareableHandle, list(pid[:pidNum]), self_identity())

    def aclrtMemImportFromShareableHandle(self, shareableHandle: int, deviceId: int,
                                          null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        if not self._state.runtime.valid_device(deviceId):
            return codes.INVALID_DEVICEID, 0
        me = self_identity()
        fd = -1
        with self._state.lock:
            try:
                rc, fd, record = self._share().acquire(shareableHandle, me)
                if rc or record is None:
                    return rc, 0
                pool = PhysicalPool.__new__(PhysicalPool)
                pool.fd, pool.size = fd, record.offset + record.size
                prop = aclrtPhysicalMemProp(memAttr=record.mem_attr)
                prop.location.id = deviceId
                return codes.SUCCESS, self._new_handle(record.size, prop, deviceId, pool,
                                                       record.offset, shareableHandle)
            except AclError:
                raise  # refused: nothing was taken
            except BaseException:
                # Interrupted: whatever line it hit, this process must hold exactly the
                # imports that became handles.
                mine = [p for p in self.physicals.values()
                        if p.imported_from == shareableHandle]
                if fd >= 0 and all(p.pool.fd != fd for p in mine):
                    os.close(fd)
                with contextlib.suppress(Exception):
                    self._share().forget(shareableHandle, me, keep=len(mine))
                raise

    # -- handles (§4) ------------------------------------------------------------------------------
    def aclrtMemRetainAllocationHandle(self, virPtr: int,
                                       null_outputs: int = 0) -> tuple[int, int]:
        if virPtr == 0 or (null_outputs & 1 and self._state.cann.retain_checks_output):
            return codes.INVALID_PARAM, 0
        with self._state.lock:
            mapping = self._state.reservations.mapping_at(virPtr)
            if mapping is None or null_outputs & 1:  # 8.5.0, NULL output: fidelity row 67
                return codes.RT_PARAM_INVALID, 0
            return codes.SUCCESS, mapping.physical.handle

    def aclrtMemGetAllocationPropertiesFromHandle(
        self, handle: int, null_outputs: int = 0
    ) -> tuple[int, aclrtPhysicalMemProp | None]:
        v2 = self._state.cann.properties_v2
        if handle == 0 or (null_outputs & 1 and v2):
            return codes.INVALID_PARAM, None
        with self._state.lock:
            physical = self.physicals.get(handle)
            if physical is None or null_outputs & 1:  # 8.5.0, NULL prop: fidelity row 67
                return codes.RT_PARAM_INVALID, None
            prop = physical.prop
            if not v2 and (prop.location.type != MemLocationType.DEVICE
                           or prop.memAttr not in _HBM_ATTRS):
                return codes.INVALID_PARAM, None  # 8.5.0 reports device HBM memory only
            return codes.SUCCESS, replace(prop, location=replace(prop.location))


#: aclrtMemLocationType MANAGED (3), named by the header only from 9.1.0.
_MANAGED = 3
#: The attributes 8.5.0's aclrtMemGetAllocationGranularity accepts.
_GRANULARITY_850 = frozenset({MemAttr.HBM_MEM_HUGE, MemAttr.HBM_MEM_NORMAL,
                              MemAttr.HBM_MEM_HUGE1G})
#: Device memory 8.5.0's aclrtMemGetAllocationPropertiesFromHandle can describe.
_HBM_ATTRS = frozenset({MemAttr.HBM_MEM_HUGE, MemAttr.HBM_MEM_NORMAL, MemAttr.HBM_MEM_HUGE1G,
                        MemAttr.MEM_NORMAL, MemAttr.MEM_HUGE, MemAttr.MEM_HUGE1G})


def _fixed_alignment(size: int) -> int:
    """Alignment a fixed reservation address needs (docs/runtime-model.md §4.2)."""
    if size > 512 * MiB:
        return GIANT_PAGE
    return max(HUGE_PAGE, 1 << (size - 1).bit_length())
