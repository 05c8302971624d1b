"""The native backend (cffi ABI mode over libascendcl); see ``cdef.py`` for the declarations."""

from __future__ import annotations

from .cdef import CDEF

__all__ = ["CDEF", "load_native_backend"]


def load_native_backend() -> NativeBackend:
    """Load libascendcl.so (BackendError lists every path tried and why)."""
    from .backend import NativeBackend

    return NativeBackend()


if False:  # pragma: no cover - names for type checkers only
    from .backend import NativeBackend
