"""Random programs of allocate / write / memset / copy / read / free against a model.

The model is written from the runtime model, not from acl_mem: sizes from docs/runtime-model.md
§3.5, page choice from §3.5/§3.13 (HUGE_FIRST takes huge pages above 1 MiB of padded size,
falls back to normal pages), pools from §3.12 (HBM_MEM = normal + huge), address
ranges from §4.8 and §8.15 (padded size rounded up to the block's page size).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

import acl_mem
from acl_mem._fake.config import set_profile
from acl_mem.conformance.checks.helpers import since
from acl_mem.enums import MemAttr
from acl_mem.errors import MemoryAllocationError

KiB = 1 << 10
MiB = 1 << 20
NORMAL, HUGE, GIANT = 4 * KiB, 2 * MiB, 1 << 30
POOL_BYTES = 256 * MiB
#: Bytes compared at each sampled place of a large block after every step.
WINDOW = 4 * KiB
APIS = ("aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached")
# OR-ed flags, unknown values and out-of-range numbers: the runtime takes the default.
JUNK_POLICIES = (8, 0x100, 0x1000, 0x100000, 0x101, 0x1002, 0x100001, 0xFFFFFFFF)
POOL_ATTR = {NORMAL: MemAttr.HBM_MEM_NORMAL, HUGE: MemAttr.HBM_MEM_HUGE,
             GIANT: MemAttr.HBM_MEM_HUGE1G}


def _align(n: int, k: int) -> int:
    return (n + k - 1) // k * k


def model_padded(api: str, size: int, policy: int) -> int:
    """docs/runtime-model.md §3.5 on a padding-32 SoC: +32 except Align32 and the HUGE1G policy
    values."""
    pad = 0 if api == "aclrtMallocAlign32" or policy in (6, 7) else 32
    return (size + 32 + pad - 1) // 32 * 32


def model_pages(api: str, policy: int, padded: int) -> tuple[int, ...]:
    """Page sizes tried in order (docs/runtime-model.md §3.5 policy handling, §3.13)."""
    if api == "aclrtMallocCached":
        base = policy if policy in (0, 1, 2, 6) else 0
    else:
        base = policy if 0 <= policy <= 7 else 0
    if base in (0, 3):
        return (HUGE, NORMAL) if padded > MiB else (NORMAL,)
    if base in (1, 4):
        return (HUGE,)
    if base in (2, 5):
        return (NORMAL,)
    return (GIANT,)


@dataclass(eq=False)
class Live:
    buf: acl_mem.DeviceBuffer
    content: bytearray
    page: int
    extent: int


class DeviceMemoryMachine(RuleBasedStateMachine):
    blocks = Bundle("blocks")

    def __init__(self) -> None:
        super().__init__()
        self.live: list[Live] = []
        self.device: acl_mem.Device | None = None

    @initialize()
    def fresh_device(self) -> None:
        acl_mem.fake.configure(profile="atlas-a2", device_count=1, hbm_bytes=POOL_BYTES)
        self.device = acl_mem.Device(0).set_current()
        info = self.device.mem_info(MemAttr.HBM_MEM)
        assert info == (POOL_BYTES, POOL_BYTES)

    def _pool_free(self, page: int) -> int:
        assert self.device is not None
        try:
            return self.device.mem_info(POOL_ATTR[page]).free
        except acl_mem.FeatureNotSupportError:
            return 0

    @rule(
        target=blocks,
        api=st.sampled_from(APIS),
        policy=st.one_of(st.integers(0, 7), st.sampled_from(JUNK_POLICIES)),
        size=st.integers(1, 8 * MiB),
        fill=st.integers(0, 255),
    )
    def allocate(self, api: str, policy: int, size: int, fill: int) -> object:
        assert self.device is not None
        padded = model_padded(api, size, policy)
        pages = model_pages(api, policy, padded)
        free_before = {page: self._pool_free(page) for page in pages}
        expected_page = next(
            (page for page in pages if free_before[page] >= _align(padded, page)), None
        )
        method = {"aclrtMalloc": self.device.malloc,
                  "aclrtMallocAlign32": self.device.malloc_align32,
                  "aclrtMallocCached": self.device.malloc_cached}[api]
        try:
            buf = method(size, policy)
        except MemoryAllocationError as exc:
            assert exc.code == 207001
            assert expected_page is None, (
                f"{api}({size}, {policy:#x}) failed although the {expected_page}-byte page "
                f"pool had {free_before[expected_page]} free"
            )
            event("allocation failed: pool exhausted")
            return multiple()
        assert expected_page is not None, f"{api}({size}, {policy:#x}) should not fit"
        event(f"allocated {expected_page}-byte pages")
        assert buf.allocated_size == padded
        assert buf.ptr % 64 == 0
        extent = _align(padded, expected_page)
        assert buf.attributes().pageSize == expected_page
        assert self._pool_free(expected_page) == free_before[expected_page] - extent
        # docs/runtime-model.md §3.5: memory is not initialised; give it known contents first.
        buf.memset(fill)
        live = Live(buf, bytearray([fill]) * size, expected_page, extent)
        self.live.append(live)
        return live

    @rule(block=blocks, data=st.data())
    def write(self, block: Live, data: st.DataObject) -> None:
        size = len(block.content)
        offset = data.draw(st.integers(0, size - 1), label="offset")
        chunk = data.draw(st.binary(min_size=1, max_size=64), label="chunk")
        repeat = data.draw(st.integers(1, 2048), label="repeat")
        payload = (chunk * repeat)[: size - offset]
        block.buf.copy_from(payload, offset=offset)
        block.content[offset:offset + len(payload)] = payload

    @rule(block=blocks, data=st.data())
    def memset(self, block: Live, data: st.DataObject) -> None:
        size = len(block.content)
        offset = data.draw(st.integers(0, size - 1), label="offset")
        count = data.draw(st.integers(1, size - offset), label="count")
        value = data.draw(st.integers(0, 255), label="value")
        block.buf.memset(value, count, offset=offset)
        block.content[offset:offset + count] = bytes([value]) * count

    @rule(src=blocks, dst=blocks, data=st.data())
    def copy_d2d(self, src: Live, dst: Live, data: st.DataObject) -> None:
        limit = min(len(src.content), len(dst.content))
        count = data.draw(st.integers(1, limit), label="count")
        src_offset = data.draw(st.integers(0, len(src.content) - count), label="src_offset")
        dst_offset = data.draw(st.integers(0, len(dst.content) - count), label="dst_offset")
        if src is dst and abs(src_offset - dst_offset) < count:
            return  # overlapping copy inside one block: undefined for memcpy
        dst.buf.copy_from(src.buf, count, offset=dst_offset, src_offset=src_offset)
        dst.content[dst_offset:dst_offset + count] = src.content[src_offset:src_offset + count]

    @rule(block=blocks, data=st.data())
    def read_back(self, block: Live, data: st.DataObject) -> None:
        size = len(block.content)
        offset = data.draw(st.integers(0, size - 1), label="offset")
        count = data.draw(st.integers(0, size - offset), label="count")
        assert block.buf.read(count, offset) == bytes(block.content[offset:offset + count])

    @rule(block=consumes(blocks))
    def free(self, block: Live) -> None:
        assert self.device is not None
        before = self._pool_free(block.page)
        block.buf.free()
        assert block.buf.freed
        self.live.remove(block)
        assert self._pool_free(block.page) == before + block.extent

    @invariant()
    def contents_match_the_model(self) -> None:
        """Small blocks whole; large ones at their start, middle and end (reading MiBs
        after every step is most of the run time; read_back samples the rest)."""
        for block in self.live:
            size = len(block.content)
            if size <= 3 * WINDOW:
                windows = [(0, size)]
            else:
                windows = [(0, WINDOW), ((size - WINDOW) // 2, WINDOW), (size - WINDOW, WINDOW)]
            for offset, count in windows:
                assert block.buf.read(count, offset) == \
                    bytes(block.content[offset:offset + count]), \
                    f"contents of {block.buf!r} differ at [{offset}, {offset + count})"

    @invariant()
    def address_ranges_are_disjoint(self) -> None:
        if not since(acl_mem.runtime_version().cann, "9.0.1"):
            return  # CANN 8.5.0 has no aclrtMemGetAddressRange (runtime model §4.8)
        ranges = []
        for block in self.live:
            base, size = block.buf.address_range()
            assert base <= block.buf.ptr < base + size
            assert (base, size) == (block.buf.ptr, block.extent)  # runtime model §4.8, §8.15
            ranges.append((base, base + size))
        ranges.sort()
        for (_, end), (start, _) in pairwise(ranges):
            assert end <= start, f"overlapping blocks: {ranges}"

    @invariant()
    def pool_accounts_for_every_block(self) -> None:
        if self.device is None:
            return
        info = self.device.mem_info(MemAttr.HBM_MEM)
        assert info.total == POOL_BYTES
        assert info.free + sum(b.extent for b in self.live) == info.total

    def teardown(self) -> None:
        if self.device is None:
            return
        for block in self.live:
            block.buf.free()
        self.live.clear()
        info = self.device.mem_info(MemAttr.HBM_MEM)
        self.device.reset()
        assert info.free == info.total


@pytest.mark.fake_only(
    "needs the fake's exact pool accounting, a small configurable device and "
    "page-rounded address ranges (docs/runtime-model.md §8.15) to check every step "
    "against the model"
)
def test_device_memory_state_machine(fake):
    """docs/runtime-model.md §3.5, §3.6, §3.10-§3.12, §4.8: random programs agree with the model."""
    try:
        run_state_machine_as_test(
            DeviceMemoryMachine,
            settings=settings(
                max_examples=25,
                stateful_step_count=35,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            ),
        )
    finally:
        set_profile(None)
