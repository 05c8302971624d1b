"""``acl-mem conformance``: run the shipped checks and report per behaviour."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

__all__ = ["run_checks"]

HERE = Path(__file__).resolve().parent
_MISSING = ("acl-mem conformance needs pytest and hypothesis: "
            "pip install \"acl_mem[conformance]\"")


def run_checks(backend: str = "all", json_path: str | None = None,
               extra: Sequence[str] = ()) -> int:
    """Run every check on ``backend`` (fake, native or all); 0 when nothing diverged."""
    # Only look for hypothesis: importing it before pytest starts defeats pytest's
    # assertion rewriting of its plugin.
    if importlib.util.find_spec("pytest") is None or importlib.util.find_spec("hypothesis") is None:
        print(_MISSING)
        return 2
    import pytest

    checks = str(HERE / "checks")
    args = [
        checks, "-c", str(HERE / "conformance.ini"), "--rootdir", checks,
        "-p", "acl_mem.conformance.plugin", "-q", "--acl-report", f"--acl-backend={backend}",
    ]
    if json_path:
        args.append(f"--acl-json={json_path}")
    return int(pytest.main([*args, *extra]))
