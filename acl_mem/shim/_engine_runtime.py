"""Run inside the engine's interpreter (acl_mem/shim/_engine.py): attach Python code to
each ``extern "Python"`` entry point."""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from typing import Any

from .. import _backend, _env, _hints
from ..errors import error_name
from ._decls import arg_names, sections
from ._marshal import fast_eligible, forwarder, roles

__all__ = [
    "ALLOCATING",
    "CALLBACK_FAILED",
    "CallerSites",
    "at_exit",
    "failure_text",
    "install",
    "leak_report_at_exit",
]

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


#: aclrtGetLastError / aclrtPeekAtLastError: their result is the code they report.
LAST_ERROR_GETTERS = frozenset({"aclrtGetLastError", "aclrtPeekAtLastError"})


def _noter(lib: Any, name: str) -> Callable[[int, dict[str, object]], None]:
    def failed(rc: int, args: dict[str, object]) -> None:
        _backend.get().note_failure(rc)
        try:
            text = failure_text(name, rc, args)
        except Exception:
            text = f"{name}: {rc}"
        lib.acl_mem_shim_note(text.encode("utf-8", "replace"))

    return failed


def at_exit(where: Callable[[int], str | None] | None = None) -> None:
    """The C program's exit (the front library's atexit hook), which the embedded
    interpreter never reaches by finalising: what a Python program's exit does. The
    recordings of ACL_MEM_TRACE end (their last calls and end line written), then the
    leak report."""
    recorder = sys.modules.get("acl_mem.trace._recorder")
    try:
        if recorder is not None:
            recorder.stop_all()
    finally:
        leak_report_at_exit(where)


def leak_report_at_exit(where: Callable[[int], str | None] | None = None) -> None:
    """The C program's exit (the front library's atexit hook): the fake's leak report,
    as a Python program gets it from acl_mem.fake when ACL_MEM_LEAK_REPORT is set;
    ``where(address)`` names the C caller of a block the checker recorded no stack for."""
    if not leak_report_wanted():
        return
    from .. import fake

    atexit.unregister(fake._report_leaks_at_exit)  # never twice, should Python finalize
    try:
        fake._report_leaks_at_exit(where)
    finally:
        sys.stderr.flush()


def leak_report_wanted() -> bool:
    return _env.flag("ACL_MEM_LEAK_REPORT")


#: The calls that make a block (the checker records where: acl_mem/shim/_extra.py, "Sites").
ALLOCATING = frozenset({"aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached",
                        "aclrtMallocHost", "acldvppMalloc", "hi_mpi_dvpp_malloc"})
#: Callers whose Python frames already say who called (ctypes and cffi call through libffi).
_PYTHON_CALLERS = ("libffi", "_ctypes", "_cffi_backend")
_SITE_SOURCE = "def site(function, *args): return function(*args)\n"
_SITES_KEPT = 4096
#: Allocation callers noted for the leak report before the live blocks are looked up to
#: forget the freed ones (the bound doubles when most are still live).
_NOTED_KEPT = 1 << 16


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
        self._noted: dict[int, int] = {}
        self._noted_kept = _NOTED_KEPT

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
        # One lookup: another thread may clear the cache between a test and a read.
        try:
            return self._sites[address]
        except KeyError:
            pass
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

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` inside a frame named after this thread's C caller (the
        marshalling calls this while the fake's checker is on)."""
        site = self.site(self._lib.acl_mem_shim_caller())
        return function(*args) if site is None else site(function, *args)

    def note(self, address: int) -> None:
        """The block at ``address`` was just allocated by this thread's C caller (kept
        for the leak report: only the return address, described when a leak is shown)."""
        noted = self._noted
        noted[address] = self._lib.acl_mem_shim_caller()
        if len(noted) > self._noted_kept:
            self._forget_freed()

    def _forget_freed(self) -> None:
        # A block freed and its address taken again is noted again: an old entry is only
        # wrong for an address no live block starts at, and those are dropped here.
        backend = _backend.get()
        live_blocks = getattr(backend, "live_blocks", None)
        live = {b.start for b in live_blocks()} if live_blocks is not None else set()
        # A copy (dict.copy runs no Python code, so no other thread runs in between):
        # other C threads keep noting while this runs, and a dict changing size under its
        # own iteration raises. (list(d.items()) is not enough: the tuples it makes can
        # set off the garbage collector, and a thread switch with it.)
        noted = self._noted.copy()
        self._noted = kept = {a: c for a, c in noted.items() if a in live}
        self._noted_kept = max(_NOTED_KEPT, 2 * len(kept))

    def where(self, address: int) -> str | None:
        """Traceback-style line naming the C caller that allocated ``address``."""
        caller = self._noted.get(address)
        found = None if caller is None else self.describe(caller)
        return None if found is None else f'  File "{found[0]}", line 0, in {found[1]}\n'


def install(ffi: Any, lib: Any) -> None:
    """Make the fake the active backend and route every entry point to it.

    In a process that already uses the native backend this raises BackendError: the
    shim runs the fake only (the native backend over the shim would call itself).
    """
    _backend.use_backend("fake")
    sites = CallerSites(ffi, lib)
    # Noting each block's C caller costs a call per allocation: only for the leak report.
    noted = sites.note if leak_report_wanted() else None
    for _, _, decls in sections():
        for _, name, args in decls:
            # The function's own type (the entry point itself takes pointers as integers).
            fntype = ffi.typeof(f"acl_mem_ft_{name}")
            names = [n for n in arg_names(args).split(", ") if n]
            allocating = name in ALLOCATING
            # The last-error getters return the code they report: never a failure of theirs.
            failed = None if name in LAST_ERROR_GETTERS else _noter(lib, name)
            function = forwarder(ffi, name, fntype, _backend.get, lowered=True,
                                 failed=failed, names=names,
                                 sited=sites.call if allocating else None,
                                 noted=noted if allocating else None)
            if fntype.result.kind == "pointer":
                ffi.def_extern(name=f"acl_mem_py_{name}")(function)
            else:
                ffi.def_extern(name=f"acl_mem_py_{name}", error=CALLBACK_FAILED)(function)
            if allocating and fast_eligible(roles(name, fntype)):
                fast = forwarder(ffi, name, fntype, _backend.get, lowered=True,
                                 failed=_noter(lib, name), names=names, sited=sites.call,
                                 noted=noted, fast=True)
                ffi.def_extern(name=f"acl_mem_py_fast_{name}", error=-CALLBACK_FAILED)(fast)
    ffi.def_extern(name="acl_mem_py_at_exit")(lambda: at_exit(sites.where))
