"""Run inside the engine's interpreter (acl_mem/shim/_engine.py): attach Python code to
each ``extern "Python"`` entry point."""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from typing import Any

from .. import _backend, _hints
from ..errors import error_name
from ._decls import arg_names, sections
from ._marshal import forwarder

__all__ = ["ALLOCATING", "CALLBACK_FAILED", "CallerSites", "failure_text", "install",
           "leak_report_at_exit", "reset_device_force"]

#: What an entry point returns if the engine raised (a bug in acl_mem: cffi prints the
#: traceback): ACL_ERROR_RT_INTERNAL_ERROR, as the test suite's stand-in does.
CALLBACK_FAILED = 507000
_CONTEXT_NULL = 107002


def failure_text(name: str, rc: int, args: dict[str, object]) -> str:
    """What aclGetRecentErrMsg says about a failed call: the call with its arguments, the
    error's name and code, and acl_mem's hint (as the Python layer's AclError says it)."""
    what = _hints.describe(name, args)
    try:
        if rc == _CONTEXT_NULL:  # the Python hint names Python calls
            return (f"{what}: {error_name(rc)} ({rc}). No device is current in this thread: "
                    "each thread starts without one, and the reset that drops a device's "
                    "last reference leaves none. Call aclrtSetDevice or "
                    "aclrtSetCurrentContext in this thread first")
        size, policy = args.get("size"), args.get("policy", 0)
        return str(_hints.error(rc, what, size=size if isinstance(size, int) else None,
                                policy=policy if isinstance(policy, int) else 0))
    except Exception:  # a hint that cannot be made only shortens the text
        return f"{what}: {error_name(rc)} ({rc})"


def _noter(lib: Any, name: str) -> Callable[[int, dict[str, object]], None]:
    def failed(rc: int, args: dict[str, object]) -> None:
        try:
            text = failure_text(name, rc, args)
        except Exception:
            text = f"{name}: {rc}"
        lib.acl_mem_shim_note(text.encode("utf-8", "replace"))

    return failed


def reset_device_force(deviceId: int) -> int:
    """aclrtResetDeviceForce on the fake: aclrtResetDevice until no reference is left,
    under the runtime's lock (acl_mem/shim/_extra.py)."""
    backend = _backend.get()
    runtime = getattr(backend, "runtime", None)
    if runtime is None:  # not the fake: install() makes it the fake, so never here
        return backend.aclrtResetDevice(deviceId)
    with runtime.lock:
        rc = backend.aclrtResetDevice(deviceId)
        while rc == 0 and runtime.references(deviceId) > 0:
            rc = backend.aclrtResetDevice(deviceId)
        return rc


def leak_report_at_exit() -> None:
    """The C program's exit (the front library's atexit hook): the fake's leak report,
    as a Python program gets it from acl_mem.fake when ACL_MEM_LEAK_REPORT is set."""
    if os.environ.get("ACL_MEM_LEAK_REPORT", "0") in ("", "0"):
        return
    from .. import fake

    atexit.unregister(fake._report_leaks_at_exit)  # never twice, should Python finalize
    try:
        fake._report_leaks_at_exit()
    finally:
        sys.stderr.flush()


#: The calls that make a block (the checker records where: acl_mem/shim/_extra.py, "Sites").
ALLOCATING = frozenset({"aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached",
                        "aclrtMallocHost", "acldvppMalloc", "hi_mpi_dvpp_malloc"})
#: Callers whose Python frames already say who called (ctypes and cffi call through libffi).
_PYTHON_CALLERS = ("libffi", "_ctypes", "_cffi_backend")
_SITE_SOURCE = "def site(function, *args): return function(*args)\n"
_SITES_KEPT = 4096


class CallerSites:
    """A Python frame per C caller, for the checker's allocation stacks.

    ``call(function, *args)`` calls ``function`` inside a frame whose code names the C
    caller the front library noted for this thread: file = the caller's object, function
    = ``symbol+0xoffset`` (or the offset in the object when it exports no symbol there),
    line 0. Frames are made once per return address (at most 4096 kept).
    """

    def __init__(self, ffi: Any, lib: Any) -> None:
        self._ffi = ffi
        self._lib = lib
        self._sites: dict[int, Callable[..., Any] | None] = {}

    def describe(self, address: int) -> tuple[str, str] | None:
        """(object file, ``symbol+0xoffset``) of a return address; None if unknown or a
        call from libffi."""
        ffi = self._ffi
        out, start = ffi.new("char *[2]"), ffi.new("uintptr_t *")  # cffi drops the GIL
        if not self._lib.acl_mem_shim_where(address, out, out + 1, start):
            return None
        file = os.fsdecode(ffi.string(out[0]))
        if os.path.basename(file).startswith(_PYTHON_CALLERS):
            return None
        offset = address - int(start[0])
        if out[1] == ffi.NULL:
            return file, (f"+{offset:#x} (no exported symbol here: a static function, or a "
                          "program linked without -rdynamic)")
        return file, f"{os.fsdecode(ffi.string(out[1]))}+{offset:#x}"

    def site(self, address: int) -> Callable[..., Any] | None:
        if address in self._sites:
            return self._sites[address]
        where = self.describe(address)
        site: Callable[..., Any] | None = None
        if where is not None:
            namespace: dict[str, Any] = {}
            exec(compile(_SITE_SOURCE, where[0], "exec"), namespace)
            site = namespace["site"]
            site.__code__ = site.__code__.replace(co_name=where[1], co_firstlineno=0)
        if len(self._sites) >= _SITES_KEPT:
            self._sites.clear()
        self._sites[address] = site
        return site

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function``, run inside its caller's frame while the fake's checker is on."""
        caller = self._lib.acl_mem_shim_caller
        get = _backend.get
        site_of = self.site

        def allocating(*args: Any) -> Any:
            if getattr(get(), "checker", None) is None:
                return function(*args)
            site = site_of(caller())
            return function(*args) if site is None else site(function, *args)

        return allocating


def install(ffi: Any, lib: Any) -> None:
    """Make the fake the active backend and route every entry point to it.

    In a process that already uses the native backend this raises BackendError: the
    shim runs the fake only (the native backend over the shim would call itself).
    """
    _backend.use_backend("fake")
    sites = CallerSites(ffi, lib)
    for _, _, decls in sections():
        for _, name, args in decls:
            # The function's own type (the entry point itself takes pointers as integers).
            fntype = ffi.typeof(f"acl_mem_ft_{name}")
            names = [n for n in arg_names(args).split(", ") if n]
            function = forwarder(ffi, name, fntype, _backend.get, lowered=True,
                                 failed=_noter(lib, name), names=names)
            if name in ALLOCATING:
                function = sites.wrap(function)
            if fntype.result.kind == "pointer":
                ffi.def_extern(name=f"acl_mem_py_{name}")(function)
            else:
                ffi.def_extern(name=f"acl_mem_py_{name}", error=CALLBACK_FAILED)(function)
    note_force = _noter(lib, "aclrtResetDeviceForce")

    def force(deviceId: int) -> int:
        rc = reset_device_force(deviceId)
        if rc:
            note_force(rc, {"deviceId": deviceId})
        return rc

    ffi.def_extern(name="acl_mem_py_aclrtResetDeviceForce", error=CALLBACK_FAILED)(force)
    ffi.def_extern(name="acl_mem_py_at_exit")(leak_report_at_exit)
