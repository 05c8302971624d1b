"""The native backend for the test run: Huawei's libascendcl where it loads (an Atlas
host), else acl_mem's own fake library (the engine in C, acl_mem/_fake/lib64), reset
to a new process's state before each check. Either way the same binding runs.
"""

from __future__ import annotations

from acl_mem._backend import Backend
from acl_mem._fake.library import EngineLibrary, library_dir
from acl_mem.conformance.providers import LibascendclProvider
from acl_mem.errors import BackendError
from acl_mem.fake import is_fake_library

#: Child interpreters (checks that start one) reach the same library this way.
SUBPROCESS_PRELUDE = """
import os as _os
from acl_mem._fake.library import library_dir as _library_dir
for _name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
    _os.environ.pop(_name, None)
_os.environ["LD_LIBRARY_PATH"] = _os.pathsep.join(
    [str(_library_dir()), *filter(None, [_os.environ.get("LD_LIBRARY_PATH")])])
"""


def _is_acl_mem_library(backend: Backend) -> bool:
    path = getattr(backend, "path", None)
    return isinstance(path, str) and is_fake_library(path)


class EngineProvider:
    """Huawei's library when it loads, else acl_mem's fake library."""

    def __init__(self) -> None:
        self._loaded: tuple[Backend | None, str] | None = None
        self.subprocess_prelude = ""
        #: Checks marked fake_library run here only on acl_mem's own library.
        self.is_fake_library = False

    def load(self) -> tuple[Backend | None, str]:
        if self._loaded is None:
            self._loaded = self._load()
        return self._loaded

    def _load(self) -> tuple[Backend | None, str]:
        real, why = LibascendclProvider().load()
        # The search may find acl_mem's own library (its lib64 on LD_LIBRARY_PATH after
        # sourcing set_env.sh): that one is bound below, where it is reset between checks.
        if real is not None and not _is_acl_mem_library(real):
            return real, why
        try:
            from acl_mem._native import load_native_backend

            directory = library_dir()
            backend: Backend = load_native_backend(str(directory))
        except BackendError as exc:
            return None, f"{exc}; Huawei's: {why}"
        self.is_fake_library = True
        self.subprocess_prelude = SUBPROCESS_PRELUDE
        return backend, f"acl_mem's fake library ({directory})"

    def before_test(self) -> None:
        if self.is_fake_library:
            # The environment's profile and release, whatever a fake test configured.
            EngineLibrary.get().configure()

    def after_test(self) -> None:
        return None
