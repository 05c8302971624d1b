"""Device profiles: what differs between chips, as data (docs/runtime-model.md §3.5, §3.8, §3.13,
§7).

Capacities are per device and exclude system-reserved memory (aclrtGetMemInfo
reports them that way, docs/runtime-model.md §3.12). The split between the normal-page and the
huge-page pool is the fake's choice (no source gives it); 1 GiB pages are carved
from the huge-page pool, so HBM total = normal + huge always holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..sizes import GiB

__all__ = ["DEFAULT_PROFILE", "PROFILES", "Profile", "profile_for_soc", "resolve_profile"]



@dataclass(frozen=True)
class Profile:
    name: str
    #: What aclrtGetSocName reports; also decides the padding size.
    soc_name: str
    description: str
    #: ``AICoreSpec.padding_size`` of the platform config (docs/runtime-model.md §3.5).
    padding: int
    #: "HBM" or "DDR": the memory the device has (docs/runtime-model.md §3.12).
    memory: str
    capacity: int
    #: Fraction of the capacity kept as normal (4 KiB) pages; the rest is huge pages.
    normal_fraction: float
    giant_pages: bool
    p2p_policies: bool
    dvpp: bool
    device_count: int
    #: Streams per device, the default stream included (docs/runtime-model.md §3.4).
    max_streams: int = 1984
    #: aclrtGetRunMode: 1 ACL_HOST (EP, a host drives the device over PCIe) or 0
    #: ACL_DEVICE (RC, the program runs on the board's control CPU, docs/runtime-model.md
    #: §3.16).
    run_mode: int = 1
    #: Whether hi_mpi_dvpp_malloc / hi_mpi_dvpp_free (DVPP V2, libacl_dvpp_mpi.so) exist:
    #: not on Atlas 200/300/500 inference products (Ascend310) nor the Atlas training series
    #: (docs/runtime-model.md §3.9). Where they do not, hi_mpi_dvpp_malloc answers 207000
    #: (the fake's choice: the documentation gives no code) while acldvppMalloc still works.
    mpi_dvpp: bool = True

    def with_overrides(self, *, device_count: int | None, capacity: int | None) -> Profile:
        return replace(
            self,
            device_count=self.device_count if device_count is None else device_count,
            capacity=self.capacity if capacity is None else capacity,
        )


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            name="atlas-a2",
            soc_name="Ascend910B1",
            description="Atlas A2 training/inference (Ascend910B): 64 GiB HBM, 1 GiB pages",
            padding=32, memory="HBM", capacity=64 * GiB, normal_fraction=1 / 16,
            giant_pages=True, p2p_policies=True, dvpp=True, device_count=8,
        ),
        Profile(
            name="atlas-inference",
            soc_name="Ascend310P3",
            description="Atlas inference (Ascend310P): 24 GiB DDR, no 1 GiB pages, no P2P",
            padding=32, memory="DDR", capacity=24 * GiB, normal_fraction=1 / 16,
            giant_pages=False, p2p_policies=False, dvpp=True, device_count=4, max_streams=1024,
        ),
        Profile(
            name="ascend950",
            soc_name="Ascend950PR",
            description="Ascend950: padding 0 (no +32 on aclrtMalloc), no separate DVPP memory",
            padding=0, memory="HBM", capacity=128 * GiB, normal_fraction=1 / 16,
            giant_pages=False, p2p_policies=True, dvpp=False, device_count=8,
        ),
        Profile(
            name="atlas-200dk",
            soc_name="Ascend310",
            description="Atlas 200 DK (Ascend310) in RC mode: the program runs on the board's "
                        "control CPU, 4 GiB DDR, aclrtGetRunMode is ACL_DEVICE",
            padding=32, memory="DDR", capacity=4 * GiB, normal_fraction=1 / 16,
            giant_pages=False, p2p_policies=False, dvpp=True, device_count=1,
            max_streams=1024, run_mode=0, mpi_dvpp=False,
        ),
    )
}
_ALIASES = {"ascend910b": "atlas-a2", "ascend310p": "atlas-inference", "950": "ascend950",
            "ascend310": "atlas-200dk", "200dk": "atlas-200dk"}
DEFAULT_PROFILE = "atlas-a2"


def profile_for_soc(soc_name: str) -> Profile:
    """The profile closest to a real SoC (for comparing the fake with that device): the one
    whose SoC name shares the longest prefix with it (at least the family, e.g.
    "Ascend310"), so Ascend310 is the Atlas 200 DK and Ascend310P1 the inference card."""
    best, shared = PROFILES[DEFAULT_PROFILE], 8
    for profile in PROFILES.values():
        if profile.soc_name == soc_name:
            return profile
        length = _shared_prefix(soc_name, profile.soc_name)
        if length > shared:
            best, shared = profile, length
    return best


def resolve_profile(name: str) -> Profile:
    """The profile called ``name`` (a profile name or a SoC family such as Ascend910B)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in PROFILES:
        known = ", ".join(sorted(PROFILES) + sorted(_ALIASES))
        raise ValueError(f"fake profile {name!r} is unknown; known: {known}")
    return PROFILES[key]


def _shared_prefix(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` have in common."""
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length
