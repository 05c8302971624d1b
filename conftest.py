"""The project's test run: the conformance checks (acl_mem/conformance/checks) plus tests/.

Fixtures and markers come from the ``acl_mem.conformance.plugin`` pytest plugin
(loaded by ``addopts`` in pyproject.toml). The native backend runs on Huawei's
libascendcl where it loads, else on acl_mem's own fake library (tests/engine_provider.py),
reset before each native check.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "tests"))

import pytest
from engine_provider import EngineProvider

from acl_mem import _backend
from acl_mem.conformance.providers import set_native_provider

set_native_provider(EngineProvider())


@pytest.fixture(autouse=True)
def _active_fake_restored():
    """A test that made a fake of its own took the process's one engine from the active
    fake: the next test gets that fake back, fresh (as using_backend would give it)."""
    yield
    active = _backend._active
    if getattr(active, "superseded", False):
        _backend._install(active, _backend._reason)
