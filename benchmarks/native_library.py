"""The native backend over acl_mem's own fake library (acl_mem/_fake/lib64), for the
benchmarks' "through the native binding" figures: the binding an Atlas host runs, with
acl_mem's C engine behind it instead of Huawei's."""

from __future__ import annotations

from typing import Any


def install_native_library(why: str) -> tuple[Any, Any]:
    """Load the native backend on acl_mem's library and make it the active backend:
    ``(native backend, the backend it replaced)``; reinstall the latter when done."""
    from acl_mem import _backend
    from acl_mem._fake.library import EngineLibrary, library_dir
    from acl_mem._native import load_native_backend

    native = load_native_backend(str(library_dir()))
    EngineLibrary.get().reset()
    previous = _backend._install(native, f"native: acl_mem's fake library for {why}")
    return native, previous
