"""Fixtures the project's own tests share (built only when a test asks for them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from acl_mem import _env
from acl_mem.shim._csource import minimal_header


@pytest.fixture(scope="session")
def headers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real ACL headers when ACL_MEM_HEADERS_DIR has them, else the shim's minimal
    acl/acl.h (the same prototypes, fewer enums)."""
    real = os.environ.get("ACL_MEM_HEADERS_DIR")
    if real and (Path(real) / "acl" / "acl.h").is_file():
        return Path(real)
    directory = tmp_path_factory.mktemp("include")
    (directory / "acl").mkdir()
    (directory / "acl" / "acl.h").write_text(minimal_header())
    return directory


@pytest.fixture(scope="session")
def real_headers() -> Path:
    """The real ACL headers from ACL_MEM_HEADERS_DIR; the test skips without them (fails
    with ACL_MEM_REQUIRE_HEADERS=1, as CI sets)."""
    directory = os.environ.get("ACL_MEM_HEADERS_DIR")
    found = Path(directory) if directory else None
    if found is None or not (found / "acl" / "acl_rt.h").is_file():
        why = f"ACL_MEM_HEADERS_DIR={directory!r} has no acl/acl_rt.h"
        if _env.flag("ACL_MEM_REQUIRE_HEADERS"):
            pytest.fail(f"ACL_MEM_REQUIRE_HEADERS=1 but {why}")
        pytest.skip(f"real ACL headers unavailable: {why}")
    return found


@pytest.fixture(scope="session")
def shim_libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The drop-in libraries, built once for the session into a cache of its own
    (tests/test_shim.py builds its own as well: it checks two concurrent builds agree)."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path_factory.mktemp("xdg")))
    done = subprocess.run([sys.executable, "-m", "acl_mem", "shim", "--print-libdir"],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())
