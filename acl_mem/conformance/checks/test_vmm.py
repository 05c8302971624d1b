"""Conformance: virtual memory management (docs/runtime-model.md §4).

Reservations (§4.2), physical memory (§4.3), mappings (§4.4), granularity (§4.5),
sharing between processes (§4.6), access (§4.7) and the queries on mapped addresses
(§4.8, §4.9, handle retain / properties). Every number is written out here from the
runtime model; where only the driver decides, the expectation is the fake's documented choice
(docs/runtime-model.md §8.2-§8.8 and §8.12, docs/fidelity.md rows 39-52) and the check carries
``open_question``. Release differences (docs/runtime-model.md §0.1): 8.5.0's granularity
takes three attributes only, it has no aclrtMemGetAddressRange and checks neither handle
query's output for NULL; 9.1.0 refuses MANAGED physical memory. SoC differences: Ascend950
accepts only expectPtr NULL (any fixed address is 207000, docs/runtime-model.md §4.2), so the
checks of the fixed-address window skip there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import random
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import IO, Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import acl_mem
from acl_mem import raw
from acl_mem.conformance.providers import native_provider
from acl_mem.enums import (
    MemAccessFlags,
    MemAttr,
    MemcpyKind,
    MemGranularityOptions,
    MemLocationType,
)
from acl_mem.errors import (
    AclError,
    ContextNullError,
    FeatureNotSupportError,
    InvalidDeviceIdError,
    InvalidParamError,
    MemoryAllocationError,
    RtParamInvalidError,
)

from .helpers import (
    address_of,
    address_range,
    in_fresh_thread,
    need_fixed_addresses,
    need_giant_pages,
    need_two_devices,
    since,
    takes_fixed_addresses,
)

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
HUGE = 2 * MiB
GIANT = 1 * GiB
WINDOW = (16 * TiB, 24 * TiB)  # docs/runtime-model.md §4.2, §7: the fixed-address window
#: Fixed addresses are tried high in the window, away from where NULL reservations go.
FIXED = 20 * TiB
DEVICE, HOST, UNREGISTERED, HOST_NUMA = (MemLocationType.DEVICE, MemLocationType.HOST,
                                         MemLocationType.UNREGISTERED,
                                         MemLocationType.HOST_NUMA)
#: docs/runtime-model.md §4.3 step 8: host-only attributes (DDR_MEM_HUGE, DDR_MEM_NORMAL, DDR P2P
#: pair).
HOST_ONLY_ATTRS = [2, 3, 6, 7]
#: docs/runtime-model.md §4.3 step 9: attributes aclrtMallocPhysical rejects (and anything > 17).
REJECTED_ATTRS = [0, 1, 8, 9, 11, 18]
GIANT_ATTRS = [MemAttr.HBM_MEM_HUGE1G, MemAttr.MEM_HUGE1G, MemAttr.MEM_P2P_HUGE1G]
#: aclrtMemLocationType MANAGED, named by the header from 9.1.0 only (docs/runtime-model.md §2).
MANAGED = 3
#: The only attributes 8.5.0's aclrtMemGetAllocationGranularity takes (docs/runtime-model.md
#: §4.5 Releases).
GRANULARITY_850 = [MemAttr.HBM_MEM_HUGE, MemAttr.HBM_MEM_NORMAL, MemAttr.HBM_MEM_HUGE1G]
#: The P2P memory types, which 8.5.0's aclrtMemGetAllocationPropertiesFromHandle refuses.
P2P_ATTRS = [MemAttr.DDR_MEM_P2P_HUGE, MemAttr.DDR_MEM_P2P_NORMAL, MemAttr.HBM_MEM_P2P_HUGE,
             MemAttr.HBM_MEM_P2P_NORMAL, MemAttr.HBM_MEM_P2P_HUGE1G, MemAttr.MEM_P2P_NORMAL,
             MemAttr.MEM_P2P_HUGE, MemAttr.MEM_P2P_HUGE1G]
#: For cases whose expectation holds from 9.0.1 on.
SINCE_9_0_1 = pytest.mark.cann("9.0.1", "9.1.0")


# -- helpers ---------------------------------------------------------------------------------------


def prop(attr: int = MemAttr.HBM_MEM_HUGE, location: int = DEVICE, device: int = 0, *,
         handle_type: int = 0, allocation_type: int = 0) -> raw.aclrtPhysicalMemProp:
    return raw.aclrtPhysicalMemProp(handle_type, allocation_type, attr,
                                    raw.aclrtMemLocation(device, location), 0)


def code_of(fn: Callable[[], Any]) -> int:
    """0 if ``fn`` succeeds, else the aclError code it raised."""
    try:
        fn()
    except AclError as exc:
        return exc.code
    return 0


def pattern(size: int, seed: int) -> bytes:
    """Deterministic bytes with a prime period (251), so shifted copies differ."""
    period = bytes((seed * 31 + i * 13) % 251 for i in range(251))
    return (period * (size // 251 + 1))[:size]


def write(va: int, data: bytes) -> None:
    buf = bytearray(data)
    raw.aclrtMemcpy(va, len(buf), address_of(buf), len(buf), MemcpyKind.HOST_TO_DEVICE)


def read(va: int, count: int) -> bytes:
    buf = bytearray(count)
    raw.aclrtMemcpy(address_of(buf), count, va, count, MemcpyKind.DEVICE_TO_HOST)
    return bytes(buf)


def huge_free() -> int:
    return raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0]


def normal_free() -> int:
    return raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)[0]


def pools() -> tuple[int, int]:
    """(free normal-page bytes, free huge-page bytes) of the current device."""
    return normal_free(), huge_free()


def access(location: int = DEVICE, device: int = 0,
           flags: int = MemAccessFlags.READWRITE, rsv: bytes = bytes(12)
           ) -> raw.aclrtMemAccessDesc:
    return raw.aclrtMemAccessDesc(flags, raw.aclrtMemLocation(device, location), rsv)


class Vmm:
    """Reservations, handles and mappings of one check; ``close`` undoes what is left."""

    def __init__(self) -> None:
        self.reserved: list[int] = []
        self.handles: list[int] = []
        self.mapped: list[int] = []
        self.sizes: dict[int, int] = {}

    def reserve(self, size: int, expect: int = 0, flags: int = 0) -> int:
        base = raw.aclrtReserveMemAddress(size, 0, expect, flags)
        self.reserved.append(base)
        return base

    def physical(self, size: int = HUGE, p: raw.aclrtPhysicalMemProp | None = None) -> int:
        handle = raw.aclrtMallocPhysical(size, p if p is not None else prop())
        self.handles.append(handle)
        self.sizes[handle] = size
        return handle

    def map(self, va: int, handle: int) -> None:
        raw.aclrtMapMem(va, self.sizes[handle], 0, handle, 0)
        self.mapped.append(va)

    def unmap(self, va: int) -> None:
        raw.aclrtUnmapMem(va)
        self.mapped.remove(va)

    def free(self, handle: int) -> None:
        raw.aclrtFreePhysical(handle)
        self.handles.remove(handle)

    def release(self, base: int) -> None:
        raw.aclrtReleaseMemAddress(base)
        self.reserved.remove(base)

    def close(self) -> None:
        for va in reversed(self.mapped):
            with contextlib.suppress(AclError):
                raw.aclrtUnmapMem(va)
        for handle in self.handles:
            with contextlib.suppress(AclError):
                raw.aclrtFreePhysical(handle)
        for base in self.reserved:
            with contextlib.suppress(AclError):
                raw.aclrtReleaseMemAddress(base)
        self.mapped.clear()
        self.handles.clear()
        self.reserved.clear()


@pytest.fixture
def vmm(backend: Any) -> Iterator[Vmm]:
    tracker = Vmm()
    try:
        yield tracker
    finally:
        tracker.close()


# -- §4.2 aclrtReserveMemAddress / aclrtReleaseMemAddress ------------------------------------------


@pytest.mark.parametrize("size, alignment, flags", [
    (HUGE, 0, 0), (0, 0, 0), (HUGE, 0, 2), (0, 1, 2), (200 * GiB, 1, 7)])
def test_reserve_null_out_is_100000_first(backend, size, alignment, flags):
    """docs/runtime-model.md §4.2 step 1: virPtr (out) NULL -> 100000, before every other check."""
    rc, _ = backend.aclrtReserveMemAddress(size, alignment, 0, flags, null_outputs=1)
    assert rc == 100000


@pytest.mark.parametrize("alignment, flags", [(0, 0), (0, 1), (1, 0), (HUGE, 0), (0, 2)])
def test_reserve_size_0_is_100000(backend, alignment, flags):
    """docs/runtime-model.md §4.2 step 2: size 0 -> 100000 (ACL layer, before flags and the
    driver)."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtReserveMemAddress(0, alignment, 0, flags)
    assert e.value.code == 100000


@pytest.mark.parametrize("flags", [2, 3, 0x100, 2**63, 2**64 - 1])
def test_reserve_flags_other_than_0_or_1_is_100000(backend, flags):
    """docs/runtime-model.md §4.2 step 3: flags not 0 and not 1 -> 100000."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtReserveMemAddress(HUGE, 0, 0, flags)
    assert e.value.code == 100000


def test_reserve_acl_checks_win_over_driver_checks(backend):
    """docs/runtime-model.md §1.2/§4.2: flags 2 with alignment != 0 or size > 128 GiB -> still
    100000."""
    for size, alignment in [(HUGE, HUGE), (128 * GiB + 1, 0), (256 * GiB, 1)]:
        with pytest.raises(InvalidParamError) as e:
            raw.aclrtReserveMemAddress(size, alignment, 0, 2)
        assert e.value.code == 100000


@pytest.mark.parametrize("flags", [0, 1])
def test_reserve_flags_0_and_1_accepted(backend, vmm, flags):
    """docs/runtime-model.md §4.2: flags 0 and 1 are both accepted (page type not compared,
    §8.4)."""
    base = vmm.reserve(4 * HUGE, flags=flags)
    assert base != 0
    vmm.release(base)


@pytest.mark.open_question(3)
@pytest.mark.parametrize("alignment", [1, 4096, HUGE, GIANT])
def test_reserve_alignment_nonzero_is_107000(backend, alignment):
    """docs/runtime-model.md §4.2 / §8.3: alignment is reserved and must be 0; else 107000
    (driver)."""
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtReserveMemAddress(HUGE, alignment, 0, 0)
    assert e.value.code == 107000


@pytest.mark.open_question(8)
@pytest.mark.parametrize("size", [128 * GiB + 1, 128 * GiB + HUGE, 1 * TiB])
def test_reserve_over_128_gib_is_207001(backend, size):
    """docs/runtime-model.md §4.2, §7 / §8.8: more than 128 GiB in one reservation -> 207001."""
    with pytest.raises(MemoryAllocationError) as e:
        raw.aclrtReserveMemAddress(size, 0, 0, 0)
    assert e.value.code == 207001


def test_reserve_exactly_128_gib_succeeds(backend, vmm):
    """docs/runtime-model.md §4.2, §7: at most 128 GiB per reservation -- 128 GiB itself is
    allowed."""
    base = vmm.reserve(128 * GiB)
    assert base % GIANT == 0
    vmm.release(base)


def test_reserve_torch_npu_probe_512_bytes(backend):
    """docs/runtime-model.md §4.2, §5.1: torch_npu's probe aclrtReserveMemAddress(&p, 512, 0, NULL,
    1)
    succeeds and aclrtReleaseMemAddress(p) succeeds."""
    base = raw.aclrtReserveMemAddress(512, 0, 0, 1)
    assert base != 0
    raw.aclrtReleaseMemAddress(base)


@pytest.mark.open_question(7)
@pytest.mark.parametrize("size, alignment", [
    (512, HUGE), (HUGE, HUGE), (3 * MiB, HUGE), (20 * MiB, HUGE), (GIANT - HUGE, HUGE),
    (GIANT, GIANT), (GIANT + 1, GIANT), (3 * GIANT, GIANT)])
def test_reserve_returned_address_alignment(backend, vmm, size, alignment):
    """docs/runtime-model.md §4.2 / §8.7 (docs/fidelity.md row 40): the address for expectPtr NULL
    is 2 MiB
    aligned, 1 GiB aligned when size >= 1 GiB, and lies in [16 TiB, 24 TiB)."""
    vmm.reserve(HUGE)  # something already reserved, so the next one is not the first
    base = vmm.reserve(size)
    assert base % alignment == 0, hex(base)
    assert WINDOW[0] <= base and base + size <= WINDOW[1], hex(base)


@pytest.mark.open_question(7)
def test_reserve_live_reservations_do_not_overlap(backend, vmm):
    """docs/runtime-model.md §4.2 (docs/fidelity.md row 40): live reservations are disjoint; each
    occupies its
    size rounded up to 2 MiB."""
    sizes = [512, HUGE, 3 * MiB, GIANT, 5 * HUGE, 1]
    spans = sorted((vmm.reserve(n), -(-n // HUGE) * HUGE) for n in sizes)
    for (a, a_span), (b, _) in pairwise(spans):
        assert a + a_span <= b, (hex(a), a_span, hex(b))


@pytest.mark.parametrize("size, offset", [
    (100, 2 * MiB),                  # size <= 2 MiB: 2 MiB alignment
    (HUGE, 2 * MiB),
    (3 * MiB, 4 * MiB),              # 2^ceil(log2 3 MiB) = 4 MiB
    (5 * MiB, 8 * MiB),
    (512 * MiB, 512 * MiB),          # exactly 512 MiB: 512 MiB alignment
    (512 * MiB + 1, GIANT),          # > 512 MiB: 1 GiB alignment
    (3 * GIANT, 2 * GIANT),
])
def test_reserve_expect_ptr_returns_that_address(backend, vmm, size, offset):
    """docs/runtime-model.md §4.2 fake recommendation (docs/fidelity.md row 39): an aligned
    expectPtr inside [16 TiB, 24 TiB) is returned exactly; a SoC that accepts only expectPtr
    NULL (Ascend950) answers 207000."""
    expect = FIXED + offset
    if takes_fixed_addresses():
        assert vmm.reserve(size, expect) == expect
        return
    with pytest.raises(FeatureNotSupportError) as e:
        vmm.reserve(size, expect)
    assert e.value.code == 207000


@pytest.mark.parametrize("size, offset", [
    (100, 1 * MiB),                  # needs 2 MiB
    (HUGE, 4 * KiB),
    (3 * MiB, 2 * MiB),              # needs 4 MiB
    (5 * MiB, 4 * MiB),              # needs 8 MiB
    (512 * MiB, 256 * MiB),          # needs 512 MiB
    (512 * MiB + 1, 512 * MiB),      # needs 1 GiB
    (3 * GIANT, GIANT + HUGE),
])
def test_reserve_expect_ptr_misaligned_is_107000(backend, size, offset):
    """docs/runtime-model.md §4.2 (docs/fidelity.md row 39): expectPtr not aligned to max(2 MiB,
    2^ceil(log2 size))
    (size <= 512 MiB) or 1 GiB (larger) -> 107000."""
    need_fixed_addresses()
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtReserveMemAddress(size, 0, FIXED + offset, 0)
    assert e.value.code == 107000


@pytest.mark.parametrize("expect, size", [
    (15 * TiB, HUGE),                     # below the window
    (16 * TiB - GIANT, GIANT),            # just below
    (24 * TiB, HUGE),                     # at the end
    (24 * TiB - GIANT, 2 * GIANT),        # starts inside, ends past 24 TiB
    (40 * TiB, GIANT),
])
def test_reserve_expect_ptr_outside_window_is_207001(backend, expect, size):
    """docs/runtime-model.md §4.2 (docs/fidelity.md row 39): expectPtr outside [16 TiB, 24 TiB) ->
    207001."""
    need_fixed_addresses()
    with pytest.raises(MemoryAllocationError) as e:
        raw.aclrtReserveMemAddress(size, 0, expect, 0)
    assert e.value.code == 207001


def test_reserve_expect_ptr_window_edges(backend, vmm):
    """docs/runtime-model.md §4.2: the first and the last GiB of the window can be reserved by
    address."""
    need_fixed_addresses()
    assert vmm.reserve(GIANT, 16 * TiB) == 16 * TiB
    assert vmm.reserve(GIANT, 24 * TiB - GIANT) == 24 * TiB - GIANT


def test_reserve_expect_ptr_overlapping_is_207001(backend, vmm):
    """docs/runtime-model.md §4.2 (docs/fidelity.md row 39): an expectPtr range overlapping a live
    reservation -> 207001;
    after the release a neighbour-free range is available again."""
    need_fixed_addresses()
    fixed = vmm.reserve(GIANT, FIXED)
    for expect, size in [(FIXED, GIANT), (FIXED, HUGE), (FIXED + 512 * MiB, 512 * MiB),
                         (FIXED + GIANT - HUGE, HUGE), (FIXED - GIANT, 2 * GIANT)]:
        with pytest.raises(MemoryAllocationError) as e:
            raw.aclrtReserveMemAddress(size, 0, expect, 0)
        assert e.value.code == 207001, (hex(expect), size)
    # Right after the end is free.
    assert vmm.reserve(HUGE, fixed + GIANT) == fixed + GIANT
    # An address the driver chose is occupied as well.
    chosen = vmm.reserve(HUGE)
    with pytest.raises(MemoryAllocationError) as e:
        raw.aclrtReserveMemAddress(HUGE, 0, chosen, 0)
    assert e.value.code == 207001


@pytest.mark.fake_only("only the fake can switch to the Ascend950 profile")
def test_reserve_expect_ptr_on_ascend950_is_207000(fake):
    """docs/runtime-model.md §4.2 (docs/fidelity.md row 39): on 950 only expectPtr NULL is allowed
    -> 207000."""
    acl_mem.fake.configure("ascend950")
    with pytest.raises(FeatureNotSupportError) as e:
        raw.aclrtReserveMemAddress(HUGE, 0, FIXED, 0)
    assert e.value.code == 207000
    base = raw.aclrtReserveMemAddress(HUGE, 0, 0, 0)
    raw.aclrtReleaseMemAddress(base)


def test_release_null_is_100000(backend):
    """docs/runtime-model.md §4.2: aclrtReleaseMemAddress(NULL) -> 100000."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtReleaseMemAddress(0)
    assert e.value.code == 100000


@pytest.mark.open_question(2)
def test_release_unknown_or_twice_is_107000(backend, vmm):
    """docs/runtime-model.md §4.2 / §8.2: releasing an address that is not a live reservation's
    start
    (never reserved, inside one, released already) -> 107000."""
    base = vmm.reserve(4 * HUGE)
    for address in [FIXED + 64 * GiB, base + HUGE, base + 1]:
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtReleaseMemAddress(address)
        assert e.value.code == 107000, hex(address)
    vmm.release(base)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtReleaseMemAddress(base)
    assert e.value.code == 107000


@pytest.mark.open_question(3)
def test_release_while_mapped_is_107000(backend, vmm):
    """docs/runtime-model.md §4.2 / §8.3: release while a mapping is in it -> 107000; after the
    unmap
    the release succeeds."""
    base = vmm.reserve(2 * HUGE)
    handle = vmm.physical()
    vmm.map(base + HUGE, handle)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtReleaseMemAddress(base)
    assert e.value.code == 107000
    vmm.unmap(base + HUGE)
    vmm.release(base)


# -- §4.3 aclrtMallocPhysical / aclrtFreePhysical --------------------------------------------------


def _malloc_rc(backend: Any, size: int = HUGE, p: raw.aclrtPhysicalMemProp | None = None,
               flags: int = 0, null_outputs: int = 0) -> int:
    rc, handle = backend.aclrtMallocPhysical(size, p, flags, null_outputs=null_outputs)
    if rc == 0:
        backend.aclrtFreePhysical(handle)
    return int(rc)


#: (case, size, prop, flags, null_outputs) for docs/runtime-model.md §4.3 steps 1-9, one wrong thing
#: each.
_ACL_CASES: list[tuple[str, int, raw.aclrtPhysicalMemProp | None, int, int]] = [
    ("1 handle NULL", HUGE, prop(), 0, 1),
    ("2 prop NULL", HUGE, None, 0, 0),
    ("3 size 0", 0, prop(), 0, 0),
    ("4 flags 1", HUGE, prop(), 1, 0),
    ("4 flags 2**63", HUGE, prop(), 2**63, 0),
    ("5 handleType POSIX", HUGE, prop(handle_type=2), 0, 0),
    ("5 handleType 1", HUGE, prop(handle_type=1), 0, 0),
    ("6 allocationType 1", HUGE, prop(allocation_type=1), 0, 0),
    ("7 location UNREGISTERED", HUGE, prop(location=UNREGISTERED), 0, 0),
    *[(f"8 DEVICE with DDR attr {a}", HUGE, prop(a), 0, 0) for a in HOST_ONLY_ATTRS],
    *[(f"9 DEVICE attr {a}", HUGE, prop(a), 0, 0) for a in [*REJECTED_ATTRS, 2**32 - 1]],
    *[(f"9 HOST attr {a}", HUGE, prop(a, HOST), 0, 0) for a in REJECTED_ATTRS],
]


@pytest.mark.parametrize("case, size, p, flags, null_outputs", _ACL_CASES,
                         ids=[c[0] for c in _ACL_CASES])
def test_malloc_physical_acl_checks_are_100000(backend, case, size, p, flags, null_outputs):
    """docs/runtime-model.md §4.3 steps 1-9: every ACL-layer check fails with 100000."""
    assert _malloc_rc(backend, size, p, flags, null_outputs) == 100000


#: Several things wrong at once: (case, size, prop, flags, null_outputs, expected code).
_ORDER_CASES: list[tuple[str, int, raw.aclrtPhysicalMemProp | None, int, int, int]] = [
    ("size 0 + handleType POSIX", 0, prop(handle_type=2), 0, 0, 100000),
    ("NULL handle + device 99", HUGE, prop(device=99), 0, 1, 100000),
    ("size 0 + device 99", 0, prop(device=99), 0, 0, 100000),
    ("flags 1 + device 99", HUGE, prop(device=99), 1, 0, 100000),
    ("allocationType 1 + device 99", HUGE, prop(device=99, allocation_type=1), 0, 0, 100000),
    ("UNREGISTERED + bad attr", HUGE, prop(1, UNREGISTERED, 99), 0, 0, 100000),
    ("bad memAttr + device 99", HUGE, prop(1, DEVICE, 99), 0, 0, 100000),
    ("DDR attr on DEVICE + device 99", HUGE, prop(2, DEVICE, 99), 0, 0, 100000),
    ("1 MiB (driver) + bad memAttr", MiB, prop(0), 0, 0, 100000),
    ("1 MiB (driver) + handleType 2", MiB, prop(handle_type=2), 0, 0, 100000),
    ("good attr + device 99", HUGE, prop(device=99), 0, 0, 107001),
    ("good attr + device 2**32-1", HUGE, prop(device=2**32 - 1), 0, 0, 107001),
    ("1 MiB (driver) + device 99", MiB, prop(device=99), 0, 0, 107001),
    ("200 GiB (out of memory) + device 99", 200 * GiB, prop(device=99), 0, 0, 107001),
]


@pytest.mark.parametrize("case, size, p, flags, null_outputs, expected", _ORDER_CASES,
                         ids=[c[0] for c in _ORDER_CASES])
def test_malloc_physical_check_order(backend, case, size, p, flags, null_outputs, expected):
    """docs/runtime-model.md §1.2/§4.3: ACL checks (100000) win over the runtime's device id
    (107001),
    which wins over the driver's size and memory checks."""
    assert _malloc_rc(backend, size, p, flags, null_outputs) == expected


def test_malloc_physical_device_id_equal_to_count_is_107001(backend):
    """docs/runtime-model.md §4.3 step 10: location DEVICE with id == device count -> 107001."""
    count = raw.aclrtGetDeviceCount()
    with pytest.raises(InvalidDeviceIdError) as e:
        raw.aclrtMallocPhysical(HUGE, prop(device=count))
    assert e.value.code == 107001


@pytest.mark.cann("9.1.0")
def test_malloc_physical_managed_location_is_100000(backend):
    """docs/runtime-model.md §4.3 Releases: 9.1.0 rejects location MANAGED (3) in the ACL layer
    (step 7) -> 100000, before the attribute and device-id checks and without a context."""
    for p in (prop(location=MANAGED), prop(location=MANAGED, device=99),
              prop(MemAttr.MEM_HUGE, MANAGED)):
        assert _malloc_rc(backend, HUGE, p) == 100000
    _, error = in_fresh_thread(lambda: raw.aclrtMallocPhysical(HUGE, prop(location=MANAGED)))
    assert isinstance(error, InvalidParamError) and error.code == 100000, error


@pytest.mark.cann("8.5.0", "9.0.1")
@pytest.mark.open_question(3)
def test_malloc_physical_managed_location_reaches_the_driver_before_9_1(backend):
    """docs/runtime-model.md §4.3 Releases: before 9.1.0 location MANAGED (3) passes the ACL
    checks and reaches the driver (the fake: 107000, docs/fidelity.md row 44); the ACL
    attribute checks still come first (100000)."""
    assert _malloc_rc(backend, HUGE, prop(location=MANAGED)) == 107000
    assert _malloc_rc(backend, HUGE, prop(1, MANAGED)) == 100000
    assert _malloc_rc(backend, HUGE, prop(handle_type=2, location=MANAGED)) == 100000


@pytest.mark.parametrize("attr", [*HOST_ONLY_ATTRS, MemAttr.HBM_MEM_HUGE])
def test_malloc_physical_host_location_takes_no_device_pool(dev, vmm, attr):
    """docs/runtime-model.md §4.3: DDR attrs are host-only and accepted with location HOST, as is
    ACL_HBM_MEM_HUGE (torch_npu's host allocator); the id of HOST is ignored; host memory
    takes nothing from the device's page pools (docs/fidelity.md row 47)."""
    before = pools()
    handle = vmm.physical(2 * HUGE, prop(attr, HOST, 99))
    assert pools() == before
    vmm.free(handle)
    assert pools() == before


@pytest.mark.open_question(3)
@pytest.mark.parametrize("attr", [MemAttr.HBM_MEM_HUGE, MemAttr.HBM_MEM_NORMAL,
                                  MemAttr.MEM_HUGE, MemAttr.MEM_NORMAL])
@pytest.mark.parametrize("size", [1, 4 * KiB, MiB, HUGE + 4 * KiB, 3 * MiB, 2 * HUGE - 1])
def test_malloc_physical_size_not_multiple_of_2_mib_is_107000(backend, attr, size):
    """docs/runtime-model.md §4.3 step 11 / §8.3 (docs/fidelity.md row 44): size not a multiple of 2
    MiB -> 107000."""
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMallocPhysical(size, prop(attr))
    assert e.value.code == 107000


def test_malloc_physical_out_of_huge_memory_is_207001(dev, vmm):
    """docs/runtime-model.md §4.3 step 11: more than the free huge-page memory -> 207001; nothing
    taken."""
    before = pools()
    too_much = before[1] + HUGE
    with pytest.raises(MemoryAllocationError) as e:
        raw.aclrtMallocPhysical(too_much, prop())
    assert e.value.code == 207001
    assert pools() == before
    # Exactly what is free still fits.
    handle = vmm.physical(before[1])
    assert huge_free() == 0
    vmm.free(handle)
    assert pools() == before


def test_malloc_physical_out_of_normal_memory_is_207001(dev):
    """docs/runtime-model.md §4.3 step 11 (docs/fidelity.md row 47): ACL_MEM_NORMAL beyond the free
    normal pages -> 207001."""
    before = pools()
    with pytest.raises(MemoryAllocationError) as e:
        raw.aclrtMallocPhysical(before[0] + HUGE, prop(MemAttr.MEM_NORMAL))
    assert e.value.code == 207001
    assert pools() == before


@pytest.mark.parametrize("attr, pool", [
    (MemAttr.HBM_MEM_HUGE, "huge"), (MemAttr.HBM_MEM_NORMAL, "huge"),
    (MemAttr.MEM_HUGE, "huge"), (MemAttr.MEM_P2P_HUGE, "huge"),
    (MemAttr.MEM_NORMAL, "normal"), (MemAttr.MEM_P2P_NORMAL, "normal")])
def test_malloc_physical_page_pool_accounting(dev, vmm, attr, pool):
    """docs/runtime-model.md §4.3 (docs/fidelity.md row 47): HBM_MEM_NORMAL is allocated as 2 MiB
    pages, so it and the HUGE attrs take huge-pool bytes; MEM_NORMAL takes normal-pool bytes; free
    gives
    them back."""
    size = 3 * HUGE
    before = pools()
    handle = vmm.physical(size, prop(attr))
    taken = (before[0] - normal_free(), before[1] - huge_free())
    assert taken == ((size, 0) if pool == "normal" else (0, size))
    vmm.free(handle)
    assert pools() == before


@pytest.mark.parametrize("attr", GIANT_ATTRS)
def test_malloc_physical_huge1g(dev, vmm, cann, attr):
    """docs/runtime-model.md §4.3, §4.5: *_HUGE1G has 1 GiB granularity (asked of
    aclrtMemGetAllocationGranularity, which takes only ACL_HBM_MEM_HUGE1G of them on 8.5.0):
    2 MiB -> 107000, 1 GiB succeeds and takes one 1 GiB page (from the huge pool,
    docs/fidelity.md row 47)."""
    need_giant_pages()
    if attr in GRANULARITY_850 or since(cann, "9.0.1"):
        assert raw.aclrtMemGetAllocationGranularity(prop(attr)) == GIANT
    for size in (HUGE, GIANT - HUGE, GIANT + HUGE):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMallocPhysical(size, prop(attr))
        assert e.value.code == 107000, size
    giant0, huge0 = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE1G)[0], huge_free()
    handle = vmm.physical(GIANT, prop(attr))
    assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE1G)[0] == giant0 - GIANT
    assert huge_free() == huge0 - GIANT
    vmm.free(handle)
    assert (raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE1G)[0], huge_free()) == (giant0, huge0)


@pytest.mark.fake_only("only the fake can switch to the Atlas-inference profile")
def test_malloc_physical_huge1g_without_1g_pages_is_207000(fake):
    """docs/runtime-model.md §4.3 step 10: 1 GiB page type on a chip without them -> 207000."""
    acl_mem.fake.configure("atlas-inference")
    with pytest.raises(FeatureNotSupportError) as e:
        raw.aclrtMallocPhysical(GIANT, prop(MemAttr.MEM_HUGE1G))
    assert e.value.code == 207000


def test_malloc_physical_host_numa_without_context_is_107002(backend):
    """docs/runtime-model.md §4.3 step 10: location HOST_NUMA needs a current context -> 107002."""
    _, error = in_fresh_thread(lambda: raw.aclrtMallocPhysical(HUGE, prop(
        MemAttr.HBM_MEM_HUGE, HOST_NUMA)))
    assert isinstance(error, ContextNullError)
    assert error.code == 107002


def test_malloc_physical_host_numa_acl_check_wins_over_context(backend):
    """docs/runtime-model.md §1.2/§4.3: a bad memAttr with HOST_NUMA and no context -> 100000, not
    107002."""
    _, error = in_fresh_thread(lambda: raw.aclrtMallocPhysical(HUGE, prop(1, HOST_NUMA)))
    assert isinstance(error, InvalidParamError)
    assert error.code == 100000


@pytest.mark.fake_only("the fake has no NUMA host memory (docs/fidelity.md row 45); "
                       "a host with it succeeds")
def test_malloc_physical_host_numa_with_context_is_207000(fake, dev):
    """docs/runtime-model.md §4.3 step 10 (docs/fidelity.md row 45): HOST_NUMA with a context ->
    207000 on the fake."""
    with pytest.raises(FeatureNotSupportError) as e:
        raw.aclrtMallocPhysical(HUGE, prop(MemAttr.HBM_MEM_HUGE, HOST_NUMA))
    assert e.value.code == 207000


def test_free_physical_null_is_100000(backend):
    """docs/runtime-model.md §4.3: aclrtFreePhysical(NULL) -> 100000."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtFreePhysical(0)
    assert e.value.code == 100000


@pytest.mark.open_question(2)
def test_free_physical_unknown_or_twice_is_107000(backend):
    """docs/runtime-model.md §4.3 / §8.2: freeing an unknown handle or a handle twice -> 107000."""
    handle = raw.aclrtMallocPhysical(HUGE, prop())
    for bogus in (0x1234_5000, handle + 8):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtFreePhysical(bogus)
        assert e.value.code == 107000, hex(bogus)
    raw.aclrtFreePhysical(handle)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtFreePhysical(handle)
    assert e.value.code == 107000


# -- §4.5 aclrtMemGetAllocationGranularity ---------------------------------------------------------


def test_granularity_null_prop_or_output_is_100000(backend):
    """docs/runtime-model.md §4.5: prop NULL or granularity NULL -> 100000."""
    assert backend.aclrtMemGetAllocationGranularity(None, 0)[0] == 100000
    assert backend.aclrtMemGetAllocationGranularity(prop(), 0, null_outputs=1)[0] == 100000
    assert backend.aclrtMemGetAllocationGranularity(prop(1, DEVICE, 99), 0,
                                                    null_outputs=1)[0] == 100000


_GRANULARITY_BAD = [
    # 8.5.0 does not look at the location type (see the 8.5.0 check below).
    pytest.param("UNREGISTERED", prop(location=UNREGISTERED), marks=SINCE_9_0_1,
                 id="UNREGISTERED"),
    *[pytest.param(case, p, id=case) for case, p in [
        *[(f"DEVICE DDR attr {a}", prop(a)) for a in HOST_ONLY_ATTRS],
        *[(f"attr {a}", prop(a)) for a in REJECTED_ATTRS],
        ("bad attr + device 99", prop(1, DEVICE, 99))]],
]


@pytest.mark.parametrize("case, p", _GRANULARITY_BAD)
def test_granularity_prop_validation_is_100000(backend, case, p):
    """docs/runtime-model.md §4.5: the memAttr/location validation of aclrtMallocPhysical ->
    100000."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtMemGetAllocationGranularity(p)
    assert e.value.code == 100000


@pytest.mark.parametrize("device", [99, 2**32 - 1, "count"])
def test_granularity_bad_device_id_is_107001(backend, device):
    """docs/runtime-model.md §4.5: location DEVICE with a bad id -> 107001."""
    dev_id = raw.aclrtGetDeviceCount() if device == "count" else device
    with pytest.raises(InvalidDeviceIdError) as e:
        raw.aclrtMemGetAllocationGranularity(prop(device=dev_id))
    assert e.value.code == 107001


def test_granularity_does_not_check_handle_or_allocation_type(backend):
    """docs/runtime-model.md §4.5: handleType and allocationType are not checked."""
    p = prop(handle_type=2, allocation_type=1)
    assert raw.aclrtMemGetAllocationGranularity(p) == HUGE


@pytest.mark.open_question(6)
@pytest.mark.parametrize("attr, location", [
    (MemAttr.HBM_MEM_HUGE, DEVICE), (MemAttr.HBM_MEM_NORMAL, DEVICE),
    *[pytest.param(attr, location, marks=SINCE_9_0_1) for attr, location in [
        (MemAttr.MEM_HUGE, DEVICE), (MemAttr.MEM_P2P_HUGE, DEVICE),
        (MemAttr.MEM_NORMAL, DEVICE), (MemAttr.MEM_P2P_NORMAL, DEVICE),
        (MemAttr.DDR_MEM_HUGE, HOST), (MemAttr.DDR_MEM_NORMAL, HOST),
        (MemAttr.DDR_MEM_P2P_HUGE, HOST), (MemAttr.DDR_MEM_P2P_NORMAL, HOST)]],
    (MemAttr.HBM_MEM_HUGE, HOST)])
def test_granularity_is_2_mib(backend, attr, location):
    """docs/runtime-model.md §4.5 / §8.6 (docs/fidelity.md row 46): 2 MiB for everything but
    *_HUGE1G (8.5.0 takes the HBM attributes only); MINIMUM and RECOMMENDED agree."""
    p = prop(attr, location)
    assert raw.aclrtMemGetAllocationGranularity(p, MemGranularityOptions.MINIMUM) == HUGE
    assert raw.aclrtMemGetAllocationGranularity(p, MemGranularityOptions.RECOMMENDED) == HUGE


@pytest.mark.open_question(6)
@pytest.mark.parametrize("attr", [MemAttr.HBM_MEM_HUGE1G,
                                  *[pytest.param(a, marks=SINCE_9_0_1) for a in GIANT_ATTRS[1:]]])
def test_granularity_huge1g_is_1_gib(dev, attr):
    """docs/runtime-model.md §4.5 / §8.6: 1 GiB for *_HUGE1G; MINIMUM and RECOMMENDED agree."""
    need_giant_pages()
    p = prop(attr)
    assert raw.aclrtMemGetAllocationGranularity(p, MemGranularityOptions.MINIMUM) == GIANT
    assert raw.aclrtMemGetAllocationGranularity(p, MemGranularityOptions.RECOMMENDED) == GIANT


@pytest.mark.cann("8.5.0")
def test_granularity_on_8_5_0_takes_the_hbm_attributes_only(backend):
    """docs/runtime-model.md §4.5 Releases: 8.5.0 takes ACL_HBM_MEM_HUGE, ACL_HBM_MEM_NORMAL and
    ACL_HBM_MEM_HUGE1G only (any other attribute, host ones included -> 100000) and validates
    location.id as a device id whatever the location (HOST with id = device count -> 107001).
    It does not look at the location type: an UNREGISTERED prop with an HBM attribute gets
    its granularity (the fake's reading: §4.5 lists no location check for 8.5.0)."""
    count = raw.aclrtGetDeviceCount()
    for attr in [a for a in range(18) if a not in GRANULARITY_850]:
        for location in (DEVICE, HOST):
            with pytest.raises(InvalidParamError) as e:
                raw.aclrtMemGetAllocationGranularity(prop(attr, location))
            assert e.value.code == 100000, (attr, location)
    for location in (DEVICE, HOST, UNREGISTERED):
        assert raw.aclrtMemGetAllocationGranularity(prop(MemAttr.HBM_MEM_HUGE, location)) == HUGE
        assert raw.aclrtMemGetAllocationGranularity(
            prop(MemAttr.HBM_MEM_NORMAL, location)) == HUGE
        assert raw.aclrtMemGetAllocationGranularity(
            prop(MemAttr.HBM_MEM_HUGE1G, location)) == GIANT
        with pytest.raises(InvalidDeviceIdError) as e2:
            raw.aclrtMemGetAllocationGranularity(prop(MemAttr.HBM_MEM_HUGE, location, count))
        assert e2.value.code == 107001
    # The attribute check (ACL layer) comes before the device id (runtime).
    with pytest.raises(InvalidParamError) as e3:
        raw.aclrtMemGetAllocationGranularity(prop(MemAttr.MEM_HUGE, HOST, count))
    assert e3.value.code == 100000


@SINCE_9_0_1
def test_granularity_host_location_id_is_not_a_device_id(backend):
    """docs/runtime-model.md §4.5: from 9.0.1 location.id is validated for DEVICE locations only:
    a HOST prop with an id at or above the device count still gets its granularity (8.5.0:
    107001, see above)."""
    count = raw.aclrtGetDeviceCount()
    for attr in (MemAttr.HBM_MEM_HUGE, MemAttr.DDR_MEM_HUGE):
        assert raw.aclrtMemGetAllocationGranularity(prop(attr, HOST, count)) == HUGE


# -- §4.4 aclrtMapMem / aclrtUnmapMem --------------------------------------------------------------


@pytest.mark.parametrize("case", ["virPtr NULL", "handle NULL", "size 0", "flags 1",
                                  "flags 2**63", "virPtr NULL + offset 1",
                                  "flags 1 + unknown handle", "size 0 + misaligned"])
def test_map_acl_checks_are_100000(backend, vmm, case):
    """docs/runtime-model.md §4.4 steps 1-4: virPtr NULL, handle NULL, size 0, flags != 0 -> 100000,
    before any driver check."""
    base = vmm.reserve(2 * HUGE)
    handle = vmm.physical()
    args = {
        "virPtr NULL": (0, HUGE, 0, handle, 0),
        "handle NULL": (base, HUGE, 0, 0, 0),
        "size 0": (base, 0, 0, handle, 0),
        "flags 1": (base, HUGE, 0, handle, 1),
        "flags 2**63": (base, HUGE, 0, handle, 2**63),
        "virPtr NULL + offset 1": (0, HUGE, 1, handle, 0),
        "flags 1 + unknown handle": (base, HUGE, 0, 0x1234_5000, 1),
        "size 0 + misaligned": (base + 4096, 0, 0, handle, 0),
    }[case]
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtMapMem(*args)
    assert e.value.code == 100000
    # Nothing got mapped: the whole handle still maps at the base.
    vmm.map(base, handle)


@pytest.mark.open_question(3)
@pytest.mark.parametrize("case", [
    "offset 1", "offset 2 MiB", "size 4 MiB for a 2 MiB handle", "size 1 MiB",
    "virPtr + 4 KiB", "virPtr + 1 MiB", "virPtr outside any reservation",
    "virPtr of aclrtMalloc memory", "past the reservation end",
    "starts at the reservation end"])
def test_map_driver_checks_are_107000(dev, vmm, case):
    """docs/runtime-model.md §4.4 step 5 / §8.3 (docs/fidelity.md row 42): offset != 0, size !=
    physical size,
    virPtr not 2 MiB aligned, outside a reservation or running past its end -> 107000."""
    base = vmm.reserve(4 * HUGE)
    handle = vmm.physical()
    big = vmm.physical(2 * HUGE)
    buf = dev.malloc(4 * MiB)
    args = {
        "offset 1": (base, HUGE, 1, handle),
        "offset 2 MiB": (base, HUGE, HUGE, big),
        "size 4 MiB for a 2 MiB handle": (base, 2 * HUGE, 0, handle),
        "size 1 MiB": (base, MiB, 0, handle),
        "virPtr + 4 KiB": (base + 4 * KiB, HUGE, 0, handle),
        "virPtr + 1 MiB": (base + MiB, HUGE, 0, handle),
        "virPtr outside any reservation": (FIXED + 64 * GiB, HUGE, 0, handle),
        "virPtr of aclrtMalloc memory": (buf.ptr, HUGE, 0, handle),
        "past the reservation end": (base + 3 * HUGE, 2 * HUGE, 0, big),
        "starts at the reservation end": (base + 4 * HUGE, HUGE, 0, handle),
    }[case]
    try:
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMapMem(*args, 0)
        assert e.value.code == 107000
    finally:
        buf.free()


@pytest.mark.open_question(3)
def test_map_over_an_existing_mapping_is_107000(dev, vmm):
    """docs/runtime-model.md §4.4 / §8.3 (docs/fidelity.md row 42): a range overlapping a mapping ->
    107000; the
    mapping's bytes are untouched."""
    base = vmm.reserve(4 * HUGE)
    first = vmm.physical(2 * HUGE)
    other = vmm.physical()
    vmm.map(base + HUGE, first)
    write(base + HUGE, pattern(2 * HUGE, 1))
    for va, handle in [(base + HUGE, other), (base + 2 * HUGE, other), (base, first),
                       (base + HUGE, first)]:
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMapMem(va, vmm.sizes[handle], 0, handle, 0)
        assert e.value.code == 107000, (hex(va - base), handle == first)
    assert read(base + HUGE, 2 * HUGE) == pattern(2 * HUGE, 1)
    # The free neighbours are still usable.
    vmm.map(base, other)
    vmm.map(base + 3 * HUGE, vmm.physical())


@pytest.mark.open_question(2)
def test_map_freed_or_unknown_handle_is_107000(backend, vmm):
    """docs/runtime-model.md §4.4 / §8.2 (docs/fidelity.md row 42): a freed or never allocated
    handle -> 107000."""
    base = vmm.reserve(2 * HUGE)
    freed = raw.aclrtMallocPhysical(HUGE, prop())
    raw.aclrtFreePhysical(freed)
    for handle in (freed, 0x1234_5000):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMapMem(base, HUGE, 0, handle, 0)
        assert e.value.code == 107000


def test_map_one_handle_at_two_addresses_shows_the_same_bytes(dev, vmm):
    """docs/runtime-model.md §4.4: a handle mapped at two addresses (two reservations) is one
    memory."""
    first = vmm.reserve(2 * HUGE)
    second = vmm.reserve(4 * HUGE)
    handle = vmm.physical(2 * HUGE)
    vmm.map(first, handle)
    vmm.map(second + 2 * HUGE, handle)
    data = pattern(2 * HUGE, 7)
    write(first, data)
    assert read(second + 2 * HUGE, 2 * HUGE) == data
    write(second + 2 * HUGE + 12345, b"through the second mapping")
    assert read(first + 12345, 26) == b"through the second mapping"


def test_map_copy_across_two_adjacent_mappings(dev, vmm):
    """docs/runtime-model.md §4.4: two handles mapped back to back are one contiguous range for
    copies."""
    base = vmm.reserve(2 * HUGE)
    low, high = vmm.physical(), vmm.physical()
    vmm.map(base, low)
    vmm.map(base + HUGE, high)
    data = pattern(64 * KiB, 3)
    start = base + HUGE - 16 * KiB
    write(start, data)
    assert read(start, len(data)) == data
    assert read(base + HUGE, 48 * KiB) == data[16 * KiB:]
    # Device-to-device across the seam into the low mapping.
    raw.aclrtMemcpy(base, 64 * KiB, start, 64 * KiB, MemcpyKind.DEVICE_TO_DEVICE)
    assert read(base, 64 * KiB) == data
    # The same bytes are seen again through the handle mapped elsewhere.
    other = vmm.reserve(HUGE)
    vmm.map(other, high)
    assert read(other, 48 * KiB) == data[16 * KiB:]


@pytest.mark.parametrize("case", ["reserved, never mapped", "after unmap",
                                  "running into an unmapped range"])
def test_memcpy_to_unmapped_address_is_107000(dev, vmm, case):
    """docs/runtime-model.md §3.10, §4.4 (docs/fidelity.md row 4): copying to or from reserved but
    unmapped addresses
    -> 107000."""
    base = vmm.reserve(2 * HUGE)
    handle = vmm.physical()
    vmm.map(base, handle)
    if case == "after unmap":
        vmm.unmap(base)
        target, count = base, 4 * KiB
    elif case == "reserved, never mapped":
        target, count = base + HUGE, 4 * KiB
    else:
        target, count = base + HUGE - 4 * KiB, 8 * KiB
    host = bytearray(count)
    for dst, src in [(target, address_of(host)), (address_of(host), target)]:
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemcpy(dst, count, src, count, MemcpyKind.DEFAULT)
        assert e.value.code == 107000


def test_unmap_null_is_100000(backend):
    """docs/runtime-model.md §4.4: aclrtUnmapMem(NULL) -> 100000."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtUnmapMem(0)
    assert e.value.code == 100000


@pytest.mark.open_question(2)
def test_unmap_not_a_mapping_start_is_107000(backend, vmm):
    """docs/runtime-model.md §4.4 / §8.2 (docs/fidelity.md row 42): unmapping inside a mapping, an
    unmapped reservation
    address, an unknown address, or twice -> 107000."""
    base = vmm.reserve(4 * HUGE)
    handle = vmm.physical(2 * HUGE)
    vmm.map(base, handle)
    for address in [base + HUGE, base + 4096, base + 2 * HUGE, FIXED + 64 * GiB]:
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtUnmapMem(address)
        assert e.value.code == 107000, hex(address - base)
    vmm.unmap(base)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtUnmapMem(base)
    assert e.value.code == 107000


def test_free_physical_while_mapped(dev, vmm):
    """docs/runtime-model.md §4.3: aclrtFreePhysical of mapped memory succeeds; the memory stays
    readable
    and its pool bytes come back only after the last aclrtUnmapMem."""
    first, second = vmm.reserve(2 * HUGE), vmm.reserve(2 * HUGE)
    before = huge_free()
    handle = raw.aclrtMallocPhysical(2 * HUGE, prop())
    vmm.sizes[handle] = 2 * HUGE
    vmm.map(first, handle)
    vmm.map(second, handle)
    write(first, pattern(HUGE, 5))
    raw.aclrtFreePhysical(handle)
    assert huge_free() == before - 2 * HUGE
    assert read(second, HUGE) == pattern(HUGE, 5)
    vmm.unmap(first)
    assert huge_free() == before - 2 * HUGE
    assert read(second, HUGE) == pattern(HUGE, 5)
    vmm.unmap(second)
    assert huge_free() == before


@pytest.mark.open_question(2)
def test_freed_but_mapped_handle_cannot_be_freed_or_mapped_again(dev, vmm):
    """docs/runtime-model.md §4.3 / §8.2 (docs/fidelity.md row 42): once freed, the handle is
    unknown to FreePhysical and
    MapMem (107000) even while its last mapping lives."""
    base = vmm.reserve(2 * HUGE)
    handle = raw.aclrtMallocPhysical(HUGE, prop())
    vmm.sizes[handle] = HUGE
    vmm.map(base, handle)
    raw.aclrtFreePhysical(handle)
    for call in (lambda: raw.aclrtFreePhysical(handle),
                 lambda: raw.aclrtMapMem(base + HUGE, HUGE, 0, handle, 0)):
        with pytest.raises(RtParamInvalidError) as e:
            call()
        assert e.value.code == 107000


@pytest.mark.open_question(5)
def test_map_two_devices_into_one_reservation_is_107000(dev, vmm):
    """docs/runtime-model.md §4.4 / §8.5 (docs/fidelity.md row 43): one reservation bound to memory
    of devices 0 and 1
    -> 107000; each device's handle maps into a reservation of its own."""
    need_two_devices()
    base = vmm.reserve(4 * HUGE)
    on0 = vmm.physical(HUGE, prop(device=0))
    on1 = vmm.physical(HUGE, prop(device=1))
    vmm.map(base, on0)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMapMem(base + 2 * HUGE, HUGE, 0, on1, 0)
    assert e.value.code == 107000
    other = vmm.reserve(HUGE)
    vmm.map(other, on1)
    assert raw.aclrtPointerGetAttributes(other + 100) == (DEVICE, 1, HUGE)
    # And the other way round: a device-1 reservation refuses device-0 memory.
    on0b = vmm.physical(HUGE, prop(device=0))
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMapMem(other + HUGE, HUGE, 0, on0b, 0)
    assert e.value.code == 107000


def test_huge1g_mapping_needs_1_gib_alignment(dev, vmm, cann):
    """docs/runtime-model.md §4.4 (§8.3): 1 GiB pages map only at 1 GiB aligned addresses (else
    107000); the mapping reports pageSize 1 GiB and (from 9.0.1) its whole range
    (docs/runtime-model.md §4.8, §4.9)."""
    need_giant_pages()
    base = vmm.reserve(2 * GIANT)
    assert base % GIANT == 0
    handle = vmm.physical(GIANT, prop(MemAttr.HBM_MEM_HUGE1G))
    for va in (base + HUGE, base + GIANT // 2):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMapMem(va, GIANT, 0, handle, 0)
        assert e.value.code == 107000
    vmm.map(base + GIANT, handle)
    assert raw.aclrtPointerGetAttributes(base + GIANT + 5 * MiB) == (DEVICE, 0, GIANT)
    assert address_range(base + 2 * GIANT - 1, cann) in (None, (base + GIANT, GIANT))
    write(base + 2 * GIANT - 10, b"0123456789")
    assert read(base + 2 * GIANT - 10, 10) == b"0123456789"


def test_vmm_calls_need_no_context(backend, cann):
    """docs/runtime-model.md §4.1, §4.8, §4.9: the whole VMM sequence and the address queries
    (aclrtMemGetAddressRange from 9.0.1) work in a thread that never set a device."""
    def sequence() -> list[Any]:
        base = raw.aclrtReserveMemAddress(2 * HUGE, 0, 0, 0)
        handle = raw.aclrtMallocPhysical(HUGE, prop())
        raw.aclrtMapMem(base + HUGE, HUGE, 0, handle, 0)
        seen = [raw.aclrtMemGetAllocationGranularity(prop()),
                raw.aclrtMemRetainAllocationHandle(base + HUGE) == handle,
                address_range(base + HUGE + 1, cann),
                tuple(raw.aclrtPointerGetAttributes(base + HUGE + 1))]
        raw.aclrtMemSetAccess(base + HUGE, HUGE, [access()], 1)
        raw.aclrtUnmapMem(base + HUGE)
        raw.aclrtFreePhysical(handle)
        raw.aclrtReleaseMemAddress(base)
        seen.append(base)
        return seen

    value, error = in_fresh_thread(sequence)
    assert error is None, repr(error)
    base = value[-1]
    in_range = (base + HUGE, HUGE) if since(cann, "9.0.1") else None
    assert value[:4] == [HUGE, True, in_range, (DEVICE, 0, HUGE)]


def test_physical_memory_survives_device_reset(dev, vmm):
    """docs/runtime-model.md §4.1 (docs/fidelity.md row 48): VMM memory is not tied to a context; a
    reset of the device to
    zero references keeps the mapping, its bytes and its pool bytes."""
    base = vmm.reserve(HUGE)
    handle = vmm.physical()
    vmm.map(base, handle)
    write(base, b"kept across reset")
    before = pools()
    raw.aclrtResetDevice(0)  # the check's only reference
    raw.aclrtSetDevice(0)  # back, for the read and for the fixture's reset
    assert read(base, 17) == b"kept across reset"
    assert pools() == before


# -- §4.7 aclrtMemSetAccess ------------------------------------------------------------------------


def test_set_access_null_is_107000_not_100000(backend, vmm):
    """docs/runtime-model.md §4.7: no ACL-layer checks; virPtr NULL or desc NULL -> 107000
    (runtime)."""
    base = vmm.reserve(HUGE)
    vmm.map(base, vmm.physical())
    assert backend.aclrtMemSetAccess(0, HUGE, [access()], 1) == 107000
    assert backend.aclrtMemSetAccess(base, HUGE, None, 1) == 107000
    assert backend.aclrtMemSetAccess(0, 0, None, 0) == 107000
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemSetAccess(0, HUGE, [access()], 1)
    assert e.value.code == 107000


def test_set_access_on_a_mapping_succeeds(dev, vmm):
    """docs/runtime-model.md §4.7: virPtr and size of a mapping, READWRITE for DEVICE or HOST ->
    success,
    repeatedly (docs/fidelity.md row 49); the bytes stay."""
    base = vmm.reserve(4 * HUGE)
    handle = vmm.physical(2 * HUGE)
    vmm.map(base + 2 * HUGE, handle)
    write(base + 2 * HUGE, b"access")
    raw.aclrtMemSetAccess(base + 2 * HUGE, 2 * HUGE, [access(DEVICE, 0)], 1)
    raw.aclrtMemSetAccess(base + 2 * HUGE, 2 * HUGE, [access(HOST, 0)], 1)
    raw.aclrtMemSetAccess(base + 2 * HUGE, 2 * HUGE, [access(DEVICE, 0), access(HOST, 0)], 2)
    raw.aclrtMemSetAccess(base + 2 * HUGE, 2 * HUGE, [access(DEVICE, 0)], 1)
    assert read(base + 2 * HUGE, 6) == b"access"


@pytest.mark.parametrize("case", [
    "flags READ", "flags NONE", "size 2 MiB of a 4 MiB mapping",
    "size 8 MiB of a 4 MiB mapping", "virPtr inside the mapping", "unmapped virPtr",
    "location UNREGISTERED", "rsv not zero", "second entry READ"])
def test_set_access_bad_values_are_107000(backend, vmm, case):
    """docs/runtime-model.md §4.7 (docs/fidelity.md row 49): only READWRITE; virPtr and size must be
    a mapping's;
    location HOST or DEVICE; rsv zero -> else 107000."""
    base = vmm.reserve(4 * HUGE)
    vmm.map(base, vmm.physical(2 * HUGE))
    good = 2 * HUGE
    args = {
        "flags READ": (base, good, [access(flags=MemAccessFlags.READ)], 1),
        "flags NONE": (base, good, [access(flags=MemAccessFlags.NONE)], 1),
        "size 2 MiB of a 4 MiB mapping": (base, HUGE, [access()], 1),
        "size 8 MiB of a 4 MiB mapping": (base, 4 * HUGE, [access()], 1),
        "virPtr inside the mapping": (base + HUGE, HUGE, [access()], 1),
        "unmapped virPtr": (base + 2 * HUGE, good, [access()], 1),
        "location UNREGISTERED": (base, good, [access(UNREGISTERED)], 1),
        "rsv not zero": (base, good, [access(rsv=b"\x01" + bytes(11))], 1),
        "second entry READ": (base, good, [access(), access(HOST, flags=1)], 2),
    }[case]
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemSetAccess(*args)
    assert e.value.code == 107000


def test_set_access_bad_device_id_is_107001(backend, vmm):
    """docs/runtime-model.md §4.7 (docs/fidelity.md row 49): DEVICE location with a bad id ->
    107001."""
    base = vmm.reserve(HUGE)
    vmm.map(base, vmm.physical())
    with pytest.raises(InvalidDeviceIdError) as e:
        raw.aclrtMemSetAccess(base, HUGE, [access(DEVICE, 99)], 1)
    assert e.value.code == 107001


# -- §4.8 / §4.9 queries on mapped addresses -------------------------------------------------------


def test_address_range_and_attributes_of_a_mapping(dev, vmm, cann):
    """docs/runtime-model.md §4.8, §4.9: inside a mapping -> the mapping's base and size (from
    9.0.1); DEVICE, the device id, pageSize 2 MiB."""
    base = vmm.reserve(8 * HUGE)
    handle = vmm.physical(2 * HUGE)
    vmm.map(base + 2 * HUGE, handle)
    for address in (base + 2 * HUGE, base + 3 * HUGE + 5, base + 4 * HUGE - 1):
        assert address_range(address, cann) in (None, (base + 2 * HUGE, 2 * HUGE))
        attrs = raw.aclrtPointerGetAttributes(address)
        assert (attrs.type, attrs.id, attrs.pageSize) == (DEVICE, 0, HUGE)


@SINCE_9_0_1
def test_address_range_of_one_of_two_adjacent_mappings(dev, vmm):
    """docs/runtime-model.md §4.8: neighbouring mappings are reported one by one."""
    base = vmm.reserve(3 * HUGE)
    low, high = vmm.physical(), vmm.physical(2 * HUGE)
    vmm.map(base, low)
    vmm.map(base + HUGE, high)
    assert raw.aclrtMemGetAddressRange(base + HUGE - 1) == (base, HUGE)
    assert raw.aclrtMemGetAddressRange(base + HUGE) == (base + HUGE, 2 * HUGE)


def test_attributes_of_a_device_1_mapping(dev, vmm):
    """docs/runtime-model.md §4.9: location.id is the (user) device id of the memory."""
    need_two_devices()
    base = vmm.reserve(HUGE)
    vmm.map(base, vmm.physical(HUGE, prop(device=1)))
    assert tuple(raw.aclrtPointerGetAttributes(base)) == (DEVICE, 1, HUGE)


@pytest.mark.parametrize("where", ["reserved, never mapped", "after unmap"])
def test_address_queries_on_unmapped_window_address_are_107000(dev, vmm, cann, where):
    """docs/runtime-model.md §4.8, §4.9 (docs/fidelity.md row 23): an unmapped address of the VMM
    window -> 107000 (aclrtMemGetAddressRange from 9.0.1)."""
    base = vmm.reserve(2 * HUGE)
    vmm.map(base, vmm.physical())
    address = base + HUGE + 100
    if where == "after unmap":
        vmm.unmap(base)
        address = base + 100
    calls: list[Callable[[int], Any]] = [raw.aclrtPointerGetAttributes]
    if since(cann, "9.0.1"):
        calls.append(raw.aclrtMemGetAddressRange)
    for call in calls:
        with pytest.raises(RtParamInvalidError) as e:
            call(address)
        assert e.value.code == 107000, call.__name__


# -- §4 handle queries -----------------------------------------------------------------------------


def test_retain_allocation_handle_returns_the_mapped_handle(backend, vmm):
    """docs/runtime-model.md §4 (docs/fidelity.md row 51): aclrtMemRetainAllocationHandle(va) -> the
    handle mapped at va."""
    base = vmm.reserve(3 * HUGE)
    first, second = vmm.physical(), vmm.physical(2 * HUGE)
    vmm.map(base, first)
    vmm.map(base + HUGE, second)
    assert raw.aclrtMemRetainAllocationHandle(base) == first
    assert raw.aclrtMemRetainAllocationHandle(base + HUGE) == second


def test_retain_allocation_handle_errors(backend, vmm, cann):
    """docs/runtime-model.md §4: NULL virPtr -> 100000; NULL output -> 100000 (from 9.0.1; 8.5.0
    does not check it, see below); an unmapped address -> 107000."""
    base = vmm.reserve(2 * HUGE)
    vmm.map(base, vmm.physical())
    assert backend.aclrtMemRetainAllocationHandle(0)[0] == 100000
    if since(cann, "9.0.1"):
        assert backend.aclrtMemRetainAllocationHandle(base, null_outputs=1)[0] == 100000
    for address in (base + HUGE, FIXED + 64 * GiB):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemRetainAllocationHandle(address)
        assert e.value.code == 107000


@pytest.mark.parametrize("attr, location, device", [
    (MemAttr.HBM_MEM_HUGE, DEVICE, 0), (MemAttr.HBM_MEM_NORMAL, DEVICE, 0),
    (MemAttr.MEM_NORMAL, DEVICE, 0), (MemAttr.MEM_P2P_HUGE, DEVICE, 0),
    (MemAttr.HBM_MEM_HUGE, DEVICE, 1), (MemAttr.DDR_MEM_HUGE, HOST, 0),
    (MemAttr.HBM_MEM_HUGE, HOST, 0)])
def test_allocation_properties_from_handle(backend, vmm, cann, attr, location, device):
    """docs/runtime-model.md §4: aclrtMemGetAllocationPropertiesFromHandle returns every field of
    the prop the handle was allocated with. 8.5.0 describes device memory of the non-P2P types
    only: P2P and host (DDR) memory -> 100000 there."""
    if device:
        need_two_devices()
    handle = vmm.physical(HUGE, prop(attr, location, device))
    if not since(cann, "9.0.1") and (location != DEVICE or attr in P2P_ATTRS):
        with pytest.raises(InvalidParamError) as e:
            raw.aclrtMemGetAllocationPropertiesFromHandle(handle)
        assert e.value.code == 100000
        return
    got = raw.aclrtMemGetAllocationPropertiesFromHandle(handle)
    assert (got.handleType, got.allocationType, got.memAttr, got.location.id,
            got.location.type, got.reserve) == (0, 0, attr, device, location, 0)


def test_allocation_properties_errors(backend, cann):
    """docs/runtime-model.md §4: handle NULL -> 100000; output NULL -> 100000 (from 9.0.1; 8.5.0
    does not check it, see below); unknown or freed handle -> 107000."""
    assert backend.aclrtMemGetAllocationPropertiesFromHandle(0)[0] == 100000
    handle = raw.aclrtMallocPhysical(HUGE, prop())
    try:
        if since(cann, "9.0.1"):
            rc, _ = backend.aclrtMemGetAllocationPropertiesFromHandle(handle, null_outputs=1)
            assert rc == 100000
    finally:
        raw.aclrtFreePhysical(handle)
    for bogus in (handle, 0x1234_5000):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemGetAllocationPropertiesFromHandle(bogus)
        assert e.value.code == 107000


@pytest.mark.cann("8.5.0")
@pytest.mark.fake_only("8.5.0 checks neither output for NULL and the runtime would write "
                       "through it; the fake answers 107000 after the lookup instead "
                       "(docs/fidelity.md row 67)")
def test_handle_queries_do_not_check_their_output_on_8_5_0(fake, vmm):
    """docs/runtime-model.md §4 Releases (docs/fidelity.md row 67): on 8.5.0 a NULL output of
    aclrtMemRetainAllocationHandle or aclrtMemGetAllocationPropertiesFromHandle is not refused
    by the ACL layer (100000 from 9.0.1): the fake looks the address or handle up first and
    then answers 107000; the NULL virPtr / handle checks stay 100000."""
    base = vmm.reserve(2 * HUGE)
    handle = vmm.physical()
    vmm.map(base, handle)
    assert fake.aclrtMemRetainAllocationHandle(0, null_outputs=1)[0] == 100000
    assert fake.aclrtMemRetainAllocationHandle(base, null_outputs=1)[0] == 107000
    assert fake.aclrtMemRetainAllocationHandle(base + HUGE, null_outputs=1)[0] == 107000
    assert fake.aclrtMemGetAllocationPropertiesFromHandle(0, null_outputs=1)[0] == 100000
    assert fake.aclrtMemGetAllocationPropertiesFromHandle(handle, null_outputs=1)[0] == 107000
    assert fake.aclrtMemGetAllocationPropertiesFromHandle(0x1234_5000, null_outputs=1)[0] == \
        107000
    # With outputs, both answer as on every release.
    assert raw.aclrtMemRetainAllocationHandle(base) == handle
    assert raw.aclrtMemGetAllocationPropertiesFromHandle(handle).memAttr == MemAttr.HBM_MEM_HUGE


# -- §4.6 export / import / whitelist --------------------------------------------------------------


def test_export_acl_checks_are_100000(backend, vmm):
    """docs/runtime-model.md §4.6: export with handle NULL, handleType != NONE or output NULL ->
    100000,
    before the flags check."""
    handle = vmm.physical()
    assert backend.aclrtMemExportToShareableHandle(0, 0, 0)[0] == 100000
    assert backend.aclrtMemExportToShareableHandle(0, 0, 2)[0] == 100000
    assert backend.aclrtMemExportToShareableHandle(handle, 2, 0)[0] == 100000
    assert backend.aclrtMemExportToShareableHandle(handle, 1, 7)[0] == 100000
    assert backend.aclrtMemExportToShareableHandle(handle, 0, 0, null_outputs=1)[0] == 100000
    # None of these exported it: it can still be exported once.
    assert raw.aclrtMemExportToShareableHandle(handle, 0, 1) != 0


@pytest.mark.parametrize("flags", [2, 3, 2**63])
def test_export_flags_over_1_is_107000(backend, vmm, flags):
    """docs/runtime-model.md §4.6: export flags > 1 -> 107000 (runtime)."""
    handle = vmm.physical()
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemExportToShareableHandle(handle, 0, flags)
    assert e.value.code == 107000


@pytest.mark.open_question(12)
def test_export_twice_is_107000(backend, vmm):
    """docs/runtime-model.md §4.6 / §8.12 (docs/fidelity.md row 50): exporting the same handle twice
    -> 107000."""
    handle = vmm.physical()
    raw.aclrtMemExportToShareableHandle(handle, 0, 1)
    for flags in (1, 0):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemExportToShareableHandle(handle, 0, flags)
        assert e.value.code == 107000


@pytest.mark.open_question(2)
def test_export_of_host_freed_or_unknown_memory_is_107000(backend, vmm):
    """docs/runtime-model.md §4.6 (docs/fidelity.md row 50): only device memory from
    aclrtMallocPhysical can be exported;
    host-location, freed or unknown handles -> 107000."""
    host = vmm.physical(HUGE, prop(MemAttr.DDR_MEM_HUGE, HOST))
    freed = raw.aclrtMallocPhysical(HUGE, prop())
    raw.aclrtFreePhysical(freed)
    for handle in (host, freed, 0x1234_5000):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemExportToShareableHandle(handle, 0, 1)
        assert e.value.code == 107000, hex(handle)


@pytest.mark.open_question(12)
@pytest.mark.parametrize("flags", [0, 1])
def test_import_in_the_exporting_process_is_207000(backend, vmm, flags):
    """docs/runtime-model.md §4.6 / §8.12 (docs/fidelity.md row 50): importing in the exporting
    process is not
    supported -> 207000."""
    handle = vmm.physical()
    shareable = raw.aclrtMemExportToShareableHandle(handle, 0, flags)
    if flags == 0:
        raw.aclrtMemSetPidToShareableHandle(shareable, [os.getpid()], 1)
    with pytest.raises(FeatureNotSupportError) as e:
        raw.aclrtMemImportFromShareableHandle(shareable, 0)
    assert e.value.code == 207000


@pytest.mark.parametrize("device", [-1, 99, "count", -(2**31)])
def test_import_bad_device_id_is_107001(backend, vmm, device):
    """docs/runtime-model.md §4.6: import onto a device id outside [0, count) -> 107001 (runtime
    check,
    before the shareable handle is looked at)."""
    shareable = raw.aclrtMemExportToShareableHandle(vmm.physical(), 0, 1)
    dev_id = raw.aclrtGetDeviceCount() if device == "count" else device
    for handle in (shareable, 0xDEAD_BEEF):
        with pytest.raises(InvalidDeviceIdError) as e:
            raw.aclrtMemImportFromShareableHandle(handle, dev_id)
        assert e.value.code == 107001


def test_import_null_output_is_100000(backend, vmm):
    """docs/runtime-model.md §4.6: import with handle (output) NULL -> 100000, before the device
    check."""
    shareable = raw.aclrtMemExportToShareableHandle(vmm.physical(), 0, 1)
    assert backend.aclrtMemImportFromShareableHandle(shareable, 0, null_outputs=1)[0] == 100000
    assert backend.aclrtMemImportFromShareableHandle(shareable, 99, null_outputs=1)[0] == 100000


def test_set_pid_null_or_zero_is_100000(backend, vmm):
    """docs/runtime-model.md §4.6: aclrtMemSetPidToShareableHandle with pid NULL or pidNum 0 ->
    100000."""
    shareable = raw.aclrtMemExportToShareableHandle(vmm.physical(), 0, 0)
    assert backend.aclrtMemSetPidToShareableHandle(shareable, None, 1) == 100000
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtMemSetPidToShareableHandle(shareable, [os.getpid() + 1], 0)
    assert e.value.code == 100000
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtMemSetPidToShareableHandle(shareable, None, 0)
    assert e.value.code == 100000
    raw.aclrtMemSetPidToShareableHandle(shareable, [os.getpid() + 1], 1)


# -- §4.6 two processes ----------------------------------------------------------------------------

_CHILD = """
import ctypes, hashlib, json, os, sys
import acl_mem
from acl_mem import raw
acl_mem.use_backend({name!r})
SIZE = {size}

def code(fn, *args):
    try:
        return 0, fn(*args)
    except acl_mem.AclError as exc:
        return exc.code, None

def addr(buf):
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))

def read(va, n):
    buf = bytearray(n)
    raw.aclrtMemcpy(addr(buf), n, va, n, 2)
    return bytes(buf)

def write(va, data):
    buf = bytearray(data)
    raw.aclrtMemcpy(va, len(buf), addr(buf), len(buf), 1)

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\\n")
    sys.stdout.flush()

send({{"ready": os.getpid()}})
shared = json.loads(sys.stdin.readline())
raw.aclrtSetDevice(0)
codes, imported = {{}}, {{}}
for key, shareable in sorted(shared.items()):
    rc, handle = code(raw.aclrtMemImportFromShareableHandle, shareable, 0)
    codes[key] = rc
    if rc == 0:
        imported[key] = handle
base = raw.aclrtReserveMemAddress(SIZE * max(len(imported), 1), 0, 0, 0)
where = {{}}
for i, key in enumerate(sorted(imported)):
    where[key] = base + i * SIZE
    raw.aclrtMapMem(where[key], SIZE, 0, imported[key], 0)
seen = {{k: hashlib.sha256(read(va, SIZE)).hexdigest() for k, va in where.items()}}
for key, va in where.items():
    write(va + 4096, (key + "-written-by-the-child").encode() * 50)
send({{"codes": codes, "seen": seen}})
sys.stdin.readline()
after = {{k: hashlib.sha256(read(va, SIZE)).hexdigest() for k, va in where.items()}}
cleanup = []
for key, va in where.items():
    cleanup.append(code(raw.aclrtUnmapMem, va)[0])
    cleanup.append(code(raw.aclrtFreePhysical, imported[key])[0])
cleanup.append(code(raw.aclrtReleaseMemAddress, base)[0])
raw.aclrtResetDevice(0)
send({{"after": after, "cleanup": cleanup}})
"""


class Child:
    """A second interpreter on the same backend, spoken to in JSON lines."""

    def __init__(self, backend_name: str, stderr: IO[str]) -> None:
        prelude = native_provider().subprocess_prelude if backend_name == "native" else ""
        script = prelude + textwrap.dedent(_CHILD.format(name=backend_name, size=HUGE))
        env = dict(os.environ)
        root = str(Path(acl_mem.__file__).resolve().parents[1])
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        self.stderr = stderr
        self.proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr,
                                     text=True, env=env)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def receive(self) -> dict[str, Any]:
        while True:
            try:
                line = self._lines.get(timeout=60)
            except queue.Empty:
                raise AssertionError("the child process did not answer in 60 s") from None
            if not line:
                self.proc.wait(timeout=30)
                raise AssertionError(f"the child process ended early:\n{self.errors()}")
            if line.startswith("{"):
                message: dict[str, Any] = json.loads(line)
                return message

    def send(self, message: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def errors(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()

    def close(self) -> None:
        # End of input first: a child still waiting for a message (the parent failed
        # half-way) ends at once instead of after the timeout.
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_share_between_two_processes(backend, dev, vmm):
    """docs/runtime-model.md §4.6, §4.3 (rows 50, 52): another process imports exported memory, maps
    it and shares the bytes both ways: exported with DISABLE_PID_VALIDATION ("a") or with
    the child's pid whitelisted ("b") it imports; not whitelisted ("c") or freed by the
    exporter before the import ("d") -> 107000. Memory freed by the exporter while the
    importer holds it stays until the importer frees it."""
    base = vmm.reserve(4 * HUGE)
    handles = {key: vmm.physical() for key in "abcd"}
    data = {key: pattern(HUGE, i + 11) for i, key in enumerate("abcd")}
    for i, key in enumerate("abc"):
        vmm.map(base + i * HUGE, handles[key])
        write(base + i * HUGE, data[key])
    with tempfile.TemporaryFile(mode="w+") as errors:
        final, expected, now = _share_with_a_child(backend.name, errors, vmm, base, handles,
                                                   data)
    # The child freed its import of "a"; the exporter's memory is untouched.
    assert read(base, HUGE) == expected["a"]
    # docs/runtime-model.md §4.3: memory of an exported handle is released only when every process
    # has freed its handle. So the importer keeps the bytes of "b", and the exporter's next
    # allocation is other memory, which the importer's free leaves alone.
    problems = []
    if final["after"]["b"] != digest(expected["b"]):
        same = final["after"]["b"] == digest(pattern(HUGE, 99))
        problems.append("the importer's bytes of 'b' changed after the exporter freed it"
                        + (": they are the exporter's next allocation" if same else ""))
    if now != pattern(HUGE, 99):
        zeros = now == bytes(HUGE)
        problems.append("the exporter's next allocation lost its bytes when the importer "
                        "freed 'b'" + (" (all zero)" if zeros else ""))
    assert not problems, "; ".join(problems)


def _share_with_a_child(backend_name: str, errors: IO[str], vmm: Vmm, base: int,
                        handles: dict[str, int], data: dict[str, bytes]
                        ) -> tuple[dict[str, Any], dict[str, bytes], bytes]:
    """The parent's side of test_share_between_two_processes."""
    child = Child(backend_name, errors)
    try:
        pid = child.receive()["ready"]
        assert pid == child.proc.pid
        shared = {
            "a": raw.aclrtMemExportToShareableHandle(handles["a"], 0, 1),
            "b": raw.aclrtMemExportToShareableHandle(handles["b"], 0, 0),
            "c": raw.aclrtMemExportToShareableHandle(handles["c"], 0, 0),
            "d": raw.aclrtMemExportToShareableHandle(handles["d"], 0, 1),
        }
        raw.aclrtMemSetPidToShareableHandle(shared["b"], [os.getpid(), pid], 2)
        vmm.free(handles["d"])  # freed before the child imports
        child.send(shared)
        report = child.receive()
        assert report["codes"] == {"a": 0, "b": 0, "c": 107000, "d": 107000}
        assert report["seen"] == {"a": digest(data["a"]), "b": digest(data["b"])}
        expected = {}
        for i, key in enumerate("ab"):
            stamp = (key + "-written-by-the-child").encode() * 50
            changed = bytearray(data[key])
            changed[4096:4096 + len(stamp)] = stamp
            expected[key] = bytes(changed)
            assert read(base + i * HUGE, HUGE) == expected[key], key
        # The exporter lets go of "b" first: the memory stays while the child holds it,
        # so new memory of the exporter (mapped where "b" was) is other memory.
        vmm.unmap(base + HUGE)
        vmm.free(handles["b"])
        fresh = vmm.physical()
        vmm.map(base + HUGE, fresh)
        write(base + HUGE, pattern(HUGE, 99))
        child.send("go on")
        final = child.receive()
        assert final["cleanup"] == [0, 0, 0, 0, 0]
        assert final["after"]["a"] == digest(expected["a"])
        now = read(base + HUGE, HUGE)
    finally:
        child.close()
    assert child.proc.returncode == 0, child.errors()
    return final, expected, now


# -- a random-program check of the fake ------------------------------------------------------------

MACHINE_HBM = 64 * MiB
#: (normal, huge) pools of a 64 MiB device: 1/16 normal rounded to 2 MiB (docs/fidelity.md row 13).
MACHINE_POOLS = (4 * MiB, 60 * MiB)
SLOTS = 4


@dataclass(eq=False)
class PhysModel:
    handle: int
    size: int
    pool: int  # 0 normal, 1 huge
    content: bytearray | None = None
    freed: bool = False
    mappings: int = 0
    released: bool = False


@dataclass(eq=False)
class ResModel:
    base: int
    span: int
    maps: dict[int, PhysModel] = field(default_factory=dict)  # start address -> handle


class VmmMachine(RuleBasedStateMachine):
    """Reserve / malloc / map / unmap / free / release / write / read against a model
    written from docs/runtime-model.md §4 and the fake's documented choices (rows 40, 42, 44,
    47)."""

    def __init__(self) -> None:
        super().__init__()
        self.device: acl_mem.Device | None = None
        self.res: list[ResModel] = []
        self.phys: list[PhysModel] = []
        self.used = [0, 0]

    @initialize()
    def fresh_device(self) -> None:
        acl_mem.fake.configure(profile="atlas-a2", device_count=1, hbm_bytes=MACHINE_HBM)
        self.device = acl_mem.Device(0).set_current()
        assert pools() == MACHINE_POOLS

    def _owner(self, va: int) -> ResModel | None:
        return next((r for r in self.res if r.base <= va < r.base + r.span), None)

    def _give_back(self, p: PhysModel) -> None:
        if p.freed and p.mappings == 0 and not p.released:
            p.released = True
            self.used[p.pool] -= p.size

    def _address(self, data: st.DataObject) -> int:
        """A 2 MiB slot of a live reservation, possibly one past its end."""
        r = data.draw(st.sampled_from(self.res), label="reservation")
        return r.base + data.draw(st.integers(0, SLOTS), label="slot") * HUGE

    @rule(slots=st.integers(1, SLOTS), trim=st.sampled_from([0, 1, 4096, MiB]))
    def reserve(self, slots: int, trim: int) -> None:
        size = slots * HUGE - trim  # occupies slots * 2 MiB (docs/fidelity.md row 40)
        base = raw.aclrtReserveMemAddress(size, 0, 0, 0)
        assert base % HUGE == 0 and WINDOW[0] <= base < WINDOW[1]
        for other in self.res:
            assert base + slots * HUGE <= other.base or other.base + other.span <= base
        self.res.append(ResModel(base, slots * HUGE))

    @rule(attr=st.sampled_from([MemAttr.HBM_MEM_HUGE, MemAttr.HBM_MEM_NORMAL,
                                MemAttr.MEM_HUGE, MemAttr.MEM_NORMAL]),
          pages=st.integers(1, 2))
    def malloc_physical(self, attr: int, pages: int) -> None:
        size = pages * HUGE
        pool = 0 if attr == MemAttr.MEM_NORMAL else 1
        fits = self.used[pool] + size <= MACHINE_POOLS[pool]
        try:
            handle = raw.aclrtMallocPhysical(size, prop(attr))
        except MemoryAllocationError as exc:
            assert exc.code == 207001
            assert not fits, f"{size} bytes should fit in pool {pool}: used {self.used}"
            return
        assert fits, f"{size} bytes should not fit in pool {pool}: used {self.used}"
        self.used[pool] += size
        self.phys.append(PhysModel(handle, size, pool))

    @precondition(lambda self: self.res and self.phys)
    @rule(data=st.data(), seed=st.integers(0, 2**16))
    def map_handle(self, data: st.DataObject, seed: int) -> None:
        va = self._address(data)
        p = data.draw(st.sampled_from(self.phys), label="handle")
        r = self._owner(va)
        ok = not p.freed and r is not None and va + p.size <= r.base + r.span and all(
            va + p.size <= start or start + q.size <= va for start, q in r.maps.items())
        rc = code_of(lambda: raw.aclrtMapMem(va, p.size, 0, p.handle, 0))
        assert rc == (0 if ok else 107000), (hex(va), p.size, p.freed, r)
        if r is None or not ok:
            return
        r.maps[va] = p
        p.mappings += 1
        if p.content is None:
            p.content = bytearray(random.Random(seed).randbytes(p.size))
            write(va, bytes(p.content))

    @precondition(lambda self: self.res)
    @rule(data=st.data())
    def unmap(self, data: st.DataObject) -> None:
        va = self._address(data)
        r = self._owner(va)
        p = r.maps.get(va) if r is not None else None
        rc = code_of(lambda: raw.aclrtUnmapMem(va))
        assert rc == (0 if p is not None else 107000)
        if r is not None and p is not None:
            del r.maps[va]
            p.mappings -= 1
            self._give_back(p)

    @precondition(lambda self: self.phys)
    @rule(data=st.data())
    def free_physical(self, data: st.DataObject) -> None:
        p = data.draw(st.sampled_from(self.phys), label="handle")
        rc = code_of(lambda: raw.aclrtFreePhysical(p.handle))
        assert rc == (107000 if p.freed else 0)
        p.freed = True
        self._give_back(p)

    @precondition(lambda self: self.res)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        r = data.draw(st.sampled_from(self.res), label="reservation")
        rc = code_of(lambda: raw.aclrtReleaseMemAddress(r.base))
        assert rc == (107000 if r.maps else 0)
        if not r.maps:
            self.res.remove(r)

    def _mappings(self) -> list[tuple[int, PhysModel]]:
        return [(va, p) for r in self.res for va, p in sorted(r.maps.items(),
                                                              key=lambda m: m[0])]

    @precondition(lambda self: any(r.maps for r in self.res))
    @rule(data=st.data(), chunk=st.binary(min_size=1, max_size=64), repeat=st.integers(1, 1024))
    def write_bytes(self, data: st.DataObject, chunk: bytes, repeat: int) -> None:
        va, p = data.draw(st.sampled_from(self._mappings()), label="mapping")
        assert p.content is not None
        payload = (chunk * repeat)[:p.size]
        offset = data.draw(st.integers(0, p.size - len(payload)), label="offset")
        write(va + offset, payload)
        p.content[offset:offset + len(payload)] = payload

    @precondition(lambda self: any(r.maps for r in self.res))
    @rule(data=st.data(), count=st.integers(1, 64 * KiB))
    def read_bytes(self, data: st.DataObject, count: int) -> None:
        va, p = data.draw(st.sampled_from(self._mappings()), label="mapping")
        assert p.content is not None
        offset = data.draw(st.integers(0, p.size - count), label="offset")
        assert read(va + offset, count) == bytes(p.content[offset:offset + count])

    @invariant()
    def mappings_show_their_handles_bytes(self) -> None:
        for va, p in self._mappings():
            assert p.content is not None
            for offset in (0, p.size // 2 - 100, p.size - 256):
                assert read(va + offset, 256) == bytes(p.content[offset:offset + 256]), (
                    hex(va), offset)

    @invariant()
    def pools_match_the_model(self) -> None:
        if self.device is not None:
            assert pools() == (MACHINE_POOLS[0] - self.used[0], MACHINE_POOLS[1] - self.used[1])

    def teardown(self) -> None:
        if self.device is None:
            return
        for r in self.res:
            for va, p in list(r.maps.items()):
                raw.aclrtUnmapMem(va)
                p.mappings -= 1
                self._give_back(p)
            r.maps.clear()
            raw.aclrtReleaseMemAddress(r.base)
        for p in self.phys:
            if not p.freed:
                raw.aclrtFreePhysical(p.handle)
                p.freed = True
                self._give_back(p)
        self.res.clear()
        assert self.used == [0, 0]
        assert pools() == MACHINE_POOLS
        self.device.reset()


@pytest.mark.fake_only("needs a small configurable device and the fake's exact page-pool "
                       "accounting (rows 13, 47) to check every step against the model")
def test_vmm_state_machine(fake):
    """docs/runtime-model.md §4.2-§4.4 (rows 40, 42, 47): random reserve / malloc_physical / map /
    unmap / free_physical / release / write / read programs agree with the model; the pools
    return to their start values once everything is released."""
    try:
        run_state_machine_as_test(
            VmmMachine,
            settings=settings(max_examples=30, stateful_step_count=40, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large]),
        )
    finally:
        acl_mem.fake.forget_settings()
