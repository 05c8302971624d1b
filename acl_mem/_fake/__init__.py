"""The fake backend: a model of an Ascend device (see ``docs/fidelity.md``)."""

from .backend import FakeBackend
from .profiles import DEFAULT_PROFILE, PROFILES, Profile, resolve_profile

__all__ = ["DEFAULT_PROFILE", "PROFILES", "FakeBackend", "Profile", "resolve_profile"]
