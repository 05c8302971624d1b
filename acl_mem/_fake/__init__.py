"""The fake backend: a model of an Ascend device (see ``docs/fidelity.md``).

Two engines play it while the model moves into C: acl_mem's C library through the native
binding (``engine_fake.py``, ``EngineFake``) and the Python one (``backend.py``,
``FakeBackend``), which goes next; ``ACL_MEM_FAKE_ENGINE=c|python`` chooses (default
``c``). :func:`fake_class` is the chosen one.
"""

from __future__ import annotations

from typing import Any

from .. import _env
from .backend import FakeBackend
from .profiles import DEFAULT_PROFILE, PROFILES, Profile, resolve_profile

__all__ = ["DEFAULT_PROFILE", "ENGINES", "PROFILES", "FakeBackend", "Profile", "fake_class",
           "is_fake", "resolve_profile"]

ENGINES = ("python", "c")


def fake_class() -> Any:
    """The class of the fake engine ``ACL_MEM_FAKE_ENGINE`` chooses."""
    if _env.choice("ACL_MEM_FAKE_ENGINE", ENGINES, "c") == "c":
        from .engine_fake import EngineFake

        return EngineFake
    return FakeBackend


def is_fake(backend: object) -> bool:
    """Whether ``backend`` is one of acl_mem's fakes (either engine)."""
    if isinstance(backend, FakeBackend):
        return True
    from .engine_fake import EngineFake

    return isinstance(backend, EngineFake)
