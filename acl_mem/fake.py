"""Configure the fake device model (used when the backend is ``fake``).

``ACL_MEM_FAKE_PROFILE`` picks the profile at first use; :func:`configure` changes it
at any time. Changing the profile or size of an active fake starts a fresh device:
everything allocated before is gone, and buffers from before report themselves freed.
Changing only the reporting modes (``hazards``, ``check``) keeps the memory.

Environment variables read here: ``ACL_MEM_FAKE_PROFILE`` (profile at first use),
``ACL_MEM_FAKE_CANN=8.5.0|9.0.1|9.1.0`` (the CANN release played, default 9.1.0),
``ACL_MEM_CHECK=1`` (memory checker on), ``ACL_MEM_HAZARDS=warn|raise|count`` (hazard
mode). ``ACL_MEM_LEAK_REPORT=1``, which prints, when the process exits, every
allocation the fake still holds (with its allocation stack when the checker is on) to
standard error, works without importing this module: acl_mem/_fake/leak_report.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _backend
from ._args import c_uint
from ._fake import PROFILES, Profile, fake_class, is_fake, resolve_profile
from ._fake import leak_report as _leak_report
from ._fake.config import (
    current_cann,
    current_check,
    current_hazard_mode,
    current_profile,
    set_cann,
    set_check,
    set_hazard_mode,
    set_profile,
)
from ._fake.library import is_engine_library, library_dir
from ._fake.profiles import profile_for_soc
from ._fake.versions import VERSIONS, CannVersion, closest_release, resolve_cann
from ._lifecycle import state

if TYPE_CHECKING:
    from ._fake.engine_fake import EngineFake

__all__ = [
    "PROFILES",
    "VERSIONS",
    "Allocation",
    "CannVersion",
    "Profile",
    "cann",
    "closest_release",
    "configure",
    "forget_settings",
    "hazards",
    "inject_fault",
    "is_fake",
    "is_fake_library",
    "leaks",
    "library_dir",
    "make_backend",
    "profile",
    "profile_for_soc",
    "reset",
    "resolve_cann",
    "resolve_profile",
]


def configure(
    profile: str | None = None, *, device_count: int | None = None,
    hbm_bytes: int | None = None, hazards: str | None = None, check: bool | None = None,
    cann: str | None = None,
) -> Profile:
    """Choose the fake's profile, size and reporting modes; returns the profile in effect.

    ``profile`` is a profile name (``atlas-a2``, ``atlas-inference``, ``ascend950``) or
    a SoC family (``Ascend910B``); ``device_count`` and ``hbm_bytes`` (per device)
    override the profile's values. ``cann`` is the CANN release whose behaviour the fake
    plays: ``"8.5.0"``, ``"9.0.1"`` or ``"9.1.0"`` (default; also ``ACL_MEM_FAKE_CANN``),
    see docs/runtime-model.md §0.1. Any of these four, or no argument at all, starts a
    fresh device: everything allocated before is gone, and buffers from before report
    themselves freed.

    ``hazards`` is how races with queued work are reported: ``"warn"`` (default,
    HazardWarning), ``"raise"`` (HazardError) or ``"count"`` (only :func:`hazards` shows
    them); memory-checker findings follow the same mode. ``check=True`` turns the memory
    checker on (see :func:`leaks`, :func:`acl_mem.check`; also ``ACL_MEM_CHECK=1``).
    Given alone, ``hazards`` and ``check`` apply to the running fake and keep its
    memory: blocks allocated before the checker was turned on are not canary-checked.
    """
    modes_only = profile is None and device_count is None and hbm_bytes is None and \
        cann is None and (hazards is not None or check is not None)
    active = _backend._active
    if modes_only and active is not None and is_fake(active):
        engine: Any = active
        engine.set_modes(hazards=hazards, check=check)
        set_hazard_mode(hazards)
        set_check(check)
        return current_profile()
    base = resolve_profile(profile) if profile is not None else current_profile()
    count = None if device_count is None else c_uint(device_count, "configure", "device_count",
                                                     32, "int")
    capacity = None if hbm_bytes is None else c_uint(hbm_bytes, "configure", "hbm_bytes")
    if capacity is not None and capacity < (1 << 21):
        raise ValueError(f"configure: hbm_bytes must be at least 2 MiB, got {capacity}")
    chosen = base.with_overrides(device_count=count, capacity=capacity)
    release = current_cann() if cann is None else resolve_cann(cann)
    mode = hazards or current_hazard_mode()
    checking = current_check() if check is None else bool(check)
    # Made under the state's lock too: making a fake takes the engine from the old one,
    # so a worker thread learning its context must be done with the old one first.
    with state.lock:
        fresh = fake_class()(chosen, hazards=mode, check=checking, cann=release)
        if cann is not None:
            set_cann(release)
        set_profile(chosen)
        set_hazard_mode(hazards)
        set_check(check)
        _replace_active(fresh)
    return chosen


def is_fake_library(path: str) -> bool:
    """Whether the ``libascendcl.so`` at ``path`` is acl_mem's own (the fake), not Huawei's
    (for example found on the search path after sourcing acl_mem's ``set_env.sh``)."""
    return is_engine_library(path)


def forget_settings() -> None:
    """Forget what :func:`configure` chose: the profile, release and modes are the
    environment's (or the defaults) again for fakes made from now on."""
    set_profile(None)
    set_hazard_mode(None)
    set_check(None)
    set_cann(None)


def reset() -> None:
    """Back to ``ACL_MEM_FAKE_PROFILE`` (or atlas-a2) with a fresh device."""
    with state.lock:  # (as in configure)
        forget_settings()
        _replace_active(fake_class()(current_profile(), hazards=current_hazard_mode(),
                                     check=current_check(), cann=current_cann()))


def make_backend(profile: Profile | str | None = None, *, cann: str | None = None,
                 hazards: str | None = None, check: bool | None = None,
                 private: bool = False) -> EngineFake:
    """A fresh fake that is not the active backend, for tools that drive one themselves
    (trace replay, comparisons): ``profile`` (a :class:`Profile` or its name; default: the
    configured one) playing ``cann``, reporting as ``hazards`` with the checker ``check``
    (each by default as configured).

    The process has one fake engine, so this one takes it: a fake made before refuses
    its calls with BackendError, and starts afresh (its memory gone, its Python objects
    released, as after :func:`reset`) when it is made the active backend again, which
    :func:`acl_mem.using_backend` does on leaving its block.

    ``private=True`` gives the process's second engine instead (a copy of the library,
    loaded once), which takes nothing from the first: for tools that must leave the
    user's fake alone (an in-process trace replay) and for comparing two fakes. A newer
    private fake takes it from an older one.
    """
    if profile is None:
        chosen = current_profile()
    else:
        chosen = resolve_profile(profile) if isinstance(profile, str) else profile
    release = current_cann() if cann is None else resolve_cann(cann)
    engine: EngineFake = fake_class()(
        chosen, hazards=current_hazard_mode() if hazards is None else hazards,
        check=current_check() if check is None else check, cann=release, private=private)
    return engine


def profile() -> Profile:
    """The profile the fake uses now."""
    return current_profile()


def cann() -> str:
    """The CANN release the fake plays now (``"9.1.0"`` unless configured)."""
    return current_cann().name


def inject_fault(call: str, nth: int = 1, code: int = 207001) -> None:
    """Make the ``nth`` next ``call`` (aclrtMalloc*, aclrtMallocHost,
    aclrtReserveMemAddress, aclrtMallocPhysical, aclrtMapMem) of the active fake fail
    with ``code`` once, after its parameter checks passed (default 207001, out of memory)."""
    _active_fake("inject_fault").inject_fault(call, nth, code)


def _active_fake(what: str) -> Any:
    active = _backend.get()
    if not is_fake(active):
        raise RuntimeError(f"acl_mem.fake.{what}: the active backend is {active.name!r}")
    return active


@dataclass(frozen=True)
class Allocation:
    """A live allocation of the fake device, with where it was made (checker on)."""

    address: int
    size: int
    api: str
    device: int | None
    stack: str


_NO_STACK = _leak_report._NO_STACK


def leaks() -> list[Allocation]:
    """Every allocation the active fake still holds: blocks (with their allocation stacks
    while checking), then virtual memory: reservations, physical handles not freed and
    mappings (``address`` is the handle for aclrtMallocPhysical; no stacks)."""
    fake = _active_fake("leaks")
    found = [Allocation(b.start, b.requested, b.api, b.device,
                        "".join(b.stack or ()) or _NO_STACK)
             for b in fake.live_blocks()]
    return found + [Allocation(h.address, h.size, h.api, h.device, _NO_STACK)
                    for h in fake.live_vmm()]


def hazards() -> dict[str, int]:
    """Hazards the active fake has seen so far, counted by kind."""
    counts: dict[str, int] = _active_fake("hazards").hazards.counts()
    return counts


def _replace_active(fresh: Any) -> None:
    active = _backend._active
    if active is not None and active.name == "fake":
        # Under the state's lock: a thread learning its device's context (acl_mem._context)
        # notes the old engine's handle before the teardown, never after it.
        with state.lock:
            state.teardown()
            _backend._install(fresh, _backend._reason)
