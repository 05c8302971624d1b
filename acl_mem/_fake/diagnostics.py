"""Diagnostics of the fake: the memory checker's hooks and the hazard checks.

The checker (``checker.py``) is told of allocations and pool segments and verifies
canaries on demand; this part finds the host bytes for it and reports copies that run
past an allocation. :meth:`Diagnostics.check_pending` reports queued stream work that
races with a free, copy or memset. :meth:`Diagnostics.live_blocks` lists every live
device and pinned host block (leak reports, tests).
"""

from __future__ import annotations

from .addresses import AddressMap
from .extents import Block
from .state import EngineState

__all__ = ["Diagnostics"]


class Diagnostics:
    def __init__(self, state: EngineState, addresses: AddressMap) -> None:
        self._state = state
        self._addresses = addresses

    # -- memory checker (docs in checker.py) -------------------------------------------------------
    def allocated(self, block: Block) -> None:
        checker = self._state.checker
        if checker is not None:
            checker.on_allocate(block, self._addresses.host_of(block))

    def checker_verify(self, when: str = "acl_mem.check()") -> list[tuple[str, str]]:
        """Verify every canary now; all findings so far as (kind, message)."""
        state = self._state
        checker = state.checker
        if checker is None:
            return []
        with state.lock:
            for block in self.live_blocks():
                checker.verify_block(block, self._addresses.host_of(block), when)
                for segment in checker.segments_in(block):
                    located = self._addresses.locate(segment.start, segment.size)
                    if located is not None:
                        checker.verify_segment(segment, located[0], when)
            for block in checker.freed_pinned():
                checker.verify_freed_pinned(block, block.start, when)
            return [(f.kind, f.message) for f in checker.findings]

    def checker_segment_allocated(self, parent: int, start: int, requested: int,
                                  size: int) -> None:
        """A pool carved ``[start, start+size)`` of block ``parent`` for ``requested`` bytes."""
        state = self._state
        if state.checker is None:
            return
        with state.lock:
            host = self._segment_host(start, size)
            if host is not None:
                state.checker.on_segment(parent, start, requested, size, host)

    def checker_segment_freed(self, start: int) -> None:
        state = self._state
        if state.checker is None:
            return
        with state.lock:
            segment = state.checker.segment_at(start)
            host = self._segment_host(start, segment.size) if segment is not None else None
            if host is not None:
                state.checker.on_segment_freed(start, host)

    def _segment_host(self, start: int, size: int) -> int | None:
        """Host address of a pool segment's bytes (device memory by arithmetic: the pool
        holds its parent block, so the range is live)."""
        device = self._addresses.device_of(start)
        if device is not None:
            return device.region_of(start).host_address(start)
        located = self._addresses.locate(start, size)
        return None if located is None else located[0]

    def check_bounds(self, address: int, count: int, what: str) -> None:
        """Report a copy or memset running past a segment or block end (checker on)."""
        checker = self._state.checker
        if checker is None:
            return
        segment = checker.segment_at(address)
        if segment is None or address + count > segment.start + segment.size:
            freed = checker.freed_segment_at(address, count)
            if freed is not None:
                where = "".join(freed.stack or ()).rstrip() or "  (stack not recorded)"
                checker.report("use-after-free",
                               f"{what} of {count} bytes at {address:#x} touches pool segment "
                               f"{freed.start:#x} ({freed.requested} bytes), freed already; "
                               f"it was allocated at:\n{where}")
                return
        if segment is not None:
            if address + count > segment.start + segment.requested:
                after = checker.next_segment(segment)
                neighbour = (f"pool segment {after.start:#x}" if after is not None and
                             after.start < address + count else "the segment's padding")
                checker.report("boundary-crossed",
                               f"{what} of {count} bytes at {address:#x} runs past pool segment "
                               f"{segment.start:#x} ({segment.requested} bytes requested) "
                               f"into {neighbour}")
            return
        block = self._addresses.block_at(address)
        if block is not None and address + count > block.start + block.requested:
            next_block = self._addresses.block_at(block.end)
            neighbour = (f"{next_block.api} block {next_block.start:#x}"
                         if next_block is not None and address + count > block.end
                         else "the runtime's padding")
            checker.report("boundary-crossed",
                           f"{what} of {count} bytes at {address:#x} runs past {block.api} "
                           f"block {block.start:#x} ({block.requested} bytes requested) into "
                           f"{neighbour}")

    # -- hazards (streams.py) ----------------------------------------------------------------------
    def check_pending(self, start: int, size: int, *, access: str, what: str,
                      targets: tuple[object, ...] | None = None) -> None:
        """Report a hazard if queued work races with ``what`` on ``[start, start+size)``.

        ``access`` is "free" (races with any queued access: the free calls do not wait,
        docs/runtime-model.md §3.6-§3.7), "write" (races with queued reads and writes) or "read"
        (races with queued writes). ``targets`` are the allocations of the range when the
        caller knows them; otherwise they are looked up.
        """
        state = self._state
        with state.lock:
            streams = state.streams
            if not streams.any_pending():
                return
            if targets is None:
                located = self._addresses.resolve(start, size)
                targets = located[3] if located is not None else ()
            end = start + size
            for target in targets:
                for op in streams.pending.on(target):
                    if op.writes_into(start, end) if access == "read" else \
                            op.touches(start, end):
                        kind = "free-while-queued" if access == "free" else \
                            "access-before-synchronize"
                        state.hazards.report(kind, f"{what} while queued {op.describe()} is "
                                             "pending; synchronise the stream first")
                        return

    # -- introspection for tests and tools ---------------------------------------------------------
    def live_blocks(self) -> list[Block]:
        state = self._state
        with state.lock:
            found = [b for d in state.runtime.devices for b in d.blocks]
            return found + list(state.pinned)
