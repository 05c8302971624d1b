"""The fake backend: the C API answered by a model of the device (spec §1-§3).

Each method performs the checks of its spec section in the order listed there and
returns the code the real library would. Values the sources leave open follow the
spec's suggested choice (spec §8); ``docs/fidelity.md`` lists them.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import threading
import time
import weakref

from ..enums import MallocPolicy, MemAttr, MemLocationType
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
from .checker import QUARANTINE_ENTRIES, Checker
from .device import DEVICE_SLOT, DEVICE_SPACE_BASE, MAX_DEVICES, FakeDevice
from .extents import Block, BlockIndex
from .hostmem import (
    COPIED,
    HOST_PAGE,
    PROVEN,
    address_of,
    plausible_host_range,
    prove_untrusted,
    reserve_address_space,
)
from .profiles import DEFAULT_PROFILE, Profile, resolve_profile
from .runtime import FakeRuntime
from .stream_calls import Located, StreamCalls
from .streams import Hazards, StreamTable
from .vmm_calls import VmmCalls
from .vmm_space import MIRROR_OFFSET, VMM_WINDOW

__all__ = ["FakeBackend"]

_P2P = frozenset({3, 4, 5, 7})
_GIANT = frozenset({MallocPolicy.HUGE1G_ONLY, MallocPolicy.HUGE1G_ONLY_P2P})
_DDR_ATTRS = frozenset({0, 2, 3, 6, 7})
_BOTH_POOLS = frozenset({MemAttr.DDR_MEM, MemAttr.HBM_MEM})
_HUGE_ATTRS = frozenset({2, 4, 6, 8, 13, 16})
_GIANT_ATTRS = frozenset({10, 11, 14, 17})
_DEVICE_SPACE_END = DEVICE_SPACE_BASE + MAX_DEVICES * DEVICE_SLOT
_address_space_reserved: bool | None = None
_reserve_lock = threading.Lock()


def _reserve_device_space() -> bool:
    global _address_space_reserved
    with _reserve_lock:
        if _address_space_reserved is None:
            # The VMM window, the device ranges and the VMM mirror, in one reservation.
            low = VMM_WINDOW[0]
            high = VMM_WINDOW[1] + MIRROR_OFFSET
            assert low < DEVICE_SPACE_BASE and VMM_WINDOW[0] + MIRROR_OFFSET >= _DEVICE_SPACE_END
            _address_space_reserved = reserve_address_space(low, high - low)
        return _address_space_reserved


#: Seconds a free or unmap waits for copies in other threads before it goes ahead.
_COPY_WAIT_LIMIT = 5.0
#: Every fake backend of the process, for the fork handler.
_backends: weakref.WeakSet[FakeBackend] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for backend in list(_backends):
        backend.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class FakeBackend(StreamCalls, VmmCalls):
    """Implements :class:`acl_mem._backend.Backend` against a simulated device."""

    name = "fake"

    def __init__(self, profile: Profile, *, hazards: str = "warn", check: bool = False) -> None:
        self.profile = profile
        self.address_space_reserved = _reserve_device_space()
        self.streams = StreamTable()
        self.hazards = Hazards(hazards)
        self.runtime = FakeRuntime(profile, self._release_device)
        self._vmm_init()
        self._faults: dict[str, list[int]] = {}
        self.checker: Checker | None = Checker(hazards) if check else None
        self._lock = self.runtime.lock
        self._host = BlockIndex()
        self._host_maps: dict[int, mmap.mmap] = {}
        #: Copies moving bytes with the lock released; unmapping host memory waits for
        #: them (a copy into memory unmapped under it would crash the process).
        self._copies: dict[int, None] = {}
        self._copies_done = threading.Condition(self._lock)
        self._plans: dict[tuple[str, int], _Plan] = {}
        self._orphaned_host_maps: list[mmap.mmap] = []
        _backends.add(self)
        #: The queued ops of every stream (shared with the stream table): empty = no
        #: hazard can arise, the common case tested first.
        self._queued = self.streams.pending.ops

    def after_fork(self) -> None:
        """The forked child's fake: as a new process sees the device (fidelity table).

        A thread of the parent may have been inside the fake at the fork, holding its
        lock or half-way through a change; that thread does not exist here. So the
        child gets fresh locks, no current context and empty devices: the parent's
        device pointers, streams and virtual memory are not valid in the child, and
        the child calls aclrtSetDevice and allocates like any new process. Pinned host
        memory stays mapped (views of it may exist) but is no longer registered.
        """
        self.runtime.after_fork()
        self._lock = self.runtime.lock
        self._copies = {}
        self._copies_done = threading.Condition(self._lock)
        self.streams = StreamTable()
        self._queued = self.streams.pending.ops
        for device in self.runtime.devices:
            device.release_all()
            device.pools.reset()
        self._orphaned_host_maps += self._host_maps.values()
        self._host_maps = {}
        self._host = BlockIndex()
        self._vmm_after_fork()
        if self.checker is not None:
            self.checker = Checker(self.checker.mode)
        self._faults = {}

    @classmethod
    def from_environment(cls) -> FakeBackend:
        from .config import current_check, current_hazard_mode, current_profile

        return cls(current_profile(), hazards=current_hazard_mode(), check=current_check())

    @classmethod
    def for_profile(
        cls, name: str = DEFAULT_PROFILE, *, device_count: int | None = None,
        hbm_bytes: int | None = None,
    ) -> FakeBackend:
        profile = resolve_profile(name).with_overrides(device_count=device_count,
                                                       capacity=hbm_bytes)
        return cls(profile)

    def describe(self) -> dict[str, object]:
        return {
            "profile": self.profile.name,
            "soc": self.profile.soc_name,
            "description": self.profile.description,
            "device_count": self.profile.device_count,
            "capacity_per_device": self.profile.capacity,
            "device_address_space_reserved": self.address_space_reserved,
        }

    def soc_name(self) -> str:
        return self.profile.soc_name

    # -- fault injection ---------------------------------------------------------------
    INJECTABLE = ("aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached", "aclrtMallocHost",
                  "aclrtReserveMemAddress", "aclrtMallocPhysical", "aclrtMapMem")

    def inject_fault(self, call: str, nth: int = 1, code: int = codes.MEMORY_ALLOCATION) -> None:
        """Make the ``nth`` next call of ``call`` that passes its parameter checks fail
        with ``code`` (as the driver would), once."""
        if call not in self.INJECTABLE:
            raise ValueError(f"inject_fault: call must be one of {self.INJECTABLE}, got {call!r}")
        if nth < 1:
            raise ValueError(f"inject_fault: nth must be >= 1, got {nth}")
        with self._lock:
            self._faults[call] = [nth, code]

    def _fault(self, call: str) -> int:
        if not self._faults:
            return 0
        plan = self._faults.get(call)
        if plan is None:
            return 0
        plan[0] -= 1
        if plan[0] > 0:
            return 0
        del self._faults[call]
        return plan[1]

    # -- runtime (spec §3.1, §3.2) -----------------------------------------------
    def aclInit(self, config_path: str | None) -> int:
        return self.runtime.init(config_path)

    def aclFinalize(self) -> int:
        # Every device is released before a HazardError for lost queued work propagates.
        with self._lock, self.hazards.held():
            return self.runtime.finalize()

    def aclrtSetDevice(self, deviceId: int) -> int:
        return self.runtime.set_device(deviceId)

    def aclrtResetDevice(self, deviceId: int) -> int:
        with self._lock, self.hazards.held():
            return self.runtime.reset_device(deviceId)

    def aclrtGetDevice(self, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        device = self.runtime.current()
        return (codes.CONTEXT_NULL, 0) if device is None else (codes.SUCCESS, device.id)

    def aclrtGetDeviceCount(self, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        return codes.SUCCESS, len(self.runtime.devices)

    # -- memory checker (docs in checker.py) ---------------------------------------------
    def _allocated(self, block: Block) -> None:
        if self.checker is not None:
            self.checker.on_allocate(block, self._host_of(block))

    def _host_of(self, block: Block) -> int:
        if block.device is None:
            return block.start
        return self.runtime.devices[block.device].region_of(block.start).host_address(
            block.start)

    def checker_verify(self, when: str = "acl_mem.check()") -> list[tuple[str, str]]:
        """Verify every canary now; all findings so far as (kind, message)."""
        checker = self.checker
        if checker is None:
            return []
        with self._lock:
            for block in self.live_blocks():
                checker.verify_block(block, self._host_of(block), when)
                for segment in checker.segments_in(block):
                    located = self._locate(segment.start, segment.size)
                    if located is not None:
                        checker.verify_segment(segment, located[0], when)
            return [(f.kind, f.message) for f in checker.findings]

    def checker_segment_allocated(self, parent: int, start: int, requested: int,
                                  size: int) -> None:
        """A pool carved ``[start, start+size)`` of block ``parent`` for ``requested`` bytes."""
        if self.checker is None:
            return
        with self._lock:
            located = self._locate(start, size)
            if located is not None:
                self.checker.on_segment(parent, start, requested, size, located[0])

    def checker_segment_freed(self, start: int) -> None:
        if self.checker is None:
            return
        with self._lock:
            segment = self.checker.segment_at(start)
            located = self._locate(start, segment.size) if segment is not None else None
            if located is not None:
                self.checker.on_segment_freed(start, located[0])

    def _check_bounds(self, address: int, count: int, what: str) -> None:
        """Report a copy or memset running past a segment or block end (checker on)."""
        checker = self.checker
        if checker is None:
            return
        segment = checker.segment_at(address)
        if segment is not None:
            if address + count > segment.start + segment.requested:
                after = checker.next_segment(segment)
                neighbour = (f"pool segment {after.start:#x}" if after is not None and
                             after.start < address + count else "the segment's padding")
                checker.report("boundary-crossed",
                               f"{what} of {count} bytes at {address:#x} runs past pool segment "
                               f"{segment.start:#x} ({segment.requested} bytes requested) "
                               f"into {neighbour}")
            return
        block = self._block_at(address)
        if block is not None and address + count > block.start + block.requested:
            next_block = self._block_at(block.end)
            neighbour = (f"{next_block.api} block {next_block.start:#x}"
                         if next_block is not None and address + count > block.end
                         else "the runtime's padding")
            checker.report("boundary-crossed",
                           f"{what} of {count} bytes at {address:#x} runs past {block.api} "
                           f"block {block.start:#x} ({block.requested} bytes requested) into "
                           f"{neighbour}")

    def _release_device(self, device: FakeDevice) -> None:
        self._wait_for_copies()
        lost = self.streams.drop_device(device.id)
        if self.checker is not None:
            self.checker.forget_device(device)
        device.release_all()
        if lost:
            # After the release: in raise mode the HazardError comes with the effect done.
            self.hazards.report("reset-with-pending-work",
                                f"device {device.id} released with {len(lost)} queued "
                                "operation(s) never synchronised; they never ran")

    def _wait_for_copies(self) -> None:
        """Block until no other thread moves bytes outside the lock (call with the lock
        held). A thread's entry can outlive its copy only if an interrupt hit the line
        that removes it: the calling thread's own entry and dead threads' entries are
        ignored, and the wait gives up after :data:`_COPY_WAIT_LIMIT` seconds."""
        me = threading.get_ident()
        deadline = time.monotonic() + _COPY_WAIT_LIMIT
        while True:
            others = [ident for ident in list(self._copies) if ident != me]
            if not others:
                return
            alive = {thread.ident for thread in threading.enumerate()}
            if not any(ident in alive for ident in others) or time.monotonic() > deadline:
                return
            # A timeout, so a copier that finished between our check and our wait is
            # noticed without it having to notify.
            self._copies_done.wait(0.01)

    # -- device allocation (spec §3.5, §3.6) -------------------------------------
    def _plan(self, api: AllocApi, policy: int) -> _Plan:
        """What ``api(size, policy)`` needs beyond the size, computed once per pair."""
        plan = self._plans.get((api.value, policy))
        if plan is None:
            chosen = effective_policy(api, policy)
            pad = 0 if api is AllocApi.MALLOC_ALIGN32 or policy in _GIANT else \
                self.profile.padding
            unsupported = 0
            if chosen in _GIANT and not self.profile.giant_pages:
                unsupported = codes.FEATURE_NOT_SUPPORT
            if chosen in _P2P and not self.profile.p2p_policies:
                unsupported = codes.FEATURE_NOT_SUPPORT
            rounding = 31 if api is AllocApi.MALLOC_ALIGN32 else 31 + pad
            small = page_kinds(1, chosen)
            large = page_kinds(HUGE_FIRST_THRESHOLD + 1, chosen)
            plan = _Plan(api.value, 32 + pad, rounding, unsupported, small, large)
            self._plans[(api.value, policy)] = plan
        return plan

    def _malloc(self, api: AllocApi, size: int, policy: int, null_outputs: int) -> tuple[int, int]:
        if null_outputs & 1 or size == 0:
            return codes.INVALID_PARAM, 0
        plan = self._plans.get((api.value, policy)) or self._plan(api, policy)
        # The ACL layer computes size + 32 + pad first and rejects a wrap (spec §3.5 step 3).
        if size + plan.overhead > SIZE_T_MAX:
            return codes.INVALID_PARAM, 0
        with self._lock:
            device = self.runtime.current()
            if device is None:
                return codes.CONTEXT_NULL, 0
            if self._faults:
                fault = self._fault(api.value)
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
                if self.checker is not None:
                    self._allocated(block)
                return codes.SUCCESS, block.start
            except BaseException:
                device.release(block)
                raise

    def aclrtMalloc(self, size: int, policy: int, null_outputs: int = 0) -> tuple[int, int]:
        return self._malloc(AllocApi.MALLOC, size, policy, null_outputs)

    def aclrtMallocAlign32(
        self, size: int, policy: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        return self._malloc(AllocApi.MALLOC_ALIGN32, size, policy, null_outputs)

    def aclrtMallocCached(
        self, size: int, policy: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        return self._malloc(AllocApi.MALLOC_CACHED, size, policy, null_outputs)

    def _free_device_block(self, ptr: int, apis: frozenset[str]) -> int:
        if ptr == 0:
            return codes.INVALID_PARAM
        with self._lock:
            index = (ptr - DEVICE_SPACE_BASE) // DEVICE_SLOT
            devices = self.runtime.devices
            if not 0 <= index < len(devices):
                return codes.RT_PARAM_INVALID
            device = devices[index]
            block = device.blocks.at(ptr)
            if block is None or block.api not in apis:
                return codes.RT_PARAM_INVALID
            if self._queued and self.streams.pending.has(block):
                # Hazards raise after the free is done (raise mode completes, then raises).
                with self.hazards.held():
                    self.check_pending(block.start, block.extent, access="free",
                                       what=f"{block.api} block {block.start:#x} freed",
                                       targets=(block,))
                    self._release_block(device, block)
            elif self.checker is not None:
                self._release_block(device, block)
            else:
                device.release(block)
            return codes.SUCCESS

    def _release_block(self, device: FakeDevice, block: Block) -> None:
        checker = self.checker
        if checker is None:
            device.release(block)
            return
        checker.verify_block(block, self._host_of(block), "free")
        checker.drop_segments_of(block)
        device.release(block, keep_address=True)
        checker.quarantine.append((device, block.start, block.extent))
        if len(checker.quarantine) > QUARANTINE_ENTRIES:
            old_device, start, extent = checker.quarantine.popleft()
            old_device.release_address(start, extent)  # type: ignore[attr-defined]

    def aclrtFree(self, devPtr: int) -> int:
        return self._free_device_block(devPtr, _MALLOC_APIS)

    # -- DVPP (spec §3.8, §3.9) --------------------------------------------------
    def _dvpp_malloc(self, api: AllocApi, size: int, null_outputs: int) -> tuple[int, int]:
        if null_outputs & 1 or size + 63 > SIZE_T_MAX:
            return codes.INVALID_PARAM, 0
        with self._lock:
            device = self.runtime.current()
            if device is None:
                return codes.CONTEXT_NULL, 0
            if not self.profile.dvpp:
                return codes.FEATURE_NOT_SUPPORT, 0
            padded = (size + 63) // 32 * 32
            block = device.allocate(api.value, padded, (PageKind.HUGE,), dvpp=True,
                                    requested=size)
            if block is None:
                return codes.MEMORY_ALLOCATION, 0
            try:
                self._allocated(block)
                return codes.SUCCESS, block.start
            except BaseException:
                device.release(block)
                raise

    def acldvppMalloc(self, size: int, null_outputs: int = 0) -> tuple[int, int]:
        return self._dvpp_malloc(AllocApi.DVPP_MALLOC, size, null_outputs)

    def acldvppFree(self, devPtr: int) -> int:
        return self._free_device_block(devPtr, _DVPP_APIS)

    def hi_mpi_dvpp_malloc(
        self, dev_id: int, size: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        return self._dvpp_malloc(AllocApi.HI_MPI_DVPP_MALLOC, size, null_outputs)

    def hi_mpi_dvpp_free(self, dev_ptr: int) -> int:
        return self._free_device_block(dev_ptr, _DVPP_APIS)

    # -- host memory (spec §3.7) -------------------------------------------------
    def aclrtMallocHost(self, size: int, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1 or size == 0 or size + 31 > SIZE_T_MAX:
            return codes.INVALID_PARAM, 0
        with self._lock:
            if self.runtime.current() is None:
                return codes.CONTEXT_NULL, 0
            fault = self._fault("aclrtMallocHost")
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
                self._host_maps[start] = host_map
                self._host.add(block)
                self._allocated(block)
                return codes.SUCCESS, start
            except BaseException:
                self._host.discard(block)
                self._host_maps.pop(start, None)
                host_map.close()
                raise

    def aclrtFreeHost(self, hostPtr: int) -> int:
        if hostPtr == 0:
            return codes.INVALID_PARAM
        with self._lock:
            block = self._host.at(hostPtr)
            if block is None:
                return codes.RT_PARAM_INVALID
            with self.hazards.held():
                if self.streams.any_pending():
                    self.check_pending(block.start, block.extent, access="free",
                                       what=f"aclrtMallocHost block {hostPtr:#x} freed",
                                       targets=(block,))
                if self.checker is not None:
                    self.checker.verify_block(block, block.start, "free")
                    self.checker.drop_segments_of(block)
                self._wait_for_copies()
                self._host.discard(block)
                host_map = self._host_maps.pop(hostPtr, None)
                # If something still exports the mapping, it goes with the last view.
                if host_map is not None:
                    with contextlib.suppress(BufferError):
                        host_map.close()
            return codes.SUCCESS

    # -- copies and memset (spec §3.10, §3.11) -----------------------------------
    def aclrtMemcpy(self, dst: int, destMax: int, src: int, count: int, kind: int) -> int:
        if kind > 5:
            return codes.INVALID_PARAM
        if count == 0:
            return codes.SUCCESS
        if dst == 0 or src == 0:
            return codes.INVALID_PARAM
        if destMax == 0 or count > destMax:
            return codes.RT_PARAM_INVALID
        if dst == src:
            return codes.SUCCESS
        token = 0
        try:
            with self._lock:
                if self.runtime.current() is None:
                    return codes.CONTEXT_NULL
                target = self._resolve(dst, count)
                source = self._resolve(src, count)
                if target is None or source is None:
                    return codes.RT_PARAM_INVALID
                dst_host, dst_dev, dst_pinned, dst_targets = target
                src_host, src_dev, src_pinned, src_targets = source
                if dst_dev is not None and src_dev is not None and dst_dev != src_dev:
                    return codes.RT_PARAM_INVALID
                if dst_dev is None and src_dev is None and not (dst_pinned or src_pinned):
                    return codes.RT_PARAM_INVALID
                if self.streams.any_pending():
                    self.check_pending(dst, count, access="write", what="aclrtMemcpy writes",
                                       targets=dst_targets)
                    self.check_pending(src, count, access="read", what="aclrtMemcpy reads",
                                       targets=src_targets)
                if self.checker is not None:
                    self._check_bounds(dst, count, "aclrtMemcpy write")
                    self._check_bounds(src, count, "aclrtMemcpy read")
                untrusted = "dst" if not dst_targets else "src" if not src_targets else ""
                token = threading.get_ident()
                self._copies[token] = None
            # The bytes move with the lock released (and the GIL, in ctypes.memmove), so
            # other threads allocate and copy meanwhile; memory under a running copy is
            # not unmapped (see _wait_for_copies). Pageable memory is proven usable first
            # (or copied by the kernel), outside the lock too: it is not the fake's.
            if untrusted:
                found = prove_untrusted(dst_host, src_host, count, untrusted)
                if found != PROVEN:
                    return codes.SUCCESS if found == COPIED else codes.RT_PARAM_INVALID
            ctypes.memmove(dst_host, src_host, count)
            return codes.SUCCESS
        finally:
            if token:
                self._copies.pop(token, None)

    def aclrtMemset(self, devPtr: int, maxCount: int, value: int, count: int) -> int:
        if count == 0:
            return codes.SUCCESS
        if devPtr == 0:
            return codes.INVALID_PARAM
        with self._lock:
            if self.runtime.current() is None:
                return codes.CONTEXT_NULL
            if count > maxCount:
                return codes.RT_PARAM_INVALID
            target = self._resolve(devPtr, count)
            if target is None or not target[3]:
                return codes.RT_PARAM_INVALID
            if self.streams.any_pending():
                self.check_pending(devPtr, count, access="write", what="aclrtMemset writes",
                                   targets=target[3])
            if self.checker is not None:
                self._check_bounds(devPtr, count, "aclrtMemset")
            ctypes.memset(target[0], value & 0xFF, count)
            return codes.SUCCESS

    def _device_of(self, address: int) -> FakeDevice | None:
        if not DEVICE_SPACE_BASE <= address < _DEVICE_SPACE_END:
            return None
        index = (address - DEVICE_SPACE_BASE) // DEVICE_SLOT
        return self.runtime.devices[index] if index < len(self.runtime.devices) else None

    def _resolve(self, address: int, count: int) -> Located | None:
        """Where ``[address, address+count)`` lives: ``(host address of the bytes, device id
        or None, pinned host?, the blocks or mappings it covers)``, or None if invalid.

        Pageable host memory has no allocations; it is vouched for by the Pythonic layer
        (the buffer it holds) or proven usable by the copy itself.
        """
        if DEVICE_SPACE_BASE <= address < _DEVICE_SPACE_END:
            device = self._device_of(address)
            if device is None:
                return None
            blocks = device.blocks
            block = blocks.at(address) or blocks.containing(address)
            if block is None:
                return None
            if address + count <= block.end:
                targets: tuple[object, ...] = (block,)
            else:
                covered = self._covered(blocks, block, address + count)
                if covered is None:
                    return None
                targets = covered
            return device.region_of(address).host_address(address), device.id, False, targets
        if VMM_WINDOW[0] <= address < VMM_WINDOW[1]:
            mappings = self.vmm_covering(address, count)
            if mappings is None:
                return None
            device_id = mappings[0].physical.device
            return address + MIRROR_OFFSET, device_id, device_id is None, mappings
        pinned = self._host.containing(address)
        if pinned is not None:
            if address + count > pinned.end:
                return None
            return address, None, True, (pinned,)
        if not plausible_host_range(address, count):
            return None
        return address, None, False, ()

    @staticmethod
    def _covered(blocks: BlockIndex, first: Block, end: int) -> tuple[Block, ...] | None:
        """Back-to-back live blocks from ``first`` up to ``end`` (spec §3.10, fidelity 5)."""
        found = [first]
        block = first
        while block.end < end:
            nxt = blocks.at(block.end)
            if nxt is None:
                return None
            found.append(nxt)
            block = nxt
        return tuple(found)

    def _locate(self, address: int, count: int) -> tuple[int, int | None, bool] | None:
        """``(host address of the bytes, device id or None, pinned host?)`` or None."""
        found = self._resolve(address, count)
        return None if found is None else found[:3]

    def _still_live(self, target: object) -> bool:
        """Whether a block or mapping captured by queued work still exists."""
        if isinstance(target, Block):
            if target.device is None:
                return self._host.at(target.start) is target
            return self.runtime.devices[target.device].blocks.at(target.start) is target
        return self.vmm_is_mapped(target)

    # -- queries (spec §3.12, §4.8, §4.9) ----------------------------------------
    def aclrtGetMemInfo(self, attr: int, null_outputs: int = 0) -> tuple[int, int, int]:
        if null_outputs & 3:
            return codes.INVALID_PARAM, 0, 0
        if attr > MemAttr.MEM_P2P_HUGE1G:
            return codes.INVALID_MEMORY_TYPE, 0, 0
        with self._lock:
            device = self.runtime.current()
            if device is None:
                return codes.CONTEXT_NULL, 0, 0
            if attr in _GIANT_ATTRS and not self.profile.giant_pages:
                return codes.FEATURE_NOT_SUPPORT, 0, 0
            if attr in _DDR_ATTRS and self.profile.memory != "DDR":
                return codes.SUCCESS, 0, 0
            if self._still_shared:
                self._reap_shared()
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

    def _block_at(self, address: int) -> Block | None:
        device = self._device_of(address)
        if device is not None:
            return device.blocks.containing(address)
        return self._host.containing(address)

    def aclrtMemGetAddressRange(self, ptr: int, null_outputs: int = 0) -> tuple[int, int, int]:
        if ptr == 0:
            return codes.INVALID_PARAM, 0, 0
        if null_outputs & 3 == 3:
            return codes.RT_PARAM_INVALID, 0, 0
        with self._lock:
            mapping = self.vmm_mapping_at(ptr)
            block = self._block_at(ptr)
            if mapping is not None:
                start, extent = mapping.va, mapping.size
            elif block is not None:
                start, extent = block.start, block.extent
            else:
                return codes.RT_PARAM_INVALID, 0, 0
            base = 0 if null_outputs & 1 else start
            size = 0 if null_outputs & 2 else extent
            return codes.SUCCESS, base, size

    def aclrtPointerGetAttributes(
        self, ptr: int, null_outputs: int = 0
    ) -> tuple[int, int, int, int]:
        if ptr == 0 or null_outputs & 1:
            return codes.INVALID_PARAM, 0, 0, 0
        with self._lock:
            mapping = self.vmm_mapping_at(ptr)
            if mapping is not None:
                physical = mapping.physical
                page = physical.granularity
                if physical.device is None:
                    return codes.SUCCESS, MemLocationType.HOST, 0, page
                return codes.SUCCESS, MemLocationType.DEVICE, physical.device, page
            if VMM_WINDOW[0] <= ptr < VMM_WINDOW[1]:
                return codes.RT_PARAM_INVALID, 0, 0, 0
            block = self._block_at(ptr)
            if block is not None and block.device is not None:
                return codes.SUCCESS, MemLocationType.DEVICE, block.device, block.page_size
            if block is not None:
                return codes.SUCCESS, MemLocationType.HOST, 0, HOST_PAGE
            if DEVICE_SPACE_BASE <= ptr < _DEVICE_SPACE_END:
                return codes.RT_PARAM_INVALID, 0, 0, 0
            return codes.SUCCESS, MemLocationType.UNREGISTERED, 0, HOST_PAGE

    # -- introspection for tests and tools ---------------------------------------
    def live_blocks(self) -> list[Block]:
        with self._lock:
            found = [b for d in self.runtime.devices for b in d.blocks]
            return found + list(self._host)

    def resident_bytes(self) -> int:
        """Host RAM this process uses now (RSS), for the sparse-backing checks."""
        with open(f"/proc/{os.getpid()}/statm") as handle:
            return int(handle.read().split()[1]) * HOST_PAGE


class _Plan:
    """An (api, policy) pair's allocation arithmetic, computed once (spec §3.5)."""

    __slots__ = ("api", "large", "overhead", "rounding", "small", "unsupported")

    def __init__(self, api: str, overhead: int, rounding: int, unsupported: int,
                 small: tuple[PageKind, ...], large: tuple[PageKind, ...]) -> None:
        self.api = api
        #: What the ACL layer adds before its overflow check (32 + padding).
        self.overhead = overhead
        #: Added before rounding down to 32: ``(size + rounding) // 32 * 32``.
        self.rounding = rounding
        self.unsupported = unsupported
        #: Page kinds tried at or below the HUGE_FIRST threshold, and above it.
        self.small = small
        self.large = large


_MALLOC_APIS = frozenset(
    {AllocApi.MALLOC.value, AllocApi.MALLOC_ALIGN32.value, AllocApi.MALLOC_CACHED.value}
)
_DVPP_APIS = frozenset({AllocApi.DVPP_MALLOC.value, AllocApi.HI_MPI_DVPP_MALLOC.value})
