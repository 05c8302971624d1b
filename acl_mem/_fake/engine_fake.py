"""The fake backend over acl_mem's C library: the native binding on acl_mem's own
libascendcl (``library.py``), plus what only a binding can add to it.

The library models the device, the rules and the diagnostics; it is one per process, so
making an :class:`EngineFake` configures and resets that one engine (a new process's
state). What the binding adds:

- **Findings as Python sees them.** The library queues hazards and memory-checker
  findings (``acl_mem_fake_set_hazards(..., queue)``); after each call the binding reads
  the library's waiting counter through a cached pointer (one load) and drains the queue
  only when it is non-zero. Each finding becomes a ``HazardWarning`` / ``MemoryCheckWarning``
  pointing at the user's line, or, in "raise" mode, a ``HazardError`` /
  ``MemoryCheckError`` raised once the call's effect is done (the first finding, naming
  how many more there were), or only a count.
- **Python call sites.** With the checker on, each allocation's Python stack is kept by
  address, for leak lists and findings.
- **The release's functions.** One library plays every release; a function the release
  lacks raises ``FunctionNotAvailableError``, as the native backend does for a function
  Huawei's library of that release lacks.
"""

from __future__ import annotations

import inspect
import os
import re
import threading
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._native.backend import NativeBackend
from ..errors import (
    BackendError,
    FunctionNotAvailableError,
    HazardError,
    HazardWarning,
    MemoryCheckError,
    MemoryCheckWarning,
)
from ..sizes import pool_of_page
from .config import (
    HAZARD_MODES,
    current_cann,
    current_check,
    current_hazard_mode,
    current_profile,
)
from .leak_report import arm as arm_leak_report
from .library import RELEASE_DIRS, EngineLibrary, private_copy
from .profiles import Profile
from .stacks import Stack, allocation_stack, user_stacklevel
from .trace_capture import TraceCapture
from .versions import CannVersion

__all__ = ["EngineFake", "Held", "LiveBlock"]

#: Devices a fake can have (the library's limit, as the runtime's).
MAX_DEVICES = 32
#: Kinds the memory checker reports; every other kind is a hazard.
CHECKER_KINDS = frozenset({"boundary-crossed", "canary-overwritten", "use-after-free"})
#: The calls whose result is a new block (their Python stacks are kept while checking).
ALLOCATING = frozenset({"aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached",
                        "aclrtMallocHost", "acldvppMalloc", "hi_mpi_dvpp_malloc"})
FREEING = frozenset({"aclrtFree", "aclrtFreeHost", "acldvppFree", "hi_mpi_dvpp_free"})
#: Where a checker finding names the block or segment it is about.
_NAMED = re.compile(r"(?:block|segment) (0x[0-9a-f]+)")
_SITE = "allocated at:\n"
#: The library's leak list names virtual memory with these calls.
VMM_CALLS = frozenset({"aclrtReserveMemAddress", "aclrtMallocPhysical", "aclrtMapMem",
                       "aclrtMemImportFromShareableHandle"})


@dataclass(frozen=True)
class LiveBlock:
    """A block the library still holds (what ``live_blocks`` lists)."""

    start: int
    requested: int
    api: str
    device: int | None
    stack: Stack | None
    #: Bytes it takes of its page pool, padding included, and their page size.
    extent: int = 0
    page_size: int = 0


@dataclass(frozen=True)
class Held:
    """A virtual-memory resource the library still holds (what ``live_vmm`` lists): a
    reservation, a physical handle not freed yet, or a mapping (which keeps its physical
    memory even after that handle was freed)."""

    api: str
    address: int
    size: int
    device: int | None
    #: Page pool of physical memory (normal, huge, giant); "-" for the others.
    pool: str = "-"


class Seen:
    """Every finding of this fake, by kind, and the mode they are reported in."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.seen: list[tuple[str, str]] = []

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for kind, _ in self.seen:
            found[kind] = found.get(kind, 0) + 1
        return found


class EngineFake(NativeBackend):
    """The fake backend: acl_mem's C library through the native binding."""

    name = "fake"
    #: The library's control API (set by ``_take_engine``; a raising stand-in once a newer
    #: fake took the engine).
    control: EngineLibrary

    def __init__(self, profile: Profile, *, hazards: str = "warn", check: bool = False,
                 cann: CannVersion | None = None, private: bool = False) -> None:
        _mode(hazards)
        if not 1 <= profile.device_count <= MAX_DEVICES:
            raise ValueError(f"fake: device_count must be in [1, {MAX_DEVICES}], got "
                             f"{profile.device_count}")
        self.cann = cann or current_cann()
        self._profile = profile
        self.checking = bool(check)
        self.hazards = Seen(hazards)
        self.findings: list[tuple[str, str]] = []
        #: Python stacks of live blocks (and of pinned blocks freed since: a write through
        #: a pointer that outlived the free names them) and of pool segments, by start.
        self._stacks: dict[int, Stack] = {}
        self._segments: dict[int, int] = {}  # segment start -> its parent block
        self._stacks_lock = threading.Lock()
        #: Findings of other live Python threads' calls, until those threads report them.
        self._stashed: dict[int, list[tuple[str, str]]] = {}
        # The library ACL_MEM_FAKE_CANN chose at first use, one per process (a second copy
        # would be a second engine, and the DVPP libraries reach the engine by its
        # soname). The newest release's library plays every release; CANN 8.5.0's own
        # only that one, as it lacks a function the later ones export. A private fake has
        # the process's second engine, a copy of that library.
        control, binding = _private_engine() if private else _engine()
        self._own = {**binding.__dict__, "control": control}
        self._take_engine()
        _instances.add(self)
        self.address_space_reserved = control.describe().address_space_reserved

    def _take_engine(self) -> None:
        """Configure the library for this fake (a fresh device) and make every other fake
        on it refuse its calls: their memory is gone with the engine's."""
        self.__dict__.update(self._own)
        control = self.control
        profile = self._profile
        try:
            control.configure(profile.name, self.cann.name, profile.device_count,
                              profile.capacity)
        except ValueError:
            if not control.path.endswith(f"/{RELEASE_DIRS['8.5.0']}/libascendcl.so"):
                raise
            raise ValueError(
                f"fake: CANN {self.cann.name} cannot be played by CANN 8.5.0's own library, "
                "which ACL_MEM_FAKE_CANN=8.5.0 chose for this process; start the process "
                "without it to switch releases") from None
        control.set_hazards("count", queue=True)
        # Python prints the exit report itself, with the Python stacks it keeps.
        control.set_leak_report(False)
        arm_leak_report()
        control.set_check(self.checking)
        self._waiting = control.ffi.addressof(control.lib, "acl_mem_fake_findings_waiting")
        self._queued = control.ffi.addressof(control.lib, "acl_mem_fake_queued_work")
        with self._stacks_lock:
            self._stacks.clear()
            self._segments.clear()
        self.findings.clear()
        self.hazards.seen.clear()
        self._stashed.clear()
        for other in list(_instances):
            if other is not self and other._own["control"] is control:
                other._superseded()

    def _superseded(self) -> None:
        gone = _Superseded(self._profile.name)
        # Everything that reaches the library: each raises once the engine is gone.
        self.__dict__.update({name: gone for name in (
            "lib", "control", "_dvpp", "_mpi", "_fast", "_c_malloc", "_c_free", "_c_memcpy",
            "_c_memset")})

    def trace_capture(self) -> TraceCapture | None:
        """The library's capture of traced calls (acl_mem.trace records through it), or
        None once superseded."""
        control = self.__dict__.get("control")
        return control.capture if isinstance(control, EngineLibrary) else None

    @property
    def superseded(self) -> bool:
        """Whether a newer fake took the process's engine (this one's calls then raise
        BackendError until :meth:`resume`)."""
        return isinstance(self.__dict__.get("lib"), _Superseded)

    def resume(self) -> None:
        """Take the engine back after a newer fake took it: a fresh device, as after
        ``acl_mem.fake.reset()`` (what was allocated before is gone)."""
        if self.superseded:
            self._take_engine()

    @classmethod
    def from_environment(cls) -> EngineFake:
        return cls(current_profile(), hazards=current_hazard_mode(), check=current_check(),
                   cann=current_cann())

    # -- what the library reports, as Python reports it ---------------------------------------
    def _report(self) -> None:
        raised: list[tuple[type[Exception], str]] = []
        for kind, text in self._mine():
            checker = kind in CHECKER_KINDS
            if checker:
                text = self._python_site(text)
            (self.findings if checker else self.hazards.seen).append((kind, text))
            message = f"{kind}: {text}"
            if self.hazards.mode == "raise":
                raised.append((MemoryCheckError if checker else HazardError, message))
            elif self.hazards.mode == "warn":
                warnings.warn(message, MemoryCheckWarning if checker else HazardWarning,
                              stacklevel=user_stacklevel())
        if raised:
            error, first = raised[0]
            more = f" (and {len(raised) - 1} more)" if len(raised) > 1 else ""
            raise error(first + more)

    def _mine(self) -> list[tuple[str, str]]:
        """The findings to report in this thread: the ones its calls made, and those of
        threads that cannot report them (C threads, threads that ended). Findings of
        another live Python thread wait for that thread's next call."""
        me = threading.get_ident()
        taken = self.control.findings_of()
        alive: set[int | None] | None = None
        mine: list[tuple[str, str]] = []
        with self._stacks_lock:
            if self._stashed:
                alive = {thread.ident for thread in threading.enumerate()}
                for thread in [t for t in self._stashed if t == me or t not in alive]:
                    mine += self._stashed.pop(thread)
            for kind, text, thread in taken:
                if thread and thread != me:
                    if alive is None:
                        alive = {t.ident for t in threading.enumerate()}
                    if thread in alive:
                        self._stashed.setdefault(thread, []).append((kind, text))
                        continue
                mine.append((kind, text))
        return mine

    def _python_site(self, text: str) -> str:
        """The library names the allocating C caller, which for a Python program is the
        binding itself: the block's Python stack replaces it, when kept."""
        head, site, _ = text.partition(_SITE)
        if not site:
            return text
        for named in _NAMED.finditer(head):
            stack = self._stacks.get(int(named.group(1), 16))
            if stack is not None:
                return head + site + ("".join(stack).rstrip() or "  (stack not recorded)")
        return text

    def set_modes(self, *, hazards: str | None = None, check: bool | None = None) -> None:
        """Change how findings are reported, or the checker, keeping the memory."""
        if hazards is not None:
            self.hazards.mode = _mode(hazards)
        if check is not None:
            self.checking = bool(check)
            self.control.set_check(self.checking)

    # -- the checker's services (acl_mem.check, pools) ------------------------------------------
    def checker_verify(self, when: str = "acl_mem.check()") -> list[tuple[str, str]]:
        if not self.checking:
            return []
        self.control.check()
        if self._waiting[0] or self._stashed:
            self._report()
        return list(self.findings)

    def checker_segment_allocated(self, parent: int, start: int, requested: int,
                                  size: int) -> None:
        if self.checking:
            self.control.segment_allocated(parent, start, requested, size)
            with self._stacks_lock:
                self._stacks[start] = allocation_stack()
                self._segments[start] = parent

    def checker_segment_freed(self, start: int) -> None:
        if self.checking:
            self.control.segment_freed(start)
            if self._waiting[0] or self._stashed:
                self._report()

    def check_pending(self, start: int, size: int, *, access: str, what: str,
                      targets: tuple[object, ...] | None = None) -> None:
        """The host reads or writes ``[start, start+size)`` itself: a hazard when queued
        stream work races with it (``access`` "read", "write" or "free")."""
        if self._queued[0] == 0:
            return  # nothing queued to race with: no call (a pool asks at every free)
        self.control.host_access(start, size, access=access, what=what)
        if self._waiting[0] or self._stashed:
            self._report()

    # -- what is held (leak lists, tests) ------------------------------------------------------
    def live_blocks(self) -> list[LiveBlock]:
        stacks = self._stacks
        return [LiveBlock(leak.address, leak.size, leak.api, leak.device,
                          stacks.get(leak.address), leak.extent, leak.page_size)
                for leak in self.control.leaks() if leak.api not in VMM_CALLS]

    def live_vmm(self) -> list[Held]:
        return [Held(leak.api, leak.address, leak.size, leak.device,
                     pool_of_page(leak.page_size) or "-")
                for leak in self.control.leaks() if leak.api in VMM_CALLS]

    def pinned_kept(self) -> tuple[int, int]:
        """Freed pinned blocks the library keeps mapped for a while, and their bytes."""
        described = self.control.describe()
        return described.pinned_kept, described.pinned_kept_bytes

    def resident_bytes(self) -> int:
        """Host RAM this process uses now (RSS), for the sparse-backing checks."""
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def forget_thread(self) -> None:
        """The calling thread starts over with no current device or context, as a new
        thread would (a trace replay runs many recorded threads in one)."""
        self.control.forget_thread()

    def inject_fault(self, call: str, nth: int = 1, code: int = 207001) -> None:
        self.control.inject_fault(call, nth, code)

    @property
    def profile(self) -> Profile:
        return self._profile

    def describe(self) -> dict[str, object]:
        return {
            "profile": self._profile.name,
            "cann": self.cann.name,
            "soc": self._profile.soc_name,
            "description": self._profile.description,
            "device_count": self._profile.device_count,
            "capacity_per_device": self._profile.capacity,
            "device_address_space_reserved": self.address_space_reserved,
            "library": self.path,
        }

    def soc_name(self) -> str:
        return self._profile.soc_name

    # -- the malloc+free pair, written out as NativeBackend's with the findings check: no
    # wrapper frame (the pair costs 1.05x the bare binding's; the generic wrapper below,
    # which every other call takes, 1.2x) ------------------------------------------------
    def _after(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        if self.checking and (name in ALLOCATING or name in FREEING):
            _note(self, name, args, result)
        if self._waiting[0] or self._stashed:
            self._report()

    def aclrtMalloc(self, size: int, policy: int, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs:
            result = self._alloc(self.lib.aclrtMalloc, null_outputs, size, policy)
        else:
            out = self._fast_new(self._uintptr_p)
            try:
                rc: int = self._c_malloc(out, size, policy)
                result = rc, out[0] if rc == 0 else 0
            except (OverflowError, TypeError):  # what the declared types convert
                result = self._alloc(self.lib.aclrtMalloc, null_outputs, size, policy)
        if self.checking or self._waiting[0] or self._stashed:
            self._after("aclrtMalloc", (size, policy), result)
        return result

    def aclrtFree(self, devPtr: int) -> int:
        try:
            rc: int = self._c_free(devPtr)
        except (OverflowError, TypeError):
            rc = self.lib.aclrtFree(self._ptr(devPtr))
        if self.checking or self._waiting[0] or self._stashed:
            self._after("aclrtFree", (devPtr,), rc)
        return rc

    # Copies are the next most frequent: no generic wrapper either (it costs 0.35 us a call),
    # and NativeBackend's written out (calling it costs a frame, 0.1 us).
    def aclrtMemcpy(self, dst: int, destMax: int, src: int, count: int, kind: int) -> int:
        try:
            rc: int = self._c_memcpy(dst, destMax, src, count, kind)
        except (OverflowError, TypeError):
            rc = _native_memcpy(self, dst, destMax, src, count, kind)
        if self._waiting[0] or self._stashed:
            self._report()
        return rc

    def aclrtMemset(self, devPtr: int, maxCount: int, value: int, count: int) -> int:
        rc = _native_memset(self, devPtr, maxCount, value, count)
        if self._waiting[0] or self._stashed:
            self._report()
        return rc

    def aclrtMemGetAddressRange(self, ptr: int, null_outputs: int = 0) -> tuple[int, int, int]:
        if self.cann.name == "8.5.0":
            raise FunctionNotAvailableError("aclrtMemGetAddressRange", "8.5.0", "9.0.1")
        return super().aclrtMemGetAddressRange(ptr, null_outputs)


def _mode(hazards: str) -> str:
    if hazards not in HAZARD_MODES:
        raise ValueError(f"hazards must be one of {HAZARD_MODES}, got {hazards!r}")
    return hazards


_native_memcpy = NativeBackend.aclrtMemcpy
_native_memset = NativeBackend.aclrtMemset


class _Superseded:
    """What a fake's library is once a newer fake took the process's engine: every call
    raises a BackendError that says so, where it would otherwise act on the newer fake's
    memory."""

    def __init__(self, profile: str) -> None:
        self._profile = profile

    def __getattr__(self, name: str) -> Any:
        raise BackendError(
            f"{name}: this fake ({self._profile}) was replaced by a newer one (acl_mem.fake."
            "configure, reset or make_backend): the process has one fake engine, and this "
            "fake's memory went with it; use the newer fake, or acl_mem.fake.reset() for a "
            "fresh active one (make_backend(private=True) leaves the active fake alone)")


class _EngineSide:
    """The DVPP calls of a private copy of the library, made on its own engine."""

    def __init__(self, ffi: Any, path: str) -> None:
        ffi.cdef("""
            int acl_mem_engine_dvpp_malloc(void **devPtr, size_t size, const void *caller);
            int acl_mem_engine_dvpp_free(void *devPtr);
            int32_t acl_mem_engine_mpi_malloc(uint32_t dev_id, void **dev_ptr, uint64_t size,
                                              const void *caller);
            int32_t acl_mem_engine_mpi_free(void *dev_ptr);""", override=True)
        self._lib = ffi.dlopen(path)
        self._null = ffi.NULL

    def acldvppMalloc(self, devPtr: Any, size: int) -> int:
        return int(self._lib.acl_mem_engine_dvpp_malloc(devPtr, size, self._null))

    def acldvppFree(self, devPtr: Any) -> int:
        return int(self._lib.acl_mem_engine_dvpp_free(devPtr))

    def hi_mpi_dvpp_malloc(self, dev_id: int, dev_ptr: Any, size: int) -> int:
        return int(self._lib.acl_mem_engine_mpi_malloc(dev_id, dev_ptr, size, self._null))

    def hi_mpi_dvpp_free(self, dev_ptr: Any) -> int:
        return int(self._lib.acl_mem_engine_mpi_free(dev_ptr))


_bindings: dict[str, NativeBackend] = {}
_private: dict[str, tuple[EngineLibrary, NativeBackend]] = {}
_bindings_lock = threading.Lock()


def _engine() -> tuple[EngineLibrary, NativeBackend]:
    """The process's engine and its native binding, made once (the binding's declarations
    take 25 ms to parse)."""
    control = EngineLibrary.get()
    directory = os.path.dirname(control.path)
    with _bindings_lock:
        found = _bindings.get(directory)
        if found is None:
            found = _bindings[directory] = NativeBackend(directory)
        return control, found


def _private_engine() -> tuple[EngineLibrary, NativeBackend]:
    """The process's second engine: a copy of the first's library, loaded once."""
    directory = Path(os.path.dirname(EngineLibrary.get().path))
    with _bindings_lock:
        found = _private.get(str(directory))
        if found is None:
            path = private_copy(directory)
            control = EngineLibrary(path=path, copy_of=str(directory / "libascendcl.so"))
            binding = NativeBackend(library_path=path)
            # Its DVPP libraries would reach the first engine (by the soname they need):
            # the copy's own entry points stand in for them.
            side = _EngineSide(binding.ffi, path)
            binding.__dict__.update(_dvpp=side, _mpi=side)
            found = _private[str(directory)] = (control, binding)
        return found


#: Every EngineFake of the process, for the fork handler.
_instances: weakref.WeakSet[EngineFake] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child: the library forgot the parent's blocks (a child starts with no
    devices), so their stacks go too; a lock another thread held at the fork is new."""
    global _bindings_lock
    _bindings_lock = threading.Lock()
    for fake in list(_instances):
        fake._stacks_lock = threading.Lock()
        fake._lock = fake._own["_lock"] = threading.Lock()  # the DVPP libraries' loading
        fake._stashed = {}  # the parent's other threads are not in the child
        fake._stacks = {}
        fake._segments = {}


os.register_at_fork(after_in_child=_after_fork_in_child)


def _reporting(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, then the findings it made (one load when there are none); allocations
    and frees keep the Python stacks while the checker is on."""
    def call(self: EngineFake, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        if self.checking or self._waiting[0] or self._stashed:
            self._after(name, args, result)
        return result

    call.__name__ = call.__qualname__ = name
    call.__doc__ = method.__doc__
    call.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return call


def _note(fake: EngineFake, name: str, args: tuple[Any, ...], result: Any) -> None:
    with fake._stacks_lock:
        if name in ALLOCATING:
            if result[0] == 0 and result[1]:
                fake._stacks[result[1]] = allocation_stack()
        elif result == 0 and args and name != "aclrtFreeHost":
            # A freed pinned block keeps its stack until its address is reused: the
            # library reports writes through pointers that outlived aclrtFreeHost.
            stacks, segments, start = fake._stacks, fake._segments, args[0]
            stacks.pop(start, None)
            for segment in [s for s, parent in segments.items() if parent == start]:
                del segments[segment]
                stacks.pop(segment, None)


for _name in dir(NativeBackend):
    if _name.startswith(("acl", "hi_mpi_")) and _name not in vars(EngineFake):
        setattr(EngineFake, _name, _reporting(_name, getattr(NativeBackend, _name)))
EngineFake.aclrtMemGetAddressRange = _reporting(  # type: ignore[method-assign]
    "aclrtMemGetAddressRange", vars(EngineFake)["aclrtMemGetAddressRange"])
