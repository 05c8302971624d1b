"""What the drop-in library's tests share (``from shim_support import ...``); their
fixtures (the headers, the library directory) are in tests/conftest.py."""

from __future__ import annotations

import os
import shlex
import shutil

import pytest

__all__ = ["compiler"]


def compiler() -> list[str]:
    """The C compiler command ($CC, else cc or gcc); the calling test skips without one."""
    chosen = os.environ.get("CC")
    if chosen:
        return shlex.split(chosen)
    found = shutil.which("cc") or shutil.which("gcc")
    if found is None:
        pytest.skip("no C compiler")
    return [found]
