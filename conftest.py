"""The project's test run: the conformance checks (acl_mem/conformance/checks) plus tests/.

Fixtures and markers come from the ``acl_mem.conformance.plugin`` pytest plugin
(loaded by ``addopts`` in pyproject.toml). Without an Atlas host the native backend
runs on the stand-in libascendcl (tests/stand_in.py), built here with the C compiler;
each native check gets a fresh fake behind it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent / "tests"))

import stand_in

from acl_mem import _env
from acl_mem._backend import Backend
from acl_mem._fake import FakeBackend
from acl_mem._fake.config import current_profile, set_profile
from acl_mem.conformance.providers import LibascendclProvider, set_native_provider


class StandInProvider:
    """The real libascendcl when it loads; else the stand-in library over a fake."""

    def __init__(self) -> None:
        self._real = LibascendclProvider()
        self._stand_in: stand_in.StandIn | None = None
        self._loaded: tuple[Backend | None, str] | None = None
        self.subprocess_prelude = ""

    def load(self) -> tuple[Backend | None, str]:
        if self._loaded is None:
            self._loaded = self._load()
        return self._loaded

    def _load(self) -> tuple[Backend | None, str]:
        real, why = self._real.load()
        if real is not None:
            return real, why
        if stand_in.compiler() is None:
            return None, f"no C compiler to build the stand-in; {why}"
        root = stand_in.build_temporary()
        self._stand_in = stand_in.StandIn(root)
        # A fake from the start: the report header asks the library its release before
        # the first test attaches a fresh one.
        self._stand_in.target = FakeBackend(current_profile())
        os.environ[stand_in.ROOT_VARIABLE] = str(root)
        self.subprocess_prelude = stand_in.SUBPROCESS_PRELUDE
        saved = os.environ.get("ASCEND_HOME_PATH")
        os.environ["ASCEND_HOME_PATH"] = str(root)
        try:
            from acl_mem._native import load_native_backend

            backend: Any = load_native_backend()
        finally:
            if saved is None:
                del os.environ["ASCEND_HOME_PATH"]
            else:
                os.environ["ASCEND_HOME_PATH"] = saved
        return backend, f"stand-in library over the fake ({root})"

    def before_test(self) -> None:
        if self._stand_in is not None:
            set_profile(None)
            self._stand_in.target = FakeBackend(current_profile())
            self._stand_in.errors.clear()

    def after_test(self) -> None:
        if self._stand_in is not None and self._stand_in.errors:
            raise AssertionError(f"stand-in callbacks raised: {self._stand_in.errors!r}")


_ENGINE_LEG = _env.choice("ACL_MEM_TEST_NATIVE", ("stand-in", "engine"), "stand-in") == "engine"
if _ENGINE_LEG:
    from engine_provider import EngineProvider

    set_native_provider(EngineProvider())
else:
    set_native_provider(StandInProvider())


