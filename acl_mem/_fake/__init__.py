"""The fake backend: acl_mem's own libascendcl (the engine in C, ``src/``) bound like
Huawei's library (``engine_fake.py``); see ``docs/fidelity.md``. The profiles and releases
it plays are data here (``profiles.py``, ``versions.py``), from which the library's tables
are generated."""

from __future__ import annotations

from typing import Any

from .profiles import DEFAULT_PROFILE, PROFILES, Profile, resolve_profile

__all__ = ["DEFAULT_PROFILE", "PROFILES", "Profile", "fake_class", "is_fake",
           "resolve_profile"]


def fake_class() -> Any:
    """The fake backend's class (imported on first use: it binds the library)."""
    from .engine_fake import EngineFake

    return EngineFake


def is_fake(backend: object) -> bool:
    """Whether ``backend`` is acl_mem's fake."""
    from .engine_fake import EngineFake

    return isinstance(backend, EngineFake)
