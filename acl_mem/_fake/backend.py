"""The fake backend: the C API answered by a model of the device (docs/runtime-model.md §1-§3).

Each method performs the checks of its runtime-model section in the order listed there and
returns the code the real library would. Values the sources leave open follow the
spec's suggested choice (docs/runtime-model.md §8); ``docs/fidelity.md`` lists them.

:class:`FakeBackend` is a thin dispatcher over one shared :class:`~.state.EngineState`
(profile, runtime with devices, contexts and the lock, streams, hazards, checker,
fault plan, copies in flight, pinned host memory, VMM reservations) and the parts
that act on it, each built with the state and the parts it uses:

- :class:`~.addresses.AddressMap` (``addresses.py``): which block, mapping or pinned
  range an address is in;
- :class:`~.diagnostics.Diagnostics` (``diagnostics.py``): checker hooks, bound
  crossings, hazards of queued work, live blocks;
- :class:`~.copies.Copies` (``copies.py``): aclrtMemcpy, aclrtMemset;
- :class:`~.stream_calls.StreamCalls` (``stream_calls.py``): streams and asynchronous
  copies;
- :class:`~.vmm_calls.VmmCalls` (``vmm_calls.py``): reservations, physical memory,
  mappings, sharing;
- :class:`~.events.EventCalls` (``events.py``): events, cross-stream order;
- :class:`~.memory.DeviceMemory` (``memory.py``): the aclrtMalloc family, DVPP, pinned
  host memory, memory queries.

A part's call is bound onto each backend at construction, so ``backend.aclrtMalloc`` is
the part's own method (no extra call); the class-level :class:`_Call` entries keep the
signatures visible to mypy (checked against :class:`acl_mem._backend.Backend`), to
``dir(FakeBackend)`` and to subclasses that override a call and use ``super()``. The
runtime calls (aclInit ... aclrtGetDeviceCount, contexts) and fault injection are answered here.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from ..sizes import GiB
from . import codes
from .addresses import DEVICE_SPACE_END, AddressMap
from .checker import Checker
from .config import current_cann
from .copies import Copies
from .device import DEVICE_SPACE_BASE
from .diagnostics import Diagnostics
from .events import EventCalls
from .extents import BlockIndex
from .hostmem import HOST_PAGE, reserve_address_space
from .leak_report import arm as arm_leak_report
from .memory import DeviceMemory
from .profiles import DEFAULT_PROFILE, Profile, resolve_profile
from .runtime import FakeRuntime
from .state import EngineState
from .stream_calls import StreamCalls
from .streams import Hazards, StreamTable
from .versions import CannVersion
from .vmm_calls import VmmCalls
from .vmm_space import MIRROR_OFFSET, VMM_WINDOW, Physical, Reservation

if TYPE_CHECKING:
    from .._backend import Backend

__all__ = ["FakeBackend"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_address_space_reserved: bool | None = None
#: How far into the VMM window the reservation may start when its beginning is taken.
_SHADOW_SKIP_LIMIT = 4 * GiB
_reserve_lock = threading.Lock()


def _reserve_device_space() -> bool:
    global _address_space_reserved
    with _reserve_lock:
        if _address_space_reserved is None:
            # The VMM window, the device ranges and the VMM mirror, in one reservation.
            low = VMM_WINDOW[0]
            high = VMM_WINDOW[1] + MIRROR_OFFSET
            assert low < DEVICE_SPACE_BASE and VMM_WINDOW[0] + MIRROR_OFFSET >= DEVICE_SPACE_END
            reserved = reserve_address_space(low, high - low)
            # AddressSanitizer's shadow memory ends 2 GiB - 32 KiB into the VMM window
            # (x86-64: high shadow up to 0x10007fff7fff): under ASan the rest is reserved,
            # and the shadow keeps host allocations out of the first part just as well.
            start = low
            while not reserved and start - low < _SHADOW_SKIP_LIMIT:
                start += GiB
                reserved = reserve_address_space(start, high - start)
            _address_space_reserved = reserved
        return _address_space_reserved


#: Every fake backend of the process, for the fork handler.
_backends: weakref.WeakSet[FakeBackend] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for backend in list(_backends):
        backend.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _Call(Generic[_P, _R]):
    """A call of the backend answered by the part in attribute ``part``.

    On a backend it is the part's bound method (bound into the instance at construction,
    see :meth:`FakeBackend._bind_calls`); on the class it is the part's function, so
    ``callable(getattr(FakeBackend, name))`` holds and its signature is the part's.
    """

    def __init__(self, part: str, method: Callable[Concatenate[Any, _P], _R]) -> None:
        self.part = part
        self.method = method
        self.name = method.__name__

    @overload
    def __get__(self, obj: None, owner: type) -> Callable[Concatenate[Any, _P], _R]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> Callable[_P, _R]: ...
    def __get__(self, obj: object, owner: type) -> Callable[..., _R]:
        if obj is None:
            return self.method
        bound: Callable[_P, _R] = getattr(getattr(obj, self.part), self.name)
        return bound


class FakeBackend:
    """Implements :class:`acl_mem._backend.Backend` against a simulated device."""

    name = "fake"

    # -- calls answered by the parts ---------------------------------------------------------------
    aclrtMalloc = _Call("_memory", DeviceMemory.aclrtMalloc)
    aclrtMallocAlign32 = _Call("_memory", DeviceMemory.aclrtMallocAlign32)
    aclrtMallocCached = _Call("_memory", DeviceMemory.aclrtMallocCached)
    aclrtFree = _Call("_memory", DeviceMemory.aclrtFree)
    aclrtMallocHost = _Call("_memory", DeviceMemory.aclrtMallocHost)
    aclrtFreeHost = _Call("_memory", DeviceMemory.aclrtFreeHost)
    acldvppMalloc = _Call("_memory", DeviceMemory.acldvppMalloc)
    acldvppFree = _Call("_memory", DeviceMemory.acldvppFree)
    hi_mpi_dvpp_malloc = _Call("_memory", DeviceMemory.hi_mpi_dvpp_malloc)
    hi_mpi_dvpp_free = _Call("_memory", DeviceMemory.hi_mpi_dvpp_free)
    aclrtGetMemInfo = _Call("_memory", DeviceMemory.aclrtGetMemInfo)
    aclrtMemGetAddressRange = _Call("_memory", DeviceMemory.aclrtMemGetAddressRange)
    aclrtPointerGetAttributes = _Call("_memory", DeviceMemory.aclrtPointerGetAttributes)

    aclrtMemcpy = _Call("_copies_part", Copies.aclrtMemcpy)
    aclrtMemset = _Call("_copies_part", Copies.aclrtMemset)

    aclrtCreateStream = _Call("_streams", StreamCalls.aclrtCreateStream)
    aclrtDestroyStream = _Call("_streams", StreamCalls.aclrtDestroyStream)
    aclrtDestroyStreamForce = _Call("_streams", StreamCalls.aclrtDestroyStreamForce)
    aclrtSynchronizeStream = _Call("_streams", StreamCalls.aclrtSynchronizeStream)
    aclrtSynchronizeDevice = _Call("_streams", StreamCalls.aclrtSynchronizeDevice)
    aclrtMemcpyAsync = _Call("_streams", StreamCalls.aclrtMemcpyAsync)
    aclrtMemsetAsync = _Call("_streams", StreamCalls.aclrtMemsetAsync)

    aclrtReserveMemAddress = _Call("_vmm", VmmCalls.aclrtReserveMemAddress)
    aclrtReleaseMemAddress = _Call("_vmm", VmmCalls.aclrtReleaseMemAddress)
    aclrtMallocPhysical = _Call("_vmm", VmmCalls.aclrtMallocPhysical)
    aclrtFreePhysical = _Call("_vmm", VmmCalls.aclrtFreePhysical)
    aclrtMapMem = _Call("_vmm", VmmCalls.aclrtMapMem)
    aclrtUnmapMem = _Call("_vmm", VmmCalls.aclrtUnmapMem)
    aclrtMemGetAllocationGranularity = _Call("_vmm", VmmCalls.aclrtMemGetAllocationGranularity)
    aclrtMemSetAccess = _Call("_vmm", VmmCalls.aclrtMemSetAccess)
    aclrtMemExportToShareableHandle = _Call("_vmm", VmmCalls.aclrtMemExportToShareableHandle)
    aclrtMemSetPidToShareableHandle = _Call("_vmm", VmmCalls.aclrtMemSetPidToShareableHandle)
    aclrtMemImportFromShareableHandle = _Call("_vmm",
                                              VmmCalls.aclrtMemImportFromShareableHandle)
    aclrtMemRetainAllocationHandle = _Call("_vmm", VmmCalls.aclrtMemRetainAllocationHandle)
    aclrtMemGetAllocationPropertiesFromHandle = _Call(
        "_vmm", VmmCalls.aclrtMemGetAllocationPropertiesFromHandle)

    aclrtCreateEvent = _Call("_events", EventCalls.aclrtCreateEvent)
    aclrtCreateEventWithFlag = _Call("_events", EventCalls.aclrtCreateEventWithFlag)
    aclrtCreateEventExWithFlag = _Call("_events", EventCalls.aclrtCreateEventExWithFlag)
    aclrtDestroyEvent = _Call("_events", EventCalls.aclrtDestroyEvent)
    aclrtRecordEvent = _Call("_events", EventCalls.aclrtRecordEvent)
    aclrtResetEvent = _Call("_events", EventCalls.aclrtResetEvent)
    aclrtStreamWaitEvent = _Call("_events", EventCalls.aclrtStreamWaitEvent)
    aclrtSynchronizeEvent = _Call("_events", EventCalls.aclrtSynchronizeEvent)
    aclrtQueryEventStatus = _Call("_events", EventCalls.aclrtQueryEventStatus)
    aclrtQueryEvent = _Call("_events", EventCalls.aclrtQueryEvent)
    aclrtEventElapsedTime = _Call("_events", EventCalls.aclrtEventElapsedTime)

    # Checker, hazard and leak services (acl_mem.check, pools, HostBuffer.view, tests).
    checker_verify = _Call("_diagnostics", Diagnostics.checker_verify)
    checker_segment_allocated = _Call("_diagnostics", Diagnostics.checker_segment_allocated)
    checker_segment_freed = _Call("_diagnostics", Diagnostics.checker_segment_freed)
    check_pending = _Call("_diagnostics", Diagnostics.check_pending)
    live_blocks = _Call("_diagnostics", Diagnostics.live_blocks)
    live_vmm = _Call("_vmm", VmmCalls.live_vmm)

    def __init__(self, profile: Profile, *, hazards: str = "warn", check: bool = False,
                 cann: CannVersion | None = None) -> None:
        self.address_space_reserved = _reserve_device_space()
        self._state = state = EngineState(profile, hazards=hazards, check=check,
                                          cann=cann or current_cann())
        self._addresses = AddressMap(state)
        self._diagnostics = Diagnostics(state, self._addresses)
        self._copies_part = Copies(state, self._addresses, self._diagnostics)
        self._streams = StreamCalls(state, self._addresses, self._diagnostics,
                                    self._copies_part)
        self._vmm = VmmCalls(state, self._diagnostics)
        self._events = EventCalls(state, self._streams)
        self._memory = DeviceMemory(state, self._addresses, self._diagnostics, self._vmm)
        #: Each thread's last runtime-layer failure (aclrtGetLastError).
        self._last_error = threading.local()
        self._bind_calls()
        _backends.add(self)
        # The exit report covers every program that ran on a fake, not only those that
        # imported acl_mem.fake (ACL_MEM_LEAK_REPORT).
        arm_leak_report()

    def _bind_calls(self) -> None:
        """Put each part's method into the instance, unless a subclass overrides it."""
        cls = type(self)
        for name, entry in _CALLS:
            if cls is FakeBackend or _defining(cls, name) is entry:
                self.__dict__[name] = getattr(getattr(self, entry.part), entry.name)

    def after_fork(self) -> None:
        """The forked child's fake: as a new process sees the device (fidelity table).

        A thread of the parent may have been inside the fake at the fork, holding its
        lock or half-way through a change; that thread does not exist here. So the
        child gets fresh locks, no current context and empty devices: the parent's
        device pointers, streams and virtual memory are not valid in the child, and
        the child calls aclrtSetDevice and allocates like any new process. Pinned host
        memory stays mapped (views of it may exist) but is no longer registered.
        """
        self._vmm.after_fork()
        self._events.after_fork()
        self._state.after_fork()

    # -- the shared state and the parts' tables, for tests and tools -------------------------------
    @property
    def profile(self) -> Profile:
        return self._state.profile

    @property
    def runtime(self) -> FakeRuntime:
        return self._state.runtime

    @property
    def streams(self) -> StreamTable:
        return self._state.streams

    @property
    def hazards(self) -> Hazards:
        return self._state.hazards

    @property
    def checker(self) -> Checker | None:
        return self._state.checker

    @property
    def _lock(self) -> threading.RLock:
        return self._state.lock

    @property
    def _copies(self) -> dict[int, tuple[int, int, int]]:
        return self._state.copies

    @property
    def _host(self) -> BlockIndex:
        return self._state.pinned

    @property
    def physicals(self) -> dict[int, Physical]:
        return self._vmm.physicals

    @property
    def reservations(self) -> dict[int, Reservation]:
        return self._state.reservations.reservations

    @classmethod
    def from_environment(cls) -> FakeBackend:
        from .config import current_check, current_hazard_mode, current_profile

        return cls(current_profile(), hazards=current_hazard_mode(), check=current_check(),
                   cann=current_cann())

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
            "profile": self._state.profile.name,
            "cann": self._state.cann.name,
            "soc": self._state.profile.soc_name,
            "description": self._state.profile.description,
            "device_count": self._state.profile.device_count,
            "capacity_per_device": self._state.profile.capacity,
            "device_address_space_reserved": self.address_space_reserved,
        }

    def soc_name(self) -> str:
        return self._state.profile.soc_name

    # -- fault injection ---------------------------------------------------------------------------
    INJECTABLE = ("aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached", "aclrtMallocHost",
                  "aclrtReserveMemAddress", "aclrtMallocPhysical", "aclrtMapMem")

    def inject_fault(self, call: str, nth: int = 1, code: int = codes.MEMORY_ALLOCATION) -> None:
        """Make the ``nth`` next call of ``call`` that passes its parameter checks fail
        with ``code`` (as the driver would), once."""
        if call not in self.INJECTABLE:
            raise ValueError(f"inject_fault: call must be one of {self.INJECTABLE}, got {call!r}")
        if type(nth) is not int or nth < 1:
            raise ValueError(f"inject_fault: nth must be an int >= 1, got {nth!r}")
        if type(code) is not int or code == 0:
            raise ValueError(f"inject_fault: code must be a non-zero aclError int, got "
                             f"{code!r} (0 would make the call succeed)")
        with self._state.lock:
            self._state.faults[call] = [nth, code]

    # -- the thread's last error (§3.1.2) ---------------------------------------------------------
    def note_failure(self, rc: int) -> None:
        """A call of this thread failed with ``rc``: the runtime's own failures (107xxx,
        207xxx, 507xxx) become its last error; the ACL layer's parameter checks do not."""
        if rc // 1000 in (107, 207, 507):
            self._last_error.code = rc

    def aclrtGetLastError(self, level: int) -> int:
        if level != 0:
            return codes.INVALID_PARAM
        rc: int = getattr(self._last_error, "code", 0)
        self._last_error.code = 0
        return rc

    def aclrtPeekAtLastError(self, level: int) -> int:
        if level != 0:
            return codes.INVALID_PARAM
        rc: int = getattr(self._last_error, "code", 0)
        return rc

    # -- runtime (§3.1, §3.2) ----------------------------------------------------------------------
    def aclInit(self, config_path: str | None) -> int:
        return self._state.runtime.init(config_path)

    def aclFinalize(self) -> int:
        # Every device is released before a HazardError for lost queued work propagates.
        with self._state.lock, self._state.hazards.held():
            return self._state.runtime.finalize()

    def aclrtSetDevice(self, deviceId: int) -> int:
        return self._state.runtime.set_device(deviceId)

    def aclrtResetDevice(self, deviceId: int) -> int:
        with self._state.lock, self._state.hazards.held():
            return self._state.runtime.reset_device(deviceId)

    def aclrtResetDeviceForce(self, deviceId: int) -> int:
        with self._state.lock, self._state.hazards.held():
            return self._state.runtime.reset_device(deviceId, force=True)

    def aclrtGetDevice(self, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        device = self._state.runtime.current()
        return (codes.CONTEXT_NULL, 0) if device is None else (codes.SUCCESS, device.id)

    def aclrtGetRunMode(self, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        return codes.SUCCESS, self._state.profile.run_mode

    def control_cpu_address(self, ptr: int, size: int) -> int:
        """Where the control CPU reads ``[ptr, ptr+size)`` of device memory in RC mode (the
        fake's backing bytes), or 0: EP mode, or not inside live device memory."""
        if self._state.profile.run_mode != 0:
            return 0
        with self._state.lock:
            located = self._addresses.resolve(ptr, size)
            if located is None or located[1] is None:
                return 0
            return located[0]

    def aclrtGetDeviceCount(self, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        return codes.SUCCESS, len(self._state.runtime.devices)

    # -- contexts (§3.3) -------------------------------------------------------------------------
    def aclrtCreateContext(self, deviceId: int, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        return self._state.runtime.create_context(deviceId)

    def aclrtDestroyContext(self, context: int) -> int:
        if context == 0:
            return codes.INVALID_PARAM
        # Queued work of the context's streams is dropped before a HazardError propagates.
        with self._state.lock, self._state.hazards.held():
            return self._state.runtime.destroy_context(context)

    def aclrtSetCurrentContext(self, context: int) -> int:
        if context == 0:
            return codes.INVALID_PARAM
        return self._state.runtime.set_current_context(
            context, validated=self._state.cann.contexts_checked)

    def aclrtGetCurrentContext(self, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        handle = self._state.runtime.current_handle()
        if handle is None:
            checked = self._state.cann.contexts_checked
            return (codes.CONTEXT_NULL if checked else codes.SUCCESS), 0
        return codes.SUCCESS, handle

    # -- versions (docs/runtime-model.md §0.1) --------------------------------------------------
    def aclrtGetVersion(self, null_outputs: int = 0) -> tuple[int, int, int, int]:
        if null_outputs & 7:
            return codes.INVALID_PARAM, 0, 0, 0
        return (codes.SUCCESS, *self._state.cann.acl_version)

    def aclsysGetVersionStr(self, pkgName: str | None,
                            null_outputs: int = 0) -> tuple[int, str]:
        if null_outputs & 1 or pkgName is None:
            return codes.INVALID_PARAM, ""
        # The fake installs one package: the runtime (also asked for as "cann").
        if pkgName.replace("_", "-") not in ("runtime", "cann"):
            return codes.INTERNAL_ERROR, ""
        return codes.SUCCESS, self._state.cann.version_str

    # -- introspection for tests and tools ---------------------------------------------------------
    def pinned_kept(self) -> tuple[int, int]:
        """Freed pinned blocks kept mapped for a while, and their bytes."""
        with self._state.lock:
            kept = [len(host_map) for _, host_map in self._state.pinned_quarantine]
        return len(kept), sum(kept)

    def resident_bytes(self) -> int:
        """Host RAM this process uses now (RSS), for the sparse-backing checks."""
        with open(f"/proc/{os.getpid()}/statm") as handle:
            return int(handle.read().split()[1]) * HOST_PAGE


def _implements_the_protocol(backend: FakeBackend) -> Backend:
    """Never called: mypy checks here that every call's signature matches the protocol."""
    return backend


_CALLS = [(name, entry) for name, entry in vars(FakeBackend).items()
          if isinstance(entry, _Call)]


def _defining(cls: type, name: str) -> object:
    """What the first class of ``cls``'s MRO that defines ``name`` holds for it."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None
