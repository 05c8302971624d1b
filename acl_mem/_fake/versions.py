"""CANN releases the fake can play: what a caller observes differently on each
(docs/runtime-model.md §0.1).

A version is data, like a device profile (``profiles.py``), and combines with any of
them. Each field names one observable difference; the parts of the fake read the
field where the rule applies. The default is the newest release, 9.1.0.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_CANN", "VERSIONS", "CannVersion", "closest_release", "resolve_cann"]


@dataclass(frozen=True)
class CannVersion:
    """One CANN release as the memory calls show it."""

    name: str
    #: What aclrtGetVersion reports (the ACL interface version, not the CANN release).
    acl_version: tuple[int, int, int]
    #: aclrtMalloc/aclrtMallocCached padding from the SoC's platform config (0, 16 or
    #: 32 bytes); before 9.1.0 it is a fixed 32 on every SoC (§3.5).
    soc_padding: bool
    #: aclrtMemcpy(Async)/aclrtMemset(Async) with count 0 succeed without a copy; before
    #: 9.1.0 the runtime rejects count 0 with 107000 (§3.10, §3.11).
    zero_count_succeeds: bool
    #: The ACL layer of the copies checks count 0 first, then NULL, then the kind
    #: (9.1.0); before, NULL dst, NULL src, then the kind, and count is left to the
    #: runtime (§3.10).
    count_checked_first: bool
    #: aclrtMemcpyAsync checks the context (107002) before the memory locations (9.1.0).
    async_context_first: bool
    #: The C API validates stream handles before the runtime's parameter checks (from
    #: 9.1.0): a destroyed or unknown handle gives 107017 first. Older releases use the
    #: handle blindly; the fake then reports 107017 where it resolves the stream, after
    #: the parameter checks and the context lookup (a real older runtime may crash:
    #: docs/fidelity.md row 66).
    stream_handle_checked: bool
    #: Highest aclrtMemAttr that aclrtGetMemInfo accepts: 11 on 8.5.0 (12-17 -> 107016),
    #: 17 from 9.0.1 (§3.12).
    meminfo_max_attr: int
    #: aclrtMemGetAllocationGranularity accepts the host and DDR attributes and checks the
    #: location id only for device locations (from 9.0.1; §4.5).
    granularity_all_attrs: bool
    #: aclrtMemRetainAllocationHandle checks its output for NULL (100000) (from 9.0.1).
    retain_checks_output: bool
    #: aclrtMemGetAllocationPropertiesFromHandle checks prop for NULL, returns the
    #: runtime's error before writing prop, and reports every memory type (from 9.0.1).
    properties_v2: bool
    #: aclrtMemGetAddressRange exists (from 9.0.1; §4.8).
    has_address_range: bool
    #: aclrtMallocPhysical rejects location MANAGED (3) with 100000 (from 9.1.0; §4.3).
    physical_rejects_managed: bool
    #: aclrtPointerGetAttributes reports id 0 for host memory (from 9.0.1; before, the
    #: current device's id; §4.9).
    host_location_id_zero: bool
    #: aclrtSetCurrentContext rejects a context that is not alive with 107000 and
    #: aclrtGetCurrentContext without a context fails with 107002 (from 9.0.1; 8.5.0 takes
    #: the dead context, and reports no context as success with NULL; §3.3).
    contexts_checked: bool = True

    @property
    def version_str(self) -> str:
        """The runtime package's version string (aclsysGetVersionStr("runtime"))."""
        return self.name


_V850 = CannVersion(
    name="8.5.0", acl_version=(1, 16, 0), soc_padding=False, zero_count_succeeds=False,
    count_checked_first=False, async_context_first=False, stream_handle_checked=False,
    meminfo_max_attr=11, granularity_all_attrs=False, retain_checks_output=False,
    properties_v2=False, has_address_range=False, physical_rejects_managed=False,
    host_location_id_zero=False, contexts_checked=False)
_V901 = CannVersion(
    name="9.0.1", acl_version=(1, 17, 0), soc_padding=False, zero_count_succeeds=False,
    count_checked_first=False, async_context_first=False, stream_handle_checked=False,
    meminfo_max_attr=17, granularity_all_attrs=True, retain_checks_output=True,
    properties_v2=True, has_address_range=True, physical_rejects_managed=False,
    host_location_id_zero=True)
_V910 = CannVersion(
    name="9.1.0", acl_version=(1, 17, 0), soc_padding=True, zero_count_succeeds=True,
    count_checked_first=True, async_context_first=True, stream_handle_checked=True,
    meminfo_max_attr=17, granularity_all_attrs=True, retain_checks_output=True,
    properties_v2=True, has_address_range=True, physical_rejects_managed=True,
    host_location_id_zero=True)

VERSIONS: dict[str, CannVersion] = {v.name: v for v in (_V850, _V901, _V910)}
DEFAULT_CANN = "9.1.0"


def closest_release(reported: str) -> CannVersion:
    """The played release nearest below a version string a runtime reports ("9.0.0",
    "9.1.0-beta.1", "8.5.0.alpha001"); 9.1.0 for anything newer or unreadable."""
    numbers: list[int] = []
    for part in reported.replace("-", ".").split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        numbers.append(int(digits))
    if len(numbers) < 2:
        return VERSIONS[DEFAULT_CANN]
    chosen = VERSIONS[DEFAULT_CANN]
    for version in sorted(VERSIONS.values(), key=lambda v: _key(v.name), reverse=True):
        chosen = version
        if tuple(numbers[:2]) >= _key(version.name)[:2]:
            return version
    return chosen


def _key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split("."))


def resolve_cann(name: str) -> CannVersion:
    """The release called ``name`` (``"8.5.0"``, ``"9.0.1"``, ``"9.1.0"``)."""
    try:
        return VERSIONS[str(name).strip()]
    except KeyError:
        raise ValueError(f"unknown CANN version {name!r}: the fake plays "
                         f"{', '.join(VERSIONS)} (ACL_MEM_FAKE_CANN or "
                         "acl_mem.fake.configure(cann=...))") from None
