"""The native backend over acl_mem's own fake libascendcl (the engine in C).

Selected by ``ACL_MEM_TEST_NATIVE=engine``: the conformance checks' native leg then runs
the same binding as on an Atlas host against the library built in acl_mem/_fake/lib64,
reset to a new process's state before each check.
"""

from __future__ import annotations

from acl_mem._backend import Backend
from acl_mem._fake.library import EngineLibrary, library_dir
from acl_mem.errors import BackendError

#: Child interpreters (checks that start one) reach the same library this way.
SUBPROCESS_PRELUDE = """
import os as _os
from acl_mem._fake.library import library_dir as _library_dir
for _name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
    _os.environ.pop(_name, None)
_os.environ["LD_LIBRARY_PATH"] = _os.pathsep.join(
    [str(_library_dir()), *filter(None, [_os.environ.get("LD_LIBRARY_PATH")])])
"""


class EngineProvider:
    subprocess_prelude = SUBPROCESS_PRELUDE
    #: Checks marked fake_library run here: this library is acl_mem's own.
    is_fake_library = True

    def __init__(self) -> None:
        self._loaded: tuple[Backend | None, str] | None = None

    def load(self) -> tuple[Backend | None, str]:
        if self._loaded is None:
            try:
                from acl_mem._native import load_native_backend

                directory = library_dir()
                backend: Backend = load_native_backend(str(directory))
                self._loaded = (backend, f"acl_mem's fake library ({directory})")
            except BackendError as exc:
                self._loaded = (None, str(exc))
        return self._loaded

    def before_test(self) -> None:
        EngineLibrary.get().reset()

    def after_test(self) -> None:
        return None

