"""The native backend (cffi ABI mode over libascendcl); see ``cdef.py`` for the declarations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .cdef import CDEF

if TYPE_CHECKING:  # the import itself waits for load_native_backend()
    from .backend import NativeBackend

__all__ = ["CDEF", "load_native_backend"]


def load_native_backend(library_dir: str | None = None) -> NativeBackend:
    """Load libascendcl.so, from ``library_dir`` first when given (BackendError lists every
    path tried and why)."""
    from .backend import NativeBackend

    return NativeBackend(library_dir)

