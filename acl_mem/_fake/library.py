"""acl_mem's fake libascendcl (the engine in C, ``acl_mem/_fake/src``): where the built
libraries are, and the control API of ``acl_mem/_fake/include/acl_mem_fake.h``.

The ACL calls of the library are bound like Huawei's, by the native backend; only the
control functions (reset, configure, describe, hazards) are bound here.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import cffi

from .. import _env
from ..errors import BackendError, SettingError
from .trace_capture import TraceCapture

__all__ = ["LIBRARY_DIR", "PREFIX", "RELEASE_DIRS", "EngineDescription", "EngineLeak",
           "EngineLibrary", "is_engine_library", "library_dir",
           "private_copy"]

#: The installed prefix, laid out like a CANN toolkit: include/ (acl/*.h and the control
#: API's header), lib64/ (built when acl_mem is installed), set_env.sh.
PREFIX = Path(__file__).resolve().parent
#: Where installing acl_mem builds the libraries.
LIBRARY_DIR = PREFIX / "lib64"
#: The control API's declarations: its header, read as cffi reads a cdef (the
#: preprocessor lines and the C++ guard dropped), plus the ACL call the tests ask for texts.
HEADER = PREFIX / "include" / "acl_mem_fake.h"


#: acl_mem_fake_host_access's `write` argument per kind of access.
_ACCESS = {"read": 0, "write": 1, "free": 2}


def control_cdef() -> str:
    text = re.sub(r"#ifdef __cplusplus.*?#endif", "", HEADER.read_text(), flags=re.S)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return text.replace("ACL_MEM_FAKE_API ", "") + "\nconst char *aclGetRecentErrMsg(void);\n"



#: Releases with a library of their own under lib64/ (CANN 8.5.0 lacks a function the
#: newer libraries export, so one library cannot play both): acl_mem/_fake/engine_build.py.
RELEASE_DIRS = {"8.5.0": "cann-8.5.0"}


def library_dir(cann: str | None = None) -> Path:
    """The directory holding acl_mem's libascendcl.so for CANN release ``cann`` (default:
    ``ACL_MEM_FAKE_CANN``, else the newest): ACL_MEM_FAKE_LIBRARY_DIR (another build of the
    same sources, e.g. with sanitizers: ``python -m acl_mem._fake.engine_build``) or the
    one installed with acl_mem, or the release's own directory in it (``cann-8.5.0``).
    BackendError when it has no libascendcl.so."""
    chosen = _env.secure_path("ACL_MEM_FAKE_LIBRARY_DIR")
    if chosen is not None:
        directory = Path(chosen)
        if not directory.is_absolute():
            raise SettingError("ACL_MEM_FAKE_LIBRARY_DIR", chosen, "an absolute path")
        where = f"ACL_MEM_FAKE_LIBRARY_DIR={chosen}"
    else:
        directory = LIBRARY_DIR
        where = f"{LIBRARY_DIR} (built when acl_mem is installed, with a C compiler; " \
                "reinstall acl_mem)"
    release = cann if cann is not None else _env.raw("ACL_MEM_FAKE_CANN")
    own = RELEASE_DIRS.get((release or "").strip())  # blanks do not count, as in the library
    if own is not None:
        directory = directory / own
        where += f", {own}/"
    if not (directory / "libascendcl.so").is_file():
        raise BackendError(f"acl_mem's fake libascendcl.so is not in {where}")
    return directory


def is_engine_library(path: str) -> bool:
    """Whether the libascendcl.so at ``path`` (loaded already) is acl_mem's own."""
    try:
        return hasattr(ctypes.CDLL(path), "acl_mem_fake_reset")
    except OSError:
        return False


def private_copy(directory: Path | None = None) -> str:
    """The path of a copy of the library in ``directory`` (default: :func:`library_dir`'s),
    in an unnamed file of this process (``/proc/self/fd/N``, open for the process's life):
    what is loaded from it is a second engine (the loader keeps one instance per file),
    and no directory exists where another user could swap the copy before it is loaded.
    The DVPP libraries of such a copy are not loaded (they would reach the first engine
    by its soname); a third engine gets no fixed device window. BackendError when the
    copy cannot be made."""
    source = (directory or library_dir()) / "libascendcl.so"
    try:
        fd = os.memfd_create("acl_mem-engine", os.MFD_CLOEXEC)
    except (AttributeError, OSError) as exc:
        raise BackendError(f"a private copy of acl_mem's library needs memfd_create: {exc}") \
            from None
    try:
        with open(source, "rb") as original:
            data = original.read()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        os.close(fd)
        raise BackendError(f"a private copy of {source} could not be made: {exc}") from None
    path = f"/proc/self/fd/{fd}"
    if not os.path.exists(path):
        os.close(fd)
        raise BackendError("a private copy of acl_mem's library needs /proc mounted")
    return path


@dataclass(frozen=True)
class EngineDescription:
    profile: str
    soc_name: str
    cann: str
    device_count: int
    capacity: int
    address_space_reserved: bool
    #: Why ACL_MEM_FAKE_PROFILE or ACL_MEM_FAKE_CANN could not be used ("" if usable).
    setting_error: str
    #: Freed pinned blocks kept mapped for a while, and their bytes.
    pinned_kept: int = 0
    pinned_kept_bytes: int = 0


@dataclass(frozen=True)
class EngineLeak:
    """A block the library still holds: what made it, its address, the bytes asked for,
    its device (None: pinned host memory) and the allocating call's return address."""

    api: str
    address: int
    size: int
    device: int | None
    caller: int
    #: Bytes it takes of its page pool (padding included) and their page size; 0 for
    #: reservations and mappings, which take none of their own.
    extent: int = 0
    page_size: int = 0


class EngineLibrary:
    """The control API of the loaded fake library (one per process: the library is)."""

    _lock = threading.Lock()
    _instances: ClassVar[dict[Path, EngineLibrary]] = {}

    def __init__(self, directory: Path | None = None, *, path: str | None = None,
                 copy_of: str | None = None) -> None:
        self.ffi = cffi.FFI()
        self.ffi.cdef(control_cdef())
        self.path = path or str((directory or library_dir()) / "libascendcl.so")
        self.lib: Any = self.ffi.dlopen(self.path)
        #: The library's capture of traced calls, for a recording of this process. Its
        #: writer process loads the library by a name valid there: the original's, for a
        #: private copy (``/proc/self/fd/N`` names another file in another process).
        self.capture = TraceCapture(self.ffi, self.lib, copy_of or self.path)

    @classmethod
    def get(cls, directory: Path | None = None) -> EngineLibrary:
        """The library in ``directory`` (default: :func:`library_dir`'s choice), loaded
        once. Libraries of two directories are two engines (CANN 8.5.0's own and the
        newer releases' one), each keeping its memory at addresses the other leaves."""
        chosen = (directory or library_dir()).resolve()
        with cls._lock:
            found = cls._instances.get(chosen)
            if found is None:
                found = cls._instances[chosen] = cls(chosen)
            return found

    def reset(self) -> None:
        """A new process's fake: no devices set, no memory, no aclInit; settings re-read."""
        self.lib.acl_mem_fake_reset()

    def forget_thread(self) -> None:
        """The calling thread starts over with no current device or context."""
        self.lib.acl_mem_fake_forget_thread()

    def share_places(self, shm: str | None, run_user: str | None, home: str | None) -> None:
        """Look for the default share directories under ``shm`` (instead of /dev/shm),
        ``run_user`` (/run/user) and ``home`` (the password database's); None restores
        each. ValueError for a path that is not absolute or too long."""
        def text(path: str | None) -> Any:
            return self.ffi.NULL if path is None else path.encode()

        if self.lib.acl_mem_fake_share_places(text(shm), text(run_user), text(home)) != 0:
            raise ValueError(f"acl_mem_fake_share_places refused {shm!r}, {run_user!r}, "
                             f"{home!r}")

    def share_unnamed_files(self, on: bool) -> None:
        """Write share records through unnamed files where possible (True, the default),
        or through named temporary files as on a file system without them."""
        self.lib.acl_mem_fake_share_unnamed_files(int(on))

    def configure(self, profile: str | None = None, cann: str | None = None,
                  device_count: int = 0, capacity: int = 0) -> None:
        """Play ``profile`` and ``cann`` (None: the environment's or the default), then
        reset. ValueError for a name or number the engine refuses."""
        rc = self.lib.acl_mem_fake_configure(
            self.ffi.NULL if profile is None else profile.encode(),
            self.ffi.NULL if cann is None else cann.encode(), device_count, capacity)
        if rc != 0:
            raise ValueError(f"acl_mem_fake_configure refused profile={profile!r}, "
                             f"cann={cann!r}, device_count={device_count}, "
                             f"capacity={capacity}")

    def describe(self) -> EngineDescription:
        out: Any = self.ffi.new("struct acl_mem_fake_description *")
        self.lib.acl_mem_fake_describe(out)
        text = self._text

        return EngineDescription(
            profile=text(out.profile), soc_name=text(out.soc_name), cann=text(out.cann),
            device_count=int(out.device_count), capacity=int(out.capacity),
            address_space_reserved=bool(out.address_space_reserved),
            setting_error=text(out.setting_error), pinned_kept=int(out.pinned_kept),
            pinned_kept_bytes=int(out.pinned_kept_bytes))

    def set_hazards(self, mode: str | None, *, queue: bool = False) -> None:
        """Report hazards as ``mode`` ("warn", "raise", "count"; None: ACL_MEM_HAZARDS),
        or queue them for :meth:`findings` when ``queue``. ValueError for another mode."""
        rc = self.lib.acl_mem_fake_set_hazards(
            self.ffi.NULL if mode is None else mode.encode(), int(queue))
        if rc != 0:
            raise ValueError(f"hazards must be warn, raise or count, got {mode!r}")

    def hazard_count(self, kind: str | None = None) -> int:
        """Hazards of ``kind`` (every kind for None) since the last reset."""
        return int(self.lib.acl_mem_fake_hazard_count(
            self.ffi.NULL if kind is None else kind.encode()))

    def findings(self) -> list[tuple[str, str]]:
        """The queued hazards, oldest first, as (kind, text); taken from the queue. The
        waiting counter is read first, so an empty queue costs one load."""
        return [(kind, text) for kind, text, _ in self.findings_of()]

    def findings_of(self) -> list[tuple[str, str, int]]:
        """:meth:`findings`, each with the thread whose call made it (its
        ``threading.get_ident()``; 0 for the "dropped" count)."""
        found: list[tuple[str, str, int]] = []
        if self.lib.acl_mem_fake_findings_waiting == 0:
            return found
        kind, text = self.ffi.new("char[64]"), self.ffi.new("char[1100]")
        thread = self.ffi.new("unsigned long *")
        while self.lib.acl_mem_fake_next_finding_of(kind, 64, text, 1100, thread) == 1:
            found.append((self._text(kind), self._text(text), int(thread[0])))
        return found

    def host_access(self, start: int, size: int, *, access: str, what: str) -> None:
        """The host touches ``[start, start+size)`` itself (``access``: "read", "write", or
        "free" for a range given to other use): a hazard, queued or reported, when queued
        work writes there (or, for a write or a free, reads or writes there)."""
        if self.lib.acl_mem_fake_host_access(start, size, _ACCESS[access], what.encode()) != 0:
            raise ValueError(f"host_access refused {start:#x} + {size}")

    def set_leak_report(self, on: bool) -> None:
        """Whether the library prints its leak report at exit (ACL_MEM_LEAK_REPORT)."""
        self.lib.acl_mem_fake_set_leak_report(int(on))

    def set_check(self, on: bool | None) -> None:
        """The memory checker on or off; None: as ACL_MEM_CHECK says."""
        self.lib.acl_mem_fake_set_check(-1 if on is None else int(on))

    def check(self) -> int:
        """Verify every live block's and pool segment's canaries and the poison of freed
        pinned memory now; how many findings that made."""
        return int(self.lib.acl_mem_fake_check())

    def segment_allocated(self, parent: int, start: int, requested: int, size: int) -> None:
        """A pool carved ``[start, start+size)`` of block ``parent`` for ``requested``
        bytes (the checker watches it while on). ValueError for requested > size."""
        if self.lib.acl_mem_fake_segment_allocated(parent, start, requested, size) != 0:
            raise ValueError(f"segment {start:#x}: requested {requested} > size {size}")

    def segment_freed(self, start: int) -> None:
        """The pool gave the segment at ``start`` back."""
        self.lib.acl_mem_fake_segment_freed(start)

    def inject_fault(self, call: str, nth: int = 1, code: int = 207001) -> None:
        """Make the ``nth`` next call of ``call`` that passes its argument checks fail with
        ``code``, once. ValueError for a call that cannot fail so, nth < 1 or code 0."""
        if not 1 <= nth < 1 << 32 or not -(1 << 31) <= code < 1 << 31 or \
                self.lib.acl_mem_fake_inject_fault(call.encode(), nth, code) != 0:
            raise ValueError(f"inject_fault refused call={call!r}, nth={nth!r}, code={code!r}")

    def leaks(self) -> list[EngineLeak]:
        """The blocks still allocated, device blocks first (by device, address), then
        pinned host blocks."""
        while True:
            count = int(self.lib.acl_mem_fake_leaks(self.ffi.NULL, 0))
            out: Any = self.ffi.new("struct acl_mem_fake_leak[]", max(count, 1))
            total = int(self.lib.acl_mem_fake_leaks(out, count))
            if total <= count:  # none made meanwhile by another thread
                break
        return [EngineLeak(api=self._text(out[i].api), address=int(out[i].address),
                           size=int(out[i].size),
                           device=None if out[i].device < 0 else int(out[i].device),
                           caller=int(self.ffi.cast("uintptr_t", out[i].caller)),
                           extent=int(out[i].extent), page_size=int(out[i].page_size))
                for i in range(total)]

    def recent_error(self) -> str | None:
        """aclGetRecentErrMsg of the calling thread: the text of its last failed call."""
        message = self.lib.aclGetRecentErrMsg()
        return None if message == self.ffi.NULL else self._text(message)

    def _text(self, field: Any) -> str:
        value = self.ffi.string(field)
        return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
