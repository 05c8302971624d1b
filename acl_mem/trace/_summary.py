"""Summarising a trace: the memory in use and reserved per device and page pool over the
run, its peaks, what was live at the peak, what was never freed, and the calls that failed.

*Reserved* is runtime memory held: an allocation's bytes after the ACL layer's padding
and the driver's rounding to whole pages (acl_mem.sizes, with the SoC and release of the
trace's header), and physical memory from aclrtMallocPhysical. *In use* is what the
program asked for: an allocation's requested bytes, a pool segment's requested bytes
(the pool's own blocks count as reserved only), mapped virtual memory outside pools.
Page pools: ``normal`` (4 KiB pages), ``huge`` (2 MiB), ``giant`` (1 GiB) on a device,
``pinned`` for page-locked host memory (device ``host``). An allocation is counted in the
first pool its policy tries (a HUGE_FIRST fallback to normal pages is not visible in a
trace).
"""


from __future__ import annotations

import bisect
import os
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..enums import MallocPolicy
from ..sizes import (
    GIANT_PAGE,
    HUGE_PAGE,
    NORMAL_PAGE,
    AllocApi,
    align_up,
    allocation_size,
    effective_policy,
    page_kinds,
)
from ._figures import (
    HOST,
    UNKNOWN,
    Allocation,
    DeviceFigures,
    FailedCalls,
    PoolFigures,
    TraceSummary,
)
from ._format import Trace, call_label, read_trace

__all__ = ["summarize", "summarize_trace"]

_POOL_OF_PAGE = {NORMAL_PAGE: "normal", HUGE_PAGE: "huge", GIANT_PAGE: "giant"}
#: aclrtMallocPhysical: memAttr values served from 1 GiB pages, and from the normal-page
#: pool; every other device attribute takes 2 MiB pages (docs/runtime-model.md §4.3).
_GIANT_ATTRS = frozenset({10, 14, 17})
_NORMAL_ATTRS = frozenset({12, 15})
_BLOCK_CALLS = frozenset({"aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached",
                          "acldvppMalloc", "hi_mpi_dvpp_malloc", "aclrtMallocHost"})
_FREE_CALLS = frozenset({"aclrtFree", "aclrtFreeHost", "acldvppFree", "hi_mpi_dvpp_free"})
#: Exceptions the fake raises after the call took effect (its hazard and checker modes).
_AFTER_EFFECT = frozenset({"HazardError", "MemoryCheckError"})


#: (call, policy) -> the call's AllocApi and the policy the runtime uses: enum lookups
#: cost more than the arithmetic, and a trace repeats few pairs.
_POLICIES: dict[tuple[str, int], tuple[AllocApi, MallocPolicy]] = {}


def _block_pool(call: str, size: int, policy: int, padding: int) -> tuple[str, int]:
    """The page pool and the reserved bytes of a block (docs/runtime-model.md §3.5,
    §3.7-§3.9)."""
    known = _POLICIES.get((call, policy))
    if known is None:
        api = AllocApi(call)
        known = _POLICIES[(call, policy)] = (api, effective_policy(api, policy))
    api, effective = known
    if api is AllocApi.MALLOC_HOST:
        return "pinned", align_up(align_up(size, 32), NORMAL_PAGE)
    padded = allocation_size(api, size, policy, padding=padding)
    kind = int(page_kinds(padded, effective)[0])
    return _POOL_OF_PAGE[kind], align_up(padded, kind)


def _physical_pool(prop: object) -> tuple[str | None, str]:
    """Device and page pool of aclrtMallocPhysical's ``prop`` (None: not given)."""
    if not isinstance(prop, Mapping):
        return None, UNKNOWN
    location = prop.get("location") or {}
    attr = prop.get("memAttr")
    if location.get("type") == 0:  # ACL_MEM_LOCATION_TYPE_HOST
        return HOST, "pinned"
    pool = "giant" if attr in _GIANT_ATTRS else "normal" if attr in _NORMAL_ATTRS else "huge"
    return str(location.get("id", UNKNOWN)), pool


class _Model:
    """The trace replayed in memory: live allocations and the running figures."""

    def __init__(self, trace: Trace, parents: set[int] | None) -> None:
        self.trace = trace
        header = trace.header
        padding = header.get("padding")
        self.padding = int(padding) if isinstance(padding, int) else 32
        #: Indexes of allocations that are pool blocks (known from a first pass).
        self.parents = parents
        self.found_parents: set[int] = set()
        self.allocations: list[Allocation] = []
        self.blocks: dict[int, Allocation] = {}
        self.segments: dict[int, Allocation] = {}
        #: Live segments by their parent's address.
        self.children: dict[int, set[int]] = {}
        self.physical: dict[int, Allocation] = {}
        self.reservations: dict[int, Allocation] = {}
        self.mappings: dict[int, Allocation] = {}
        #: Sorted starts of the live reservations and mappings, for "which one holds ptr".
        self.reservation_starts: list[int] = []
        self.mapping_starts: list[int] = []
        self.streams: dict[int, str] = {}
        self.devices: dict[str, DeviceFigures] = {}
        self.references: Counter[str] = Counter(
            {str(d): int(n) for d, n in (header.get("set_counts") or {}).items()})
        self.contexts: dict[int, str] = {}
        self.thread_device: dict[int, str] = {}
        start = header.get("current_device")
        self.first_thread_device = None if start is None else str(start)
        self.failed: dict[tuple[str, int | None, str | None], FailedCalls] = {}
        self.unknown_frees = 0
        self.by_call: Counter[str] = Counter()
        self.malformed = 0

    # -- figures -----------------------------------------------------------------------------------
    def _figures(self, device: str) -> DeviceFigures:
        figures = self.devices.get(device)
        if figures is None:
            figures = self.devices[device] = DeviceFigures(device)
        return figures

    def _count(self, a: Allocation, sign: int, t: int, index: int) -> None:
        if not (a.in_use or a.reserved):
            return
        figures = self._figures(a.device)
        pool = figures.pools.get(a.pool)
        if pool is None:
            pool = figures.pools[a.pool] = PoolFigures()
        pool.add(sign * a.in_use, sign * a.reserved, t, index)
        figures.total.add(sign * a.in_use, sign * a.reserved, t, index)

    def _open(self, a: Allocation, t: int) -> None:
        self.allocations.append(a)
        self._count(a, 1, t, a.index)

    def _close(self, a: Allocation, how: str, t: int, index: int) -> None:
        if a.freed_by is not None:
            return
        a.freed_by, a.freed_index, a.freed_t = how, index, t
        self._count(a, -1, t, index)
        if a.kind == "segment" and a.parent is not None:
            siblings = self.children.get(a.parent)
            if siblings is not None:
                siblings.discard(a.address)
                if not siblings:
                    del self.children[a.parent]
        elif a.kind in ("block", "reservation"):
            for ptr in sorted(self.children.pop(a.address, ())):
                segment = self.segments.pop(ptr, None)
                if segment is not None:
                    self._close(segment, "parent", t, index)

    # -- the replay --------------------------------------------------------------------------------
    def run(self) -> None:
        for index, event in enumerate(self.trace.events):
            if "call" in event:
                self._call(index, event)
            elif event.get("type") == "backend":
                self._release_everything("backend", int(event.get("t", 0)), index,
                                         include_host=True)

    def _device_of(self, event: Mapping[str, Any]) -> str:
        dev = event.get("dev")
        if dev is not None:
            return str(dev)
        th = int(event.get("th", 0))
        known = self.thread_device.get(th)
        if known is not None:
            return known
        return UNKNOWN

    def _stack(self, event: Mapping[str, Any]) -> list[tuple[str, int, str]]:
        number = event.get("stack")
        if number is None:
            return []
        # The trace's own list, shared by every allocation made there: not a copy each.
        return self.trace.stacks.get(int(number), [])

    def _failed(self, event: Mapping[str, Any], rc: int | None, raised: str | None) -> None:
        key = (str(event["call"]), rc, raised)
        entry = self.failed.get(key)
        if entry is None:
            self.failed[key] = FailedCalls(key[0], rc, raised, 1, int(event.get("t", 0)),
                                           call_label(event), self._stack(event))
        else:
            entry.count += 1

    def _call(self, index: int, event: dict[str, Any]) -> None:
        call = str(event["call"])
        self.by_call[call] += 1
        t = int(event.get("t", 0))
        raised = event.get("raised")
        rc = event.get("rc")
        if raised is not None or (rc is not None and rc != 0):
            self._failed(event, None if raised is not None or rc is None else int(rc), raised)
            if raised not in _AFTER_EFFECT:
                return
        handler = _HANDLERS.get(call)
        if handler is not None:
            try:
                handler(self, index, t, event)
            except (KeyError, TypeError, ValueError):
                # A field missing or of the wrong type (a damaged or hand-edited line):
                # counted with the unreadable lines, the rest of the trace still counts.
                self.malformed += 1

    def _new(self, kind: str, event: Mapping[str, Any], index: int, t: int, *, address: int,
             size: int, device: str, pool: str, reserved: int, in_use: int,
             parent: int | None = None) -> Allocation:
        return Allocation(kind, str(event["call"]), address, size, device, pool, reserved,
                          in_use, t, int(event.get("th", 0)), self._stack(event), parent,
                          index)

    # blocks
    def _malloc(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        ptr = e.get("ptr")
        if not ptr:
            return
        call = str(e["call"])
        size = int(e.get("size", 0))
        pool, reserved = _block_pool(call, size, int(e.get("policy", 0)), self.padding)
        device = HOST if call == "aclrtMallocHost" else self._device_of(e)
        if device == UNKNOWN and call == "hi_mpi_dvpp_malloc" and "device_id" in e:
            device = str(e["device_id"])
        kind = "host" if device == HOST else "block"
        stale = self.blocks.pop(ptr, None)
        if stale is not None:  # its free was not recorded: it cannot still be live
            self._close(stale, "free", t, index)
        parent = self.parents is not None and index in self.parents
        a = self._new(kind, e, index, t, address=ptr, size=size, device=device, pool=pool,
                      reserved=reserved, in_use=0 if parent else size)
        self.blocks[ptr] = a
        self._open(a, t)

    def _free(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        a = self.blocks.pop(int(e.get("ptr", 0)), None)
        if a is None:
            self.unknown_frees += 1
            return
        self._close(a, "free", t, index)

    # pool segments
    def _segment(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        parent_address = int(e.get("parent", 0))
        ptr = int(e.get("ptr", 0))
        parent = self.blocks.get(parent_address) or self.reservations.get(parent_address)
        if parent is not None:
            self.found_parents.add(parent.index)
            device, pool = parent.device, parent.pool
            if parent.kind == "reservation":
                mapping = self._mapping_at(ptr)
                if mapping is not None:
                    device, pool = mapping.device, mapping.pool
        else:
            device, pool = self._device_of(e), UNKNOWN
        size = int(e.get("size", 0))
        a = self._new("segment", e, index, t, address=ptr, size=size, device=device,
                      pool=pool, reserved=0, in_use=size, parent=parent_address)
        stale = self.segments.pop(ptr, None)
        if stale is not None:
            self._close(stale, "free", t, index)
        self.segments[ptr] = a
        self.children.setdefault(parent_address, set()).add(ptr)
        self._open(a, t)

    def _segment_freed(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        a = self.segments.pop(int(e.get("ptr", 0)), None)
        if a is not None:
            self._close(a, "free", t, index)

    # virtual memory
    def _reserve(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        ptr = int(e.get("ptr", 0))
        a = self._new("reservation", e, index, t, address=ptr, size=int(e.get("size", 0)),
                      device="-", pool="-", reserved=0, in_use=0)
        if ptr in self.reservations:
            self._drop_reservation(ptr, "free", t, index)
        self.reservations[ptr] = a
        bisect.insort(self.reservation_starts, ptr)
        self.allocations.append(a)

    def _drop_reservation(self, ptr: int, how: str, t: int, index: int) -> None:
        a = self.reservations.pop(ptr)
        del self.reservation_starts[bisect.bisect_left(self.reservation_starts, ptr)]
        self._close(a, how, t, index)

    def _release(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        ptr = int(e.get("ptr", 0))
        if ptr not in self.reservations:
            self.unknown_frees += 1
        else:
            self._drop_reservation(ptr, "free", t, index)

    def _physical_new(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        handle = int(e.get("handle", 0))
        device, pool = _physical_pool(e.get("prop"))
        size = int(e.get("size", 0))
        a = self._new("physical", e, index, t, address=handle, size=size,
                      device=device or self._device_of(e), pool=pool, reserved=size, in_use=0)
        stale = self.physical.pop(handle, None)
        if stale is not None:  # its free was not recorded: it cannot still be live
            self._close(stale, "free", t, index)
        self.physical[handle] = a
        self._open(a, t)

    def _physical_free(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        # aclrtMemRetainAllocationHandle takes no extra reference (docs/runtime-model.md
        # §4): one aclrtFreePhysical ends the handle.
        a = self.physical.pop(int(e.get("handle", 0)), None)
        if a is None:
            self.unknown_frees += 1
        else:
            self._close(a, "free", t, index)

    @staticmethod
    def _holding(starts: list[int], table: dict[int, Allocation], ptr: int
                 ) -> Allocation | None:
        at = bisect.bisect_right(starts, ptr) - 1
        if at < 0:
            return None
        a = table[starts[at]]
        return a if ptr < a.address + a.size else None

    def _reservation_at(self, ptr: int) -> Allocation | None:
        return self._holding(self.reservation_starts, self.reservations, ptr)

    def _mapping_at(self, ptr: int) -> Allocation | None:
        return self._holding(self.mapping_starts, self.mappings, ptr)

    def _map(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        ptr, size = int(e.get("ptr", 0)), int(e.get("size", 0))
        handle = int(e.get("handle", 0))
        physical = self.physical.get(handle)
        device = physical.device if physical else UNKNOWN
        pool = physical.pool if physical else UNKNOWN
        reservation = self._reservation_at(ptr)
        in_pool = reservation is not None and self.parents is not None and \
            reservation.index in self.parents
        a = self._new("mapping", e, index, t, address=ptr, size=size, device=device,
                      pool=pool, reserved=0, in_use=0 if in_pool else size, parent=handle)
        if ptr in self.mappings:
            self._drop_mapping(ptr, "free", t, index)
        self.mappings[ptr] = a
        bisect.insort(self.mapping_starts, ptr)
        self._open(a, t)

    def _drop_mapping(self, ptr: int, how: str, t: int, index: int) -> None:
        a = self.mappings.pop(ptr)
        del self.mapping_starts[bisect.bisect_left(self.mapping_starts, ptr)]
        self._close(a, how, t, index)

    def _unmap(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        ptr = int(e.get("ptr", 0))
        if ptr not in self.mappings:
            self.unknown_frees += 1
        else:
            self._drop_mapping(ptr, "free", t, index)

    # streams
    def _stream(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        self.streams[int(e.get("stream", 0))] = self._device_of(e)

    def _stream_destroyed(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        self.streams.pop(int(e.get("stream", 0)), None)

    # devices and contexts
    def _set_device(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        device = str(e.get("device"))
        self.references[device] += 1
        self.thread_device[int(e.get("th", 0))] = device

    def _reset_device(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        device = str(e.get("device"))
        self.references[device] -= 1
        if self.references[device] <= 0:
            del self.references[device]
            self._release_device(device, "reset", t, index)

    def _reset_device_force(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        """Every reference of aclrtSetDevice goes; created contexts still hold the device."""
        device = str(e.get("device"))
        held = sum(1 for owner in self.contexts.values() if owner == device)
        self.references[device] = held + 1
        self._reset_device(index, t, e)

    def _context(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        device = str(e.get("device"))
        self.contexts[int(e.get("context", 0))] = device
        self.references[device] += 1
        self.thread_device[int(e.get("th", 0))] = device

    def _context_set(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        device = self.contexts.get(int(e.get("context", 0)))
        if device is not None:
            self.thread_device[int(e.get("th", 0))] = device

    def _context_destroyed(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        device = self.contexts.pop(int(e.get("context", 0)), None)
        if device is not None:
            self._reset_device(index, t, {"device": device})

    def _finalize(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        self._release_everything("finalize", t, index, include_host=False)
        self.references.clear()
        self.contexts.clear()

    def _release_device(self, device: str, how: str, t: int, index: int) -> None:
        """The runtime released the device: its blocks, their segments, its streams."""
        for a in [b for b in self.blocks.values() if b.device == device and b.kind == "block"]:
            del self.blocks[a.address]
            self._close(a, how, t, index)
        for handle in [h for h, d in self.streams.items() if d == device]:
            del self.streams[handle]

    def _release_everything(self, how: str, t: int, index: int, *, include_host: bool) -> None:
        for device in {b.device for b in self.blocks.values() if b.kind == "block"}:
            self._release_device(device, how, t, index)
        self.streams.clear()
        if include_host:
            for table in (self.blocks, self.segments, self.mappings, self.physical,
                          self.reservations):
                for a in list(table.values()):
                    self._close(a, how, t, index)
                table.clear()
            self.children.clear()
            self.reservation_starts.clear()
            self.mapping_starts.clear()

    def _mem_info(self, index: int, t: int, e: Mapping[str, Any]) -> None:
        device = self._device_of(e)
        if "total" in e and "attr" in e:
            self._figures(device).capacity[int(e["attr"])] = int(e["total"])


_HANDLERS: dict[str, Any] = {
    **{name: _Model._malloc for name in _BLOCK_CALLS},
    **{name: _Model._free for name in _FREE_CALLS},
    "pool.segment_allocated": _Model._segment,
    "pool.segment_freed": _Model._segment_freed,
    "aclrtReserveMemAddress": _Model._reserve,
    "aclrtReleaseMemAddress": _Model._release,
    "aclrtMallocPhysical": _Model._physical_new,
    "aclrtFreePhysical": _Model._physical_free,
    "aclrtMapMem": _Model._map,
    "aclrtUnmapMem": _Model._unmap,
    "aclrtCreateStream": _Model._stream,
    "aclrtDestroyStream": _Model._stream_destroyed,
    "aclrtDestroyStreamForce": _Model._stream_destroyed,
    "aclrtSetDevice": _Model._set_device,
    "aclrtResetDevice": _Model._reset_device,
    "aclrtResetDeviceForce": _Model._reset_device_force,
    "aclrtCreateContext": _Model._context,
    "aclrtSetCurrentContext": _Model._context_set,
    "aclrtDestroyContext": _Model._context_destroyed,
    "aclFinalize": _Model._finalize,
    "aclrtGetMemInfo": _Model._mem_info,
}


def summarize_trace(trace: Trace, *, top: int = 10) -> TraceSummary:
    """The summary of a trace already read (:func:`acl_mem.trace.read_trace`)."""
    # First pass: which blocks and reservations pools carved segments from; their bytes
    # count as reserved, their segments' as in use, from the start.
    parents: set[int] = set()
    if any(e.get("call") == "pool.segment_allocated" for e in trace.events):
        first = _Model(trace, None)
        first.run()
        parents = first.found_parents
    model = _Model(trace, parents)
    model.run()
    for figures in model.devices.values():
        peak = figures.total.peak_in_use_index
        live = [a for a in model.allocations
                if a.device == figures.device and a.in_use > 0 and a.index <= peak
                and (a.freed_index is None or a.freed_index > peak)]
        live.sort(key=lambda a: (-a.in_use, a.index))
        figures.largest_at_peak = live[:top]
    never = [a for a in model.allocations if a.freed_by is None]
    threads = {int(e.get("th", 0)) for e in trace.events if "call" in e}
    times = [int(e.get("t", 0)) for e in trace.events]
    lost = int((trace.end or {}).get("lost", 0))
    return TraceSummary(
        path=trace.path, header=trace.header, calls=sum(model.by_call.values()),
        duration=max(times, default=0), threads=len(threads),
        by_call=dict(model.by_call.most_common()),
        devices=dict(sorted(model.devices.items(), key=lambda kv: _device_order(kv[0]))),
        never_freed=never,
        failed=sorted(model.failed.values(), key=lambda f: f.first_t),
        streams_left=len(model.streams), unknown_frees=model.unknown_frees,
        complete=trace.end is not None, lost=lost, bad_lines=trace.bad_lines + model.malformed,
        live=never, allocations=model.allocations,
    )


def summarize(path: str | os.PathLike[str], *, top: int = 10) -> TraceSummary:
    """Read the trace file at ``path`` and summarise it (what ``acl-mem trace summary``
    prints); ``top`` is how many of the largest allocations live at each peak to list."""
    return summarize_trace(read_trace(path), top=top)


def _device_order(device: str) -> tuple[int, int, str]:
    if device.isdigit():
        return (0, int(device), "")
    return (1 if device == HOST else 2, 0, device)
