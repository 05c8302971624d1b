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

from engine_provider import EngineProvider

from acl_mem._fake.backend import _reserve_device_space
from acl_mem.conformance.providers import set_native_provider

# Both fakes run in this process, each wanting the same fixed host addresses for its
# device window; whichever comes first keeps device addresses off host memory (the other
# works without). The Python fake's checks ask for it, so it comes first.
_reserve_device_space()
set_native_provider(EngineProvider())
