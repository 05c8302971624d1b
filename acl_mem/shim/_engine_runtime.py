"""Run inside the engine's interpreter (acl_mem/shim/_engine.py): attach Python code to
each ``extern "Python"`` entry point."""

from __future__ import annotations

from typing import Any

from .. import _backend
from ._decls import function_names
from ._marshal import forwarder

__all__ = ["CALLBACK_FAILED", "install"]

#: What an entry point returns if the engine raised (a bug in acl_mem: cffi prints the
#: traceback): ACL_ERROR_RT_INTERNAL_ERROR, as the test suite's stand-in does.
CALLBACK_FAILED = 507000


def install(ffi: Any) -> None:
    """Make the fake the active backend and route every entry point to it.

    In a process that already uses the native backend this raises BackendError: the
    shim runs the fake only (the native backend over the shim would call itself).
    """
    _backend.use_backend("fake")
    for name in function_names():
        # The function's own type (the entry point itself takes pointers as integers).
        fntype = ffi.typeof(f"acl_mem_ft_{name}")
        error = None if fntype.result.kind == "pointer" else CALLBACK_FAILED
        function = forwarder(ffi, name, fntype, _backend.get, lowered=True)
        if error is None:
            ffi.def_extern(name=f"acl_mem_py_{name}")(function)
        else:
            ffi.def_extern(name=f"acl_mem_py_{name}", error=error)(function)
