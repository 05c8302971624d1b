"""The backend contract and the choice of backend.

A backend is the C API with Python ints for pointers: each method returns the
aclError code (0 on success), followed by the outputs C would write through its
out-pointers. ``null_outputs`` is a bit mask: bit *i* set means "pass NULL for
output *i*", so the NULL-argument checks of docs/runtime-model.md §1.2 can be driven on every
backend.

Nothing here touches a driver at import; the backend is chosen on first use
(``ACL_MEM_BACKEND=native|fake|auto``, or :func:`use_backend`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

from . import _env
from ._structs import aclrtMemAccessDesc, aclrtPhysicalMemProp
from .errors import BackendError

__all__ = ["BACKEND_NAMES", "Backend", "backend_name", "backend_reason", "get", "use_backend",
           "using_backend"]

BACKEND_NAMES = ("native", "fake", "auto")


class Backend(Protocol):
    """What both backends implement; signatures follow ``acl_rt.h`` (docs/runtime-model.md §3)."""

    name: str

    def describe(self) -> dict[str, object]: ...
    def soc_name(self) -> str: ...

    def aclInit(self, config_path: str | None) -> int: ...
    def aclFinalize(self) -> int: ...
    def aclrtSetDevice(self, deviceId: int) -> int: ...
    def aclrtResetDevice(self, deviceId: int) -> int: ...
    def aclrtResetDeviceForce(self, deviceId: int) -> int: ...
    def aclrtGetDevice(self, null_outputs: int = 0) -> tuple[int, int]: ...
    def aclrtGetDeviceCount(self, null_outputs: int = 0) -> tuple[int, int]: ...
    def aclrtGetRunMode(self, null_outputs: int = 0) -> tuple[int, int]:
        """Returns ``(rc, run mode)``: 0 ACL_DEVICE (RC), 1 ACL_HOST (EP)."""
        ...

    def control_cpu_address(self, ptr: int, size: int) -> int:
        """In RC mode, the address at which this process reads ``[ptr, ptr+size)`` of device
        memory (the address itself on hardware); 0 in EP mode, where it cannot."""
        ...

    def aclrtGetLastError(self, level: int) -> int: ...
    def aclrtPeekAtLastError(self, level: int) -> int: ...
    def note_failure(self, rc: int) -> None:
        """The raw layer saw a call fail with ``rc`` (the fake keeps the thread's last
        error; the real library keeps its own)."""
        ...

    def aclrtGetVersion(self, null_outputs: int = 0) -> tuple[int, int, int, int]:
        """Returns ``(rc, major, minor, patch)`` of the ACL interface."""
        ...

    def aclsysGetVersionStr(self, pkgName: str | None,
                            null_outputs: int = 0) -> tuple[int, str]:
        """Returns ``(rc, version)`` of an installed CANN package ("runtime", ...)."""
        ...

    def aclrtMalloc(self, size: int, policy: int, null_outputs: int = 0) -> tuple[int, int]: ...
    def aclrtMallocAlign32(
        self, size: int, policy: int, null_outputs: int = 0
    ) -> tuple[int, int]: ...
    def aclrtMallocCached(
        self, size: int, policy: int, null_outputs: int = 0
    ) -> tuple[int, int]: ...
    def aclrtFree(self, devPtr: int) -> int: ...
    def aclrtMallocHost(self, size: int, null_outputs: int = 0) -> tuple[int, int]: ...
    def aclrtFreeHost(self, hostPtr: int) -> int: ...
    def acldvppMalloc(self, size: int, null_outputs: int = 0) -> tuple[int, int]: ...
    def acldvppFree(self, devPtr: int) -> int: ...
    def hi_mpi_dvpp_malloc(
        self, dev_id: int, size: int, null_outputs: int = 0
    ) -> tuple[int, int]: ...
    def hi_mpi_dvpp_free(self, dev_ptr: int) -> int: ...

    def aclrtMemcpy(self, dst: int, destMax: int, src: int, count: int, kind: int) -> int: ...
    def aclrtMemset(self, devPtr: int, maxCount: int, value: int, count: int) -> int: ...
    def aclrtGetMemInfo(self, attr: int, null_outputs: int = 0) -> tuple[int, int, int]: ...
    def aclrtMemGetAddressRange(
        self, ptr: int, null_outputs: int = 0
    ) -> tuple[int, int, int]: ...
    def aclrtPointerGetAttributes(
        self, ptr: int, null_outputs: int = 0
    ) -> tuple[int, int, int, int]:
        """Returns ``(rc, location.type, location.id, pageSize)``."""
        ...

    def aclrtCreateStream(self, null_outputs: int = 0) -> tuple[int, int]: ...
    def aclrtDestroyStream(self, stream: int) -> int: ...
    def aclrtDestroyStreamForce(self, stream: int) -> int: ...
    def aclrtSynchronizeStream(self, stream: int) -> int: ...
    def aclrtSynchronizeDevice(self) -> int: ...
    def aclrtMemcpyAsync(
        self, dst: int, destMax: int, src: int, count: int, kind: int, stream: int
    ) -> int: ...
    def aclrtMemsetAsync(
        self, devPtr: int, maxCount: int, value: int, count: int, stream: int
    ) -> int: ...

    # -- contexts (§3.3) and events (§3.15); handles are ints, 0 is NULL -----------------------
    def aclrtCreateContext(self, deviceId: int, null_outputs: int = 0) -> tuple[int, int]: ...
    def aclrtDestroyContext(self, context: int) -> int: ...
    def aclrtSetCurrentContext(self, context: int) -> int: ...
    def aclrtGetCurrentContext(self, null_outputs: int = 0) -> tuple[int, int]: ...
    def aclrtCreateEvent(self, null_outputs: int = 0) -> tuple[int, int]: ...
    def aclrtCreateEventWithFlag(self, flag: int, null_outputs: int = 0) -> tuple[int, int]: ...
    def aclrtCreateEventExWithFlag(
        self, flag: int, null_outputs: int = 0
    ) -> tuple[int, int]: ...
    def aclrtDestroyEvent(self, event: int) -> int: ...
    def aclrtRecordEvent(self, event: int, stream: int) -> int: ...
    def aclrtResetEvent(self, event: int, stream: int) -> int: ...
    def aclrtStreamWaitEvent(self, stream: int, event: int) -> int: ...
    def aclrtSynchronizeEvent(self, event: int) -> int: ...
    def aclrtQueryEventStatus(self, event: int, null_outputs: int = 0) -> tuple[int, int]: ...
    def aclrtQueryEvent(self, event: int, null_outputs: int = 0) -> tuple[int, int]: ...
    def aclrtEventElapsedTime(
        self, startEvent: int, endEvent: int, null_outputs: int = 0
    ) -> tuple[int, float]:
        """Returns ``(rc, milliseconds)``."""
        ...

    # -- virtual memory (§4); structs are acl_mem._structs objects, None is NULL -------------------
    def aclrtReserveMemAddress(
        self, size: int, alignment: int, expectPtr: int, flags: int, null_outputs: int = 0
    ) -> tuple[int, int]: ...
    def aclrtReleaseMemAddress(self, virPtr: int) -> int: ...
    def aclrtMallocPhysical(
        self, size: int, prop: aclrtPhysicalMemProp | None, flags: int, null_outputs: int = 0
    ) -> tuple[int, int]: ...
    def aclrtFreePhysical(self, handle: int) -> int: ...
    def aclrtMapMem(self, virPtr: int, size: int, offset: int, handle: int, flags: int) -> int: ...
    def aclrtUnmapMem(self, virPtr: int) -> int: ...
    def aclrtMemGetAllocationGranularity(
        self, prop: aclrtPhysicalMemProp | None, option: int, null_outputs: int = 0
    ) -> tuple[int, int]: ...
    def aclrtMemSetAccess(
        self, virPtr: int, size: int, desc: list[aclrtMemAccessDesc] | None, count: int
    ) -> int: ...
    def aclrtMemExportToShareableHandle(
        self, handle: int, handleType: int, flags: int, null_outputs: int = 0
    ) -> tuple[int, int]: ...
    def aclrtMemImportFromShareableHandle(
        self, shareableHandle: int, deviceId: int, null_outputs: int = 0
    ) -> tuple[int, int]: ...
    def aclrtMemSetPidToShareableHandle(
        self, shareableHandle: int, pid: list[int] | None, pidNum: int
    ) -> int: ...
    def aclrtMemRetainAllocationHandle(
        self, virPtr: int, null_outputs: int = 0
    ) -> tuple[int, int]: ...
    def aclrtMemGetAllocationPropertiesFromHandle(
        self, handle: int, null_outputs: int = 0
    ) -> tuple[int, aclrtPhysicalMemProp | None]: ...

    # -- diagnostics: the fake's memory checker and hazard checks; no-ops on native ------------
    def checker_verify(self, when: str = "acl_mem.check()") -> list[tuple[str, str]]:
        """Verify every canary now; every ``(kind, message)`` finding so far."""
        ...

    def checker_segment_allocated(self, parent: int, start: int, requested: int,
                                  size: int) -> None:
        """A pool carved ``[start, start+size)`` of block ``parent`` for ``requested`` bytes."""
        ...

    def checker_segment_freed(self, start: int) -> None:
        """The pool segment at ``start`` was freed (its bytes stay in the pool's block)."""
        ...

    def check_pending(self, start: int, size: int, *, access: str, what: str,
                      targets: tuple[object, ...] | None = None) -> None:
        """Report queued asynchronous work racing with ``what`` on the range."""
        ...


_lock = threading.RLock()


def _fresh_lock_in_child() -> None:
    # Another thread of the parent may have been choosing the backend at the fork.
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock_in_child)
_active: Backend | None = None
_reason = "not chosen yet (chosen on first use)"
_requested: str | None = None
#: Called with each backend that becomes the active one (acl_mem.trace records its calls).
#: A hook must not call back into this module's locked functions; its errors are ignored.
_activation_hooks: list[Callable[[Backend], None]] = []


def _activated(backend: Backend | None) -> None:
    if backend is None:
        return
    for hook in tuple(_activation_hooks):
        with contextlib.suppress(Exception):
            hook(backend)


def _load(name: str) -> Backend:
    if name == "native":
        from ._native import load_native_backend

        return load_native_backend()
    from ._fake import fake_class

    fake: Backend = fake_class().from_environment()
    _point_leak_report_here()
    return fake


def _current() -> Backend | None:
    return _active


def _point_leak_report_here() -> None:
    """The exit leak report (ACL_MEM_LEAK_REPORT) reads the active backend from here."""
    from ._fake import leak_report

    leak_report.active_backend = _current


def _choose(requested: str | None) -> tuple[Backend, str]:
    source = "use_backend()" if requested else "ACL_MEM_BACKEND"
    requested = requested or _env.choice("ACL_MEM_BACKEND", BACKEND_NAMES, "auto")
    if requested not in BACKEND_NAMES:
        raise BackendError(
            f"ACL_MEM_BACKEND={requested!r} is not one of {', '.join(BACKEND_NAMES)}"
        )
    if requested != "auto":
        return _load(requested), f"{requested}: requested by {source}"
    try:
        native = _load("native")
    except BackendError as exc:
        return _load("fake"), f"fake: chosen by auto because the native backend failed: {exc}"
    rc, count = native.aclrtGetDeviceCount()
    if rc == 0 and count > 0:
        return native, f"native: chosen by auto ({count} device(s) reported)"
    return _load("fake"), (
        f"fake: chosen by auto because libascendcl loaded but reported no device "
        f"(aclrtGetDeviceCount rc={rc}, count={count})"
    )


def get() -> Backend:
    """The active backend, chosen now if this is the first use."""
    global _active, _reason
    backend = _active
    if backend is not None:
        return backend
    with _lock:
        if _active is not None:
            return _active
        chosen, reason = _choose(_requested)
        _active, _reason = chosen, reason
        if _activation_hooks:
            _activated(chosen)
        return chosen


def use_backend(name: str) -> None:
    """Choose ``"native"``, ``"fake"`` or ``"auto"`` before the first call.

    Raises :class:`BackendError` if another backend is already in use, or if the
    requested one cannot load (the message lists every path tried and why).
    """
    global _requested, _active, _reason
    if name not in BACKEND_NAMES:
        raise ValueError(f"use_backend: name must be one of {BACKEND_NAMES}, got {name!r}")
    with _lock:
        if _active is not None:
            if name in ("auto", _active.name):
                return
            raise BackendError(
                f"use_backend({name!r}): backend {_active.name!r} is already in use "
                f"({_reason}); choose before the first call"
            )
        # Nothing is remembered when the requested backend fails to load.
        _active, _reason = _choose(name)
        _requested = name
        if _activation_hooks:
            _activated(_active)


def backend_name() -> str:
    """``"native"`` or ``"fake"``: the backend in use (chosen now if needed)."""
    return get().name


def backend_reason() -> str:
    """Why the active backend was chosen (what ``acl-mem info`` prints)."""
    get()
    return _reason


@contextlib.contextmanager
def using_backend(backend: Backend | str, reason: str = "") -> Iterator[Backend]:
    """Make ``backend`` the active one inside the block, then restore the previous one.

    ``backend`` is ``"fake"`` (a fresh fake from the environment's settings), ``"native"``,
    or any object implementing :class:`Backend` (for example a FakeBackend subclass that
    plays a newer runtime). For tests and tools: devices, buffers and streams made inside
    belong to that backend; entering and leaving the block releases the Python-side
    ownership of everything made before, as aclFinalize would.
    """
    from ._lifecycle import state

    if isinstance(backend, str):
        if backend not in ("fake", "native"):
            raise ValueError(f"using_backend: backend must be 'fake', 'native' or a Backend "
                             f"object, got {backend!r}")
        chosen = _load(backend)
    else:
        chosen = backend
    # Under the state's lock: a thread learning a context (acl_mem._context) finishes
    # with the old backend first, or starts with the new one.
    with state.lock:
        state.teardown()
        previous = _install(chosen, reason or f"{chosen.name}: installed by using_backend()")
    try:
        yield chosen
    finally:
        with state.lock:
            state.teardown()
            _install(previous)


def _install(backend: Backend | None, reason: str = "installed by tests") -> Backend | None:
    """Swap the active backend (tests run one suite per backend); returns the old one."""
    global _active, _reason
    if getattr(backend, "superseded", False):
        # A fake whose engine a newer fake took (the process has one): it starts afresh,
        # and what Python held of it is released.
        from ._lifecycle import state

        with state.lock:
            state.teardown()
            backend.resume()  # type: ignore[union-attr]
    if backend is not None and backend.name == "fake":
        _point_leak_report_here()
    with _lock:
        previous = _active
        _active, _reason = backend, reason if backend is not None else _reason
        if _activation_hooks and backend is not previous:
            _activated(backend)
        return previous
