"""Configure the fake device model (used when the backend is ``fake``).

``ACL_MEM_FAKE_PROFILE`` picks the profile at first use; :func:`configure` changes it
at any time. Reconfiguring an active fake starts a fresh device: everything allocated
before is gone, and buffers from before report themselves freed.
"""

from __future__ import annotations

from . import _backend
from ._args import c_uint
from ._fake import PROFILES, FakeBackend, Profile, resolve_profile
from ._fake.config import current_hazard_mode, current_profile, set_hazard_mode, set_profile
from ._lifecycle import state

__all__ = ["PROFILES", "Profile", "configure", "hazards", "inject_fault", "profile", "reset"]


def configure(
    profile: str | None = None, *, device_count: int | None = None,
    hbm_bytes: int | None = None, hazards: str | None = None,
) -> Profile:
    """Choose the fake's profile and size; returns the profile now in effect.

    ``profile`` is a profile name (``atlas-a2``, ``atlas-inference``, ``ascend950``) or
    a SoC family (``Ascend910B``); ``device_count`` and ``hbm_bytes`` (per device)
    override the profile's values. ``hazards`` is how races with queued work are
    reported: ``"warn"`` (default, HazardWarning), ``"raise"`` (HazardError) or
    ``"count"`` (only :func:`hazards` shows them).
    """
    base = resolve_profile(profile) if profile is not None else current_profile()
    count = None if device_count is None else c_uint(device_count, "configure", "device_count",
                                                     32, "int")
    capacity = None if hbm_bytes is None else c_uint(hbm_bytes, "configure", "hbm_bytes")
    if capacity is not None and capacity < (1 << 21):
        raise ValueError(f"configure: hbm_bytes must be at least 2 MiB, got {capacity}")
    chosen = base.with_overrides(device_count=count, capacity=capacity)
    mode = hazards or current_hazard_mode()
    fresh = FakeBackend(chosen, hazards=mode)
    set_profile(chosen)
    set_hazard_mode(hazards)
    _replace_active(fresh)
    return chosen


def reset() -> None:
    """Back to ``ACL_MEM_FAKE_PROFILE`` (or atlas-a2) with a fresh device."""
    set_profile(None)
    set_hazard_mode(None)
    _replace_active(FakeBackend(current_profile(), hazards=current_hazard_mode()))


def profile() -> Profile:
    """The profile the fake uses now."""
    return current_profile()


def inject_fault(call: str, nth: int = 1, code: int = 207001) -> None:
    """Make the ``nth`` next ``call`` (aclrtMalloc*, aclrtMallocHost,
    aclrtReserveMemAddress, aclrtMallocPhysical, aclrtMapMem) of the active fake fail
    with ``code`` once, after its parameter checks passed (default 207001, out of memory)."""
    _active_fake("inject_fault").inject_fault(call, nth, code)


def _active_fake(what: str) -> FakeBackend:
    active = _backend.get()
    if not isinstance(active, FakeBackend):
        raise RuntimeError(f"acl_mem.fake.{what}: the active backend is {active.name!r}")
    return active


def hazards() -> dict[str, int]:
    """Hazards the active fake has seen so far, counted by kind."""
    return _active_fake("hazards").hazards.counts()


def _replace_active(fresh: FakeBackend) -> None:
    active = _backend._active
    if active is not None and active.name == "fake":
        state.teardown()
        _backend._install(fresh, _backend._reason)
