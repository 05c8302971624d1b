"""Device and host memory of the fake backend (docs/runtime-model.md §3.5-§3.9, §3.12, §4.8, §4.9).

The device-memory part of :class:`~acl_mem._fake.backend.FakeBackend`: the aclrtMalloc
family and aclrtFree, DVPP memory, pinned host memory (aclrtMallocHost, aclrtFreeHost)
and the memory queries. Blocks come from the devices of the state's runtime and the
pinned host index; the diagnostics part hears of every allocation (checker) and checks
frees against queued stream work; the VMM part is asked to give back shared physical
memory before the free figures are read.
"""

from __future__ import annotations

import contextlib
import mmap
import operator

from ..enums import MallocPolicy, MemAttr, MemLocationType
from ..errors import FunctionNotAvailableError
from ..sizes import (
    HUGE_FIRST_THRESHOLD,
    SIZE_T_MAX,
    AllocApi,
    PageKind,
    align_up,
    effective_policy,
    page_kinds,
)
from . import codes
from .addresses import DEVICE_SPACE_END, AddressMap
from .checker import QUARANTINE_ENTRIES
from .device import DEVICE_SLOT, DEVICE_SPACE_BASE, FakeDevice
from .diagnostics import Diagnostics
from .extents import Block
from .hostmem import HOST_PAGE, address_of
from .state import EngineState
from .vmm_calls import VmmCalls
from .vmm_space import VMM_WINDOW

__all__ = ["DeviceMemory", "Plan"]

_P2P = frozenset({3, 4, 5, 7})
_GIANT = frozenset({MallocPolicy.HUGE1G_ONLY, MallocPolicy.HUGE1G_ONLY_P2P})
_DDR_ATTRS = frozenset({0, 2, 3, 6, 7})
_BOTH_POOLS = frozenset({MemAttr.DDR_MEM, MemAttr.HBM_MEM})
_HUGE_ATTRS = frozenset({2, 4, 6, 8, 13, 16})
_GIANT_ATTRS = frozenset({10, 11, 14, 17})
#: Calls whose memory aclrtFree accepts.
_MALLOC_FAMILY = frozenset(
    {AllocApi.MALLOC.value, AllocApi.MALLOC_ALIGN32.value, AllocApi.MALLOC_CACHED.value}
)

#: Freed pinned blocks kept mapped (emptied) before they are unmapped: each is one kernel
#: mapping, so a bound well under vm.max_map_count.
PINNED_QUARANTINE = QUARANTINE_ENTRIES
#: And at most this much address space besides the newest one: emptied pages use no RAM,
#: but their address space counts against `ulimit -v` and a strict overcommit limit.
PINNED_QUARANTINE_BYTES = 256 << 20


#: A quarantine entry's block, and a block's mapped bytes (its mapping's length).
_BLOCK = operator.itemgetter(0)
_EXTENT = operator.attrgetter("extent")


class DeviceMemory:
    """aclrtMalloc ... aclrtPointerGetAttributes for the fake."""

    def __init__(self, state: EngineState, addresses: AddressMap, diagnostics: Diagnostics,
                 vmm: VmmCalls) -> None:
        self._state = state
        self._addresses = addresses
        self._diagnostics = diagnostics
        self._vmm = vmm
        #: Allocation arithmetic by (api, policy), computed on first use.
        self.plans: dict[tuple[str, int], Plan] = {}

    # -- device allocation (§3.5, §3.6) ------------------------------------------------------------
    def _plan(self, call: str, policy: int) -> Plan:
        """What ``call(size, policy)`` needs beyond the size, computed once per pair."""
        plan = self.plans.get((call, policy))
        if plan is None:
            api = AllocApi(call)
            chosen = effective_policy(api, policy)
            cann = self._state.cann
            # Before 9.1.0 the padding is a fixed 32 whatever the SoC, and the overflow
            # check adds 64 before the padding is chosen (docs/runtime-model.md §3.5).
            pad = 0 if api is AllocApi.MALLOC_ALIGN32 or policy in _GIANT else \
                self._state.profile.padding if cann.soc_padding else 32
            unsupported = 0
            if chosen in _GIANT and not self._state.profile.giant_pages:
                unsupported = codes.FEATURE_NOT_SUPPORT
            if chosen in _P2P and not self._state.profile.p2p_policies:
                unsupported = codes.FEATURE_NOT_SUPPORT
            rounding = 31 if api is AllocApi.MALLOC_ALIGN32 else 31 + pad
            # Plain ints: page sizes are dict keys on the hot path (an enum hashes slowly).
            small = tuple(int(kind) for kind in page_kinds(1, chosen))
            large = tuple(int(kind) for kind in page_kinds(HUGE_FIRST_THRESHOLD + 1, chosen))
            overhead = 32 + pad if cann.soc_padding else 64
            plan = Plan(call, overhead, rounding, unsupported, small, large)
            self.plans[(call, policy)] = plan
        return plan

    def aclrtMalloc(self, size: int, policy: int, null_outputs: int = 0,
                    call: str = AllocApi.MALLOC.value) -> tuple[int, int]:
        """aclrtMalloc itself (the hot path: no extra call); the other two calls of the
        family pass their name as ``call``."""
        if null_outputs & 1 or size == 0:
            return codes.INVALID_PARAM, 0
        plan = self.plans.get((call, policy)) or self._plan(call, policy)
        # The ACL layer computes size + 32 + pad first and rejects a wrap (docs/runtime-model.md
        # §3.5 step 3).
        if size + plan.overhead > SIZE_T_MAX:
            return codes.INVALID_PARAM, 0
        state = self._state
        with state.lock:
            runtime = state.runtime
            # runtime.current() spelled out: one thread-local lookup, no call.
            context = getattr(runtime._local, "cur", None)
            if context is None or not context.alive:
                return codes.CONTEXT_NULL, 0
            device = runtime.devices[context.device]
            if state.faults:
                fault = state.fault(call)
                if fault:
                    return fault, 0
            if plan.unsupported:
                return plan.unsupported, 0
            padded = (size + plan.rounding) // 32 * 32
            block = device.allocate(plan.api, padded,
                                    plan.large if padded > HUGE_FIRST_THRESHOLD else plan.small,
                                    requested=size)
            if block is None:
                return codes.MEMORY_ALLOCATION, 0
            try:
                if state.checker is not None:
                    self._diagnostics.allocated(block)
                return codes.SUCCESS, block.start
            except BaseException:
                device.release(block)
                raise

    def aclrtMallocAlign32(
        self, size: int, policy: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        return self.aclrtMalloc(size, policy, null_outputs, _MALLOC_ALIGN32)

    def aclrtMallocCached(
        self, size: int, policy: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        return self.aclrtMalloc(size, policy, null_outputs, _MALLOC_CACHED)

    def aclrtFree(self, devPtr: int, apis: frozenset[str] = _MALLOC_FAMILY) -> int:
        """aclrtFree itself; the DVPP frees pass the calls whose memory they accept."""
        ptr = devPtr
        if ptr == 0:
            return codes.INVALID_PARAM
        state = self._state
        with state.lock:
            index = (ptr - DEVICE_SPACE_BASE) // DEVICE_SLOT
            devices = state.runtime.devices
            if not 0 <= index < len(devices):
                return codes.RT_PARAM_INVALID
            device = devices[index]
            block = device.blocks.by_start.get(ptr)  # blocks.at(ptr), without the call
            if block is None or block.api not in apis:
                return codes.RT_PARAM_INVALID
            if state.queued and state.streams.pending.has(block):
                # Hazards raise after the free is done (raise mode completes, then raises).
                with state.hazards.held():
                    self._diagnostics.check_pending(block.start, block.extent, access="free",
                                                    what=f"{block.api} block {block.start:#x} "
                                                    "freed", targets=(block,))
                    self._release_block(device, block)
            elif state.checker is not None:
                self._release_block(device, block)
            else:
                device.release(block)
            return codes.SUCCESS

    def _release_block(self, device: FakeDevice, block: Block) -> None:
        checker = self._state.checker
        if checker is None:
            device.release(block)
            return
        with checker.held():  # a damaged canary raises once the block is freed
            checker.verify_block(block, self._addresses.host_of(block), "free")
            checker.drop_segments_of(block)
            device.release(block, keep_address=True)
            checker.quarantine.append((device, block.start, block.extent))
            if len(checker.quarantine) > QUARANTINE_ENTRIES:
                old_device, start, extent = checker.quarantine.popleft()
                old_device.release_address(start, extent)  # type: ignore[attr-defined]

    # -- DVPP (§3.8, §3.9) -------------------------------------------------------------------------
    def _dvpp_malloc(self, api: AllocApi, size: int, null_outputs: int) -> tuple[int, int]:
        if null_outputs & 1 or size + 63 > SIZE_T_MAX:
            return codes.INVALID_PARAM, 0
        with self._state.lock:
            device = self._state.runtime.current()
            if device is None:
                return codes.CONTEXT_NULL, 0
            if not self._state.profile.dvpp:
                return codes.FEATURE_NOT_SUPPORT, 0
            if api is AllocApi.HI_MPI_DVPP_MALLOC and not self._state.profile.mpi_dvpp:
                # DVPP V2 is not on this product (§3.9); 207000 is the fake's choice.
                return codes.FEATURE_NOT_SUPPORT, 0
            padded = (size + 63) // 32 * 32
            block = device.allocate(api.value, padded, (PageKind.HUGE,), dvpp=True,
                                    requested=size)
            if block is None:
                return codes.MEMORY_ALLOCATION, 0
            try:
                self._diagnostics.allocated(block)
                return codes.SUCCESS, block.start
            except BaseException:
                device.release(block)
                raise

    def acldvppMalloc(self, size: int, null_outputs: int = 0) -> tuple[int, int]:
        return self._dvpp_malloc(AllocApi.DVPP_MALLOC, size, null_outputs)

    def acldvppFree(self, devPtr: int) -> int:
        return self.aclrtFree(devPtr, _DVPP_APIS)

    def hi_mpi_dvpp_malloc(
        self, dev_id: int, size: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        return self._dvpp_malloc(AllocApi.HI_MPI_DVPP_MALLOC, size, null_outputs)

    def hi_mpi_dvpp_free(self, dev_ptr: int) -> int:
        return self.aclrtFree(dev_ptr, _DVPP_APIS)

    # -- host memory (§3.7) ------------------------------------------------------------------------
    def aclrtMallocHost(self, size: int, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1 or size == 0 or size + 31 > SIZE_T_MAX:
            return codes.INVALID_PARAM, 0
        with self._state.lock:
            if self._state.runtime.current() is None:
                return codes.CONTEXT_NULL, 0
            fault = self._state.fault("aclrtMallocHost")
            if fault:
                return fault, 0
            padded = align_up(size, 32)
            extent = align_up(padded, HOST_PAGE)
            try:
                host_map = mmap.mmap(-1, extent, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            except (OSError, OverflowError, ValueError):
                return codes.MEMORY_ALLOCATION, 0
            start = address_of(host_map)
            block = Block(start, padded, extent, HOST_PAGE, AllocApi.MALLOC_HOST.value, None,
                          size)
            try:
                self._state.pinned_maps[start] = host_map
                self._state.pinned.add(block)
                self._diagnostics.allocated(block)
                return codes.SUCCESS, start
            except BaseException:
                self._state.pinned.discard(block)
                self._state.pinned_maps.pop(start, None)
                host_map.close()
                raise

    def aclrtFreeHost(self, hostPtr: int) -> int:
        if hostPtr == 0:
            return codes.INVALID_PARAM
        with self._state.lock:
            block = self._state.pinned.at(hostPtr)
            if block is None:
                return codes.RT_PARAM_INVALID
            checker = self._state.checker
            # Hazards and checker findings raise once the block is freed.
            with self._state.hazards.held(), \
                    checker.held() if checker is not None else contextlib.nullcontext():
                if self._state.streams.any_pending():
                    self._diagnostics.check_pending(
                        block.start, block.extent, access="free",
                        what=f"aclrtMallocHost block {hostPtr:#x} freed", targets=(block,))
                if checker is not None:
                    checker.verify_block(block, block.start, "free")
                    checker.drop_segments_of(block)
                self._state.wait_for_copies(block.start, block.end)
                self._state.pinned.discard(block)
                host_map = self._state.pinned_maps.pop(hostPtr, None)
                if host_map is not None:
                    self._quarantine_pinned(block, host_map)
            return codes.SUCCESS

    def _quarantine_pinned(self, block: Block, host_map: mmap.mmap) -> None:
        """Keep a freed pinned block mapped, emptied, for the next PINNED_QUARANTINE frees
        (older ones go first once the others take more than PINNED_QUARANTINE_BYTES).

        A view or pointer that outlived aclrtFreeHost (memory wrapped with
        HostBuffer.from_ptr, a numpy array over a raw address) then reads zeros (or the
        checker's poison) and writes where no later allocation lives, instead of
        crashing or changing someone else's bytes; the checker reports such a write
        (docs/fidelity.md row 20). Older blocks are unmapped.
        """
        with contextlib.suppress(OSError, ValueError):
            host_map.madvise(mmap.MADV_DONTNEED)  # the pages go back at once
        checker = self._state.checker
        if checker is not None:
            checker.on_pinned_freed(block, block.start)
        quarantine = self._state.pinned_quarantine
        # Kept before it is indexed: an interrupt between the two leaves a block that is
        # evicted in turn, never an address refused for good with nothing kept there.
        quarantine.append((block, host_map))
        self._state.pinned_freed.add(block)
        # Derived every time (C-level iteration, no Python line per block), so no counter
        # can drift when an interrupt lands between two updates.
        kept = sum(map(_EXTENT, map(_BLOCK, quarantine))) - block.extent
        while len(quarantine) > PINNED_QUARANTINE or (
                len(quarantine) > 1 and kept > PINNED_QUARANTINE_BYTES):
            old, old_map = quarantine.popleft()
            kept -= old.extent
            self._state.pinned_freed.discard(old)
            if checker is not None:
                checker.verify_freed_pinned(old, old.start, "its unmapping")
            # If something still exports the mapping, it goes with the last export.
            with contextlib.suppress(BufferError):
                old_map.close()

    # -- queries (§3.12, §4.8, §4.9) ---------------------------------------------------------------
    def aclrtGetMemInfo(self, attr: int, null_outputs: int = 0) -> tuple[int, int, int]:
        if null_outputs & 3:
            return codes.INVALID_PARAM, 0, 0
        if attr > self._state.cann.meminfo_max_attr:  # 8.5.0 stops at 11 (§3.12)
            return codes.INVALID_MEMORY_TYPE, 0, 0
        with self._state.lock:
            device = self._state.runtime.current()
            if device is None:
                return codes.CONTEXT_NULL, 0, 0
            if attr in _GIANT_ATTRS and not self._state.profile.giant_pages:
                return codes.FEATURE_NOT_SUPPORT, 0, 0
            if attr in _DDR_ATTRS and self._state.profile.memory != "DDR":
                return codes.SUCCESS, 0, 0
            self._vmm.reap_shared()
            pools = device.pools
            if attr in _BOTH_POOLS:
                kinds: tuple[PageKind, ...] = (PageKind.NORMAL, PageKind.HUGE)
            elif attr in _HUGE_ATTRS:
                kinds = (PageKind.HUGE,)
            elif attr in _GIANT_ATTRS:
                kinds = (PageKind.GIANT,)
            else:
                kinds = (PageKind.NORMAL,)
            free = sum(pools.free_of(k) for k in kinds)
            total = sum(pools.total_of(k) for k in kinds)
            return codes.SUCCESS, free, total

    def aclrtMemGetAddressRange(self, ptr: int, null_outputs: int = 0) -> tuple[int, int, int]:
        if not self._state.cann.has_address_range:
            raise FunctionNotAvailableError("aclrtMemGetAddressRange", self._state.cann.name,
                                            "9.0.1")
        if ptr == 0:
            return codes.INVALID_PARAM, 0, 0
        if null_outputs & 3 == 3:
            return codes.RT_PARAM_INVALID, 0, 0
        with self._state.lock:
            mapping = self._state.reservations.mapping_at(ptr)
            block = self._addresses.block_at(ptr)
            if mapping is not None:
                start, extent = mapping.va, mapping.size
            elif block is not None:
                start, extent = block.start, block.extent
            else:
                return codes.RT_PARAM_INVALID, 0, 0
            base = 0 if null_outputs & 1 else start
            size = 0 if null_outputs & 2 else extent
            return codes.SUCCESS, base, size

    def _host_id(self) -> int:
        """location.id reported for host memory: 0 from 9.0.1; before, the id of the
        calling thread's device (docs/runtime-model.md §4.9)."""
        if self._state.cann.host_location_id_zero:
            return 0
        device = self._state.runtime.current()
        return 0 if device is None else device.id

    def aclrtPointerGetAttributes(
        self, ptr: int, null_outputs: int = 0
    ) -> tuple[int, int, int, int]:
        if ptr == 0 or null_outputs & 1:
            return codes.INVALID_PARAM, 0, 0, 0
        with self._state.lock:
            mapping = self._state.reservations.mapping_at(ptr)
            if mapping is not None:
                physical = mapping.physical
                page = physical.granularity
                if physical.device is None:
                    return codes.SUCCESS, MemLocationType.HOST, self._host_id(), page
                return codes.SUCCESS, MemLocationType.DEVICE, physical.device, page
            if VMM_WINDOW[0] <= ptr < VMM_WINDOW[1]:
                return codes.RT_PARAM_INVALID, 0, 0, 0
            block = self._addresses.block_at(ptr)
            if block is not None and block.device is not None:
                return codes.SUCCESS, MemLocationType.DEVICE, block.device, block.page_size
            if block is not None:
                return codes.SUCCESS, MemLocationType.HOST, self._host_id(), HOST_PAGE
            if DEVICE_SPACE_BASE <= ptr < DEVICE_SPACE_END:
                return codes.RT_PARAM_INVALID, 0, 0, 0
            return codes.SUCCESS, MemLocationType.UNREGISTERED, 0, HOST_PAGE


class Plan:
    """An (api, policy) pair's allocation arithmetic, computed once (docs/runtime-model.md §3.5)."""

    __slots__ = ("api", "large", "overhead", "rounding", "small", "unsupported")

    def __init__(self, api: str, overhead: int, rounding: int, unsupported: int,
                 small: tuple[int, ...], large: tuple[int, ...]) -> None:
        self.api = api
        #: What the ACL layer adds before its overflow check (32 + padding).
        self.overhead = overhead
        #: Added before rounding down to 32: ``(size + rounding) // 32 * 32``.
        self.rounding = rounding
        self.unsupported = unsupported
        #: Page kinds tried at or below the HUGE_FIRST threshold, and above it.
        self.small = small
        self.large = large


_MALLOC_ALIGN32 = AllocApi.MALLOC_ALIGN32.value
_MALLOC_CACHED = AllocApi.MALLOC_CACHED.value
_DVPP_APIS = frozenset({AllocApi.DVPP_MALLOC.value, AllocApi.HI_MPI_DVPP_MALLOC.value})
