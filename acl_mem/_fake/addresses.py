"""The fake's address map: which block, mapping or pinned range an address is in.

Device blocks live in per-device slots from ``DEVICE_SPACE_BASE``, VMM mappings in the
reservation window (their bytes at the mirror), pinned host blocks anywhere the host
put them; anything else is pageable host memory, vouched for by the Pythonic layer or
proven usable by the copy that touches it (docs/runtime-model.md §3.10, docs/fidelity.md row 5).
"""

from __future__ import annotations

from .device import DEVICE_SLOT, DEVICE_SPACE_BASE, MAX_DEVICES, FakeDevice
from .extents import Block, BlockIndex
from .hostmem import HOST_PAGE, USER_SPACE_END
from .state import EngineState
from .vmm_space import MIRROR_OFFSET, VMM_WINDOW

__all__ = ["DEVICE_SPACE_END", "AddressMap", "Located"]

DEVICE_SPACE_END = DEVICE_SPACE_BASE + MAX_DEVICES * DEVICE_SLOT

#: ``(host address, device id or None, pinned host?, allocations touched)``
Located = tuple[int, "int | None", bool, tuple[object, ...]]


class AddressMap:
    """Resolves addresses against the devices' blocks, the VMM reservations and the
    pinned host blocks of ``state``."""

    def __init__(self, state: EngineState) -> None:
        self._state = state

    def device_of(self, address: int) -> FakeDevice | None:
        if not DEVICE_SPACE_BASE <= address < DEVICE_SPACE_END:
            return None
        index = (address - DEVICE_SPACE_BASE) // DEVICE_SLOT
        devices = self._state.runtime.devices
        return devices[index] if index < len(devices) else None

    def resolve(self, address: int, count: int) -> Located | None:
        """Where ``[address, address+count)`` lives: ``(host address of the bytes, device id
        or None, pinned host?, the blocks or mappings it covers)``, or None if invalid.

        Pageable host memory has no allocations; it is vouched for by the Pythonic layer
        (the buffer it holds) or proven usable by the copy itself.
        """
        # Every copy resolves both its sides here: the common cases (a block's start, a
        # mapped region, a pinned block's start) are read without calls.
        if DEVICE_SPACE_BASE <= address < DEVICE_SPACE_END:
            index = (address - DEVICE_SPACE_BASE) // DEVICE_SLOT
            devices = self._state.runtime.devices
            if index >= len(devices):
                return None
            device = devices[index]
            blocks = device.blocks
            block = blocks.by_start.get(address) or blocks.containing(address)
            if block is None:
                return None
            if address + count <= block.end:
                targets: tuple[object, ...] = (block,)
            else:
                covered = _covered(blocks, block, address + count)
                if covered is None:
                    return None
                targets = covered
            dvpp = device.dvpp  # device.region_of(address)
            region = dvpp if dvpp.base <= address < dvpp.end else device.heap
            offset = region.host_offset
            host = region.host_address(address) if offset is None else address + offset
            return host, device.id, False, targets
        state = self._state
        if VMM_WINDOW[0] <= address < VMM_WINDOW[1]:
            mappings = state.reservations.covering(address, count)
            if mappings is None:
                return None
            device_id = mappings[0].physical.device
            return address + MIRROR_OFFSET, device_id, device_id is None, mappings
        pinned_blocks = state.pinned
        pinned = pinned_blocks.by_start.get(address) or (
            pinned_blocks.containing(address) if pinned_blocks.by_start else None)
        if pinned is not None:
            if address + count > pinned.end:
                return None
            return address, None, True, (pinned,)
        if not (address >= HOST_PAGE and address + count <= USER_SPACE_END):
            return None  # plausible_host_range(address, count), without the call
        freed = state.pinned_freed
        if freed.by_start and _touches(freed, address, count):
            # Freed pinned memory the fake keeps mapped a while (a view may outlive the
            # free): the runtime no longer knows it, and the copy must not succeed.
            return None
        return address, None, False, ()

    def locate(self, address: int, count: int) -> tuple[int, int | None, bool] | None:
        """``(host address of the bytes, device id or None, pinned host?)`` or None."""
        found = self.resolve(address, count)
        return None if found is None else found[:3]

    def still_live(self, target: object) -> bool:
        """Whether a block or mapping captured by queued work still exists."""
        if isinstance(target, Block):
            if target.device is None:
                return self._state.pinned.at(target.start) is target
            return self._state.runtime.devices[target.device].blocks.at(target.start) is target
        return self._state.reservations.is_mapped(target)

    def block_at(self, address: int) -> Block | None:
        """The device or pinned host block containing ``address``."""
        device = self.device_of(address)
        if device is not None:
            return device.blocks.containing(address)
        return self._state.pinned.containing(address)

    def host_of(self, block: Block) -> int:
        """Host address of a block's first byte."""
        if block.device is None:
            return block.start
        return self._state.runtime.devices[block.device].region_of(block.start).host_address(
            block.start)


def _covered(blocks: BlockIndex, first: Block, end: int) -> tuple[Block, ...] | None:
    """Back-to-back live blocks from ``first`` up to ``end`` (docs/runtime-model.md §3.10, fidelity
    5)."""
    found = [first]
    block = first
    while block.end < end:
        nxt = blocks.at(block.end)
        if nxt is None:
            return None
        found.append(nxt)
        block = nxt
    return tuple(found)


def _touches(blocks: BlockIndex, address: int, count: int) -> bool:
    """Whether ``[address, address+count)`` overlaps a block of ``blocks``."""
    block = blocks.containing(address) or blocks.containing(address + count - 1)
    return block is not None
