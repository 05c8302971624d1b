"""Finding and loading libascendcl and the DVPP libraries, with every attempt recorded."""

from __future__ import annotations

import os
from typing import Any

import cffi

from ..errors import BackendError
from .cdef import CDEF

__all__ = ["DEFAULT_TOOLKIT", "candidate_dirs", "load_library", "make_ffi"]

DEFAULT_TOOLKIT = "/usr/local/Ascend/ascend-toolkit/latest"
_SUBDIRS = ("lib64", "runtime/lib64", "acllib/lib64")


#: Every C type the native backend names on a call path, parsed when the ffi is made:
#: cffi parses a type string under a lock on first use, and an interrupt in the middle
#: of that must not happen inside a memory call.
CALL_TYPES = ("void *", "void **", "int32_t *", "uint32_t *", "size_t *", "uint64_t *",
              "uintptr_t", "aclrtPtrAttributes *", "aclrtPhysicalMemProp *",
              "aclrtMemAccessDesc[]", "int32_t[]", "char *")


def make_ffi() -> cffi.FFI:
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    for name in CALL_TYPES:
        ffi.typeof(name)
    return ffi


def candidate_dirs() -> list[tuple[str, str]]:
    """``(directory, why it is searched)`` in search order, without duplicates."""
    found: list[tuple[str, str]] = []
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        root = os.environ.get(var)
        if root:
            found += [(os.path.join(root, sub), f"${var}/{sub}") for sub in _SUBDIRS]
    for entry in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if entry:
            found.append((entry, "$LD_LIBRARY_PATH"))
    found += [(os.path.join(DEFAULT_TOOLKIT, sub), f"default {DEFAULT_TOOLKIT}/{sub}")
              for sub in _SUBDIRS]
    seen: set[str] = set()
    unique = []
    for directory, why in found:
        if directory not in seen:
            seen.add(directory)
            unique.append((directory, why))
    return unique


def load_library(
    ffi: cffi.FFI, soname: str, prefer: str | None = None
) -> tuple[Any, str]:
    """Open ``soname`` from the first candidate directory that has it.

    Returns the cffi library and its path; raises BackendError listing every
    directory tried and why it was not used.
    """
    dirs = candidate_dirs()
    if prefer is not None:
        dirs = [(prefer, "next to libascendcl.so"), *[d for d in dirs if d[0] != prefer]]
    attempts: list[str] = []
    for directory, why in dirs:
        path = os.path.join(directory, soname)
        if not os.path.exists(path):
            attempts.append(f"  {path} ({why}): not found")
            continue
        try:
            return ffi.dlopen(path), path
        except OSError as exc:
            attempts.append(f"  {path} ({why}): {exc}")
    tried = "\n".join(attempts) or "  (no directory to search)"
    raise BackendError(
        f"{soname} could not be loaded from {len(attempts)} place(s); source the CANN "
        f"environment (set_env.sh) or set ASCEND_HOME_PATH. Tried:\n{tried}"
    )
