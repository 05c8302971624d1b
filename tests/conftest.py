"""Fixtures the project's own tests share (built only when a test asks for them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from acl_mem import _env
from acl_mem._fake.library import PREFIX


@pytest.fixture(scope="session")
def headers() -> Path:
    """The real ACL headers when ACL_MEM_HEADERS_DIR has them, else the ones installed
    with acl_mem (acl_mem/_fake/include: the same declarations)."""
    real = os.environ.get("ACL_MEM_HEADERS_DIR")
    if real and (Path(real) / "acl" / "acl.h").is_file():
        return Path(real)
    return PREFIX / "include"


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
def shim_libdir() -> Path:
    """The drop-in libraries' directory, as ``acl-mem shim --print-libdir`` prints it."""
    done = subprocess.run([sys.executable, "-m", "acl_mem", "shim", "--print-libdir"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())
