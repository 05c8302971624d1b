"""Helpers for the project's own tests (import as ``from helpers import ...``;
tests/conftest.py puts this folder on ``sys.path``)."""

from __future__ import annotations

import os
from pathlib import Path

import acl_mem
from acl_mem.errors import BackendError

#: The checkout: the folder holding the ``acl_mem`` package.
ROOT = Path(acl_mem.__file__).resolve().parent.parent


# -- child processes -------------------------------------------------------------------------------


def clean_env(**overrides: str | None) -> dict[str, str]:
    """The test's environment without acl_mem / Ascend settings, with ``ROOT`` on
    PYTHONPATH, plus ``overrides`` (a value of None removes that variable)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACL_MEM_", "ASCEND_"))}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def native_is_installed() -> bool:
    """Whether the real libascendcl loads on this machine."""
    from acl_mem._native import load_native_backend

    try:
        load_native_backend()
    except BackendError:
        return False
    return True
