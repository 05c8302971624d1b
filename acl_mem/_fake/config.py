"""The fake's configuration: ``ACL_MEM_FAKE_PROFILE`` or :func:`acl_mem.fake.configure`."""

from __future__ import annotations

import os
import threading

from .. import _env
from ..errors import SettingError
from .profiles import _ALIASES, DEFAULT_PROFILE, PROFILES, Profile, resolve_profile
from .versions import DEFAULT_CANN, VERSIONS, CannVersion, resolve_cann

#: How hazards and checker findings are reported.
HAZARD_MODES = ("warn", "raise", "count")

__all__ = ["current_cann", "current_hazard_mode", "current_profile", "set_cann",
           "set_hazard_mode", "set_profile"]

_lock = threading.Lock()


def _fresh_lock_in_child() -> None:
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_in_child)
_configured: Profile | None = None


def current_profile() -> Profile:
    """The configured profile, else the one ``ACL_MEM_FAKE_PROFILE`` names, else atlas-a2."""
    with _lock:
        if _configured is not None:
            return _configured
    name = _env.raw("ACL_MEM_FAKE_PROFILE") or DEFAULT_PROFILE
    try:
        return resolve_profile(name)
    except ValueError:
        raise SettingError("ACL_MEM_FAKE_PROFILE", name,
                           "one of " + ", ".join(sorted(PROFILES) + sorted(_ALIASES))) from None


def set_profile(profile: Profile | None) -> None:
    global _configured
    with _lock:
        _configured = profile


_cann: CannVersion | None = None


def current_cann() -> CannVersion:
    """The CANN release the fake plays: configure(cann=...), else ``ACL_MEM_FAKE_CANN``,
    else 9.1.0."""
    if _cann is not None:
        return _cann
    name = _env.raw("ACL_MEM_FAKE_CANN") or DEFAULT_CANN
    try:
        return resolve_cann(name)
    except ValueError:
        raise SettingError("ACL_MEM_FAKE_CANN", name,
                           "one of " + ", ".join(VERSIONS)) from None


def set_cann(version: CannVersion | None) -> None:
    global _cann
    _cann = version


_hazard_mode: str | None = None
_check: bool | None = None


def current_check() -> bool:
    """Whether the memory checker is on: configure(check=...), else ACL_MEM_CHECK=1."""
    if _check is not None:
        return _check
    return _env.flag("ACL_MEM_CHECK")


def set_check(enabled: bool | None) -> None:
    global _check
    _check = enabled


def current_hazard_mode() -> str:
    """How the fake reports hazards: ``ACL_MEM_HAZARDS`` or configure(), else "warn"."""
    return _hazard_mode or _env.choice("ACL_MEM_HAZARDS", HAZARD_MODES, "warn")


def set_hazard_mode(mode: str | None) -> None:
    global _hazard_mode
    _hazard_mode = mode
