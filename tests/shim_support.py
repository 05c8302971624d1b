"""What the drop-in library's tests share (``from shim_support import ...``); their
fixtures (the headers, one build per session) are in tests/conftest.py."""

from __future__ import annotations

import pytest

from acl_mem.shim import _build

__all__ = ["skip_without_a_build"]


def skip_without_a_build() -> None:
    """Skip the calling module, with the reason, where the libraries cannot be built."""
    try:
        _build.compiler()
        _build.inputs()
    except _build.ShimBuildError as exc:
        pytest.skip(f"cannot build the shim here ({exc.missing}): {exc}",
                    allow_module_level=True)
