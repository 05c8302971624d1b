"""The fake's memory checker: overwrites, leaks and use-after-free, found on a laptop.

On hardware, writing past the bytes requested lands silently in the runtime's padding
or in the neighbouring block or pool segment (the "memory overwriting" Huawei's
documentation warns about, docs/runtime-model.md §3.14). With the checker on (``ACL_MEM_CHECK=1`` or
``acl_mem.fake.configure(check=True)``) the fake:

* fills the slack between requested and allocated size of every block and every pool
  segment with canary bytes and verifies them on free, at every synchronisation and on
  demand (``acl_mem.check()``), reporting the buffer, the offset and where it was
  allocated;
* poisons memory on allocation (``0xA5``, read-before-write shows) and pool segments on
  free (``0xDD``, use-after-free shows);
* keeps freed address ranges in quarantine for a while before they are reused;
* reports at once a copy or memset that crosses the end of a block or segment, naming
  both neighbours.
"""

from __future__ import annotations

import bisect
import ctypes
import os
import sys
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import CodeType
from typing import TYPE_CHECKING

from ..errors import MemoryCheckError, MemoryCheckWarning
from .extents import Block
from .postponed import Postponable, user_stacklevel

if TYPE_CHECKING:
    from .device import FakeDevice

__all__ = ["Checker", "Finding", "Segment"]

CANARY = 0xCB
POISON_ALLOCATED = 0xA5
POISON_FREED = 0xDD
#: Poison at most this many bytes at the start of an allocation: poisoning whole blocks
#: would make the sparse device dense and cost a full memset per allocation.
POISON_LIMIT = 16 << 10
QUARANTINE_ENTRIES = 64


@dataclass(frozen=True)
class Finding:
    kind: str
    message: str


@dataclass
class Segment:
    parent: int
    start: int
    requested: int
    size: int
    stack: Stack | None


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHECKS = os.path.join(_PACKAGE, "conformance", "checks")


def _library_frame(filename: str) -> bool:
    library = _LIBRARY_FILES.get(filename)
    if library is None:
        library = filename.startswith(_PACKAGE) and not filename.startswith(_CHECKS)
        _LIBRARY_FILES[filename] = library
    return library


#: Frames kept per allocation stack, and frames walked at most to find them.
STACK_DEPTH = 8
_STACK_WALK = 64
#: Whether a source file is acl_mem's own (the same few files come up at every capture).
_LIBRARY_FILES: dict[str, bool] = {}


class Stack:
    """Where an allocation was made: (code, line) pairs, formatted only when shown.

    Iterating gives traceback-style lines, outermost first, so ``"".join(stack)`` reads
    like a traceback.
    """

    __slots__ = ("_frames",)

    def __init__(self, frames: tuple[tuple[CodeType, int], ...]) -> None:
        self._frames = frames

    def __iter__(self) -> Iterator[str]:
        for code, line in reversed(self._frames):
            yield f'  File "{code.co_filename}", line {line}, in {code.co_name}\n'

    def __len__(self) -> int:
        return len(self._frames)


def allocation_stack() -> Stack:
    """The caller's Python stack without acl_mem's own frames (innermost 8 kept).

    Bounded: at most 64 frames are looked at, whatever the depth of the stack; nothing
    is formatted (or read from source files) until the stack is shown.
    """
    frames: list[tuple[CodeType, int]] = []
    frame = sys._getframe(1)
    walked = 0
    library_files = _LIBRARY_FILES
    while frame is not None and len(frames) < STACK_DEPTH and walked < _STACK_WALK:
        code = frame.f_code
        library = library_files.get(code.co_filename)
        if library is None:
            library = _library_frame(code.co_filename)
        if not library:
            frames.append((code, frame.f_lineno))
        frame = frame.f_back  # type: ignore[assignment]
        walked += 1
    return Stack(tuple(frames))


class Checker(Postponable):
    """Findings in "raise" mode raise at once, or inside :meth:`held` once the free or
    synchronisation finished its effect (as hazards do)."""

    def __init__(self, mode: str = "warn") -> None:
        super().__init__(MemoryCheckError)
        self.mode = mode
        self.findings: list[Finding] = []
        self.quarantine: deque[tuple[object, int, int]] = deque()
        self._segments: dict[int, Segment] = {}
        self._segment_starts: list[int] = []
        #: Pool segments freed inside blocks the pool still holds, until a new segment
        #: reuses the bytes or the block goes: any access there is a use after free.
        self._freed: dict[int, Segment] = {}
        self._freed_starts: list[int] = []
        #: Freed pinned blocks, poisoned while the fake keeps them mapped: by start.
        self._freed_pinned: dict[int, Block] = {}

    # -- reporting ---------------------------------------------------------------------------------
    def report(self, kind: str, message: str) -> None:
        finding = Finding(kind, message)
        self.findings.append(finding)
        if self.mode == "raise":
            self.raise_or_hold(f"{kind}: {message}")
        elif self.mode == "warn":
            warnings.warn(f"{kind}: {message}", MemoryCheckWarning, stacklevel=user_stacklevel())

    # -- blocks ------------------------------------------------------------------------------------
    def on_allocate(self, block: Block, host: int) -> None:
        block.stack = allocation_stack()
        _fill(host, POISON_ALLOCATED, min(block.requested, POISON_LIMIT))
        _fill(host + block.requested, CANARY, block.padded - block.requested)

    def verify_block(self, block: Block, host: int, when: str) -> None:
        if block.stack is None:
            return  # allocated while the checker was off: no canary to verify
        self._verify(host + block.requested, block.padded - block.requested, block,
                     block.requested, block.stack, when)

    # -- freed pinned host memory ------------------------------------------------------------------
    def on_pinned_freed(self, block: Block, host: int) -> None:
        """aclrtFreeHost: poison the block the fake keeps mapped for a while."""
        _fill(host, POISON_FREED, min(block.padded, POISON_LIMIT))
        self._freed_pinned[block.start] = block

    def freed_pinned(self) -> list[Block]:
        return list(self._freed_pinned.values())

    def verify_freed_pinned(self, block: Block, host: int, when: str) -> None:
        """Report (once) a write through a view or pointer that outlived the free."""
        if self._freed_pinned.get(block.start) is not block:
            return
        length = min(block.padded, POISON_LIMIT)
        data = ctypes.string_at(host, length)
        if data.count(POISON_FREED) == length:
            if when == "its unmapping":
                del self._freed_pinned[block.start]
            return
        del self._freed_pinned[block.start]
        damaged = [i for i, byte in enumerate(data) if byte != POISON_FREED]
        where = "".join(block.stack or ()).rstrip() or "  (stack not recorded)"
        self.report("use-after-free",
                    f"aclrtMallocHost block {block.start:#x} ({block.requested} bytes "
                    f"requested) was written after aclrtFreeHost, at offsets "
                    f"{damaged[0]}..{damaged[-1]} (seen at {when}), through a view or "
                    f"pointer that outlived the free; allocated at:\n{where}")

    # -- pool segments -----------------------------------------------------------------------------
    def on_segment(self, parent: int, start: int, requested: int, size: int,
                   host: int) -> None:
        segment = Segment(parent, start, requested, size, allocation_stack())
        self._forget_freed(start, start + size)
        self._segments[start] = segment
        bisect.insort(self._segment_starts, start)
        _fill(host, POISON_ALLOCATED, min(requested, POISON_LIMIT))
        _fill(host + requested, CANARY, size - requested)

    def on_segment_freed(self, start: int, host: int) -> None:
        segment = self._segments.pop(start, None)
        if segment is None:
            return
        del self._segment_starts[bisect.bisect_left(self._segment_starts, start)]
        self._verify(host + segment.requested, segment.size - segment.requested, segment,
                     segment.requested, segment.stack, "free")
        _fill(host, POISON_FREED, min(segment.size, POISON_LIMIT))
        self._freed[start] = segment
        bisect.insort(self._freed_starts, start)

    def freed_segment_at(self, address: int, count: int) -> Segment | None:
        """A freed pool segment that ``[address, address+count)`` touches, if any."""
        i = bisect.bisect_right(self._freed_starts, address + max(count, 1) - 1) - 1
        if i < 0:
            return None
        segment = self._freed[self._freed_starts[i]]
        return segment if address < segment.start + segment.size else None

    def _forget_freed(self, start: int, end: int) -> None:
        _drop_overlapping(self._freed_starts, self._freed, start, end)

    def forget_range(self, start: int, end: int) -> None:
        """``[start, end)`` was unmapped: the pool segments in it, live or freed, went with
        it (what is mapped there later is other memory)."""
        _drop_overlapping(self._segment_starts, self._segments, start, end)
        _drop_overlapping(self._freed_starts, self._freed, start, end)

    def forget_device(self, device: FakeDevice) -> None:
        """``device`` released every block at once: its quarantined ranges are free
        already, and its pool segments went with their blocks (a stale segment freed
        later must not poison whatever lives there now)."""
        self.quarantine = deque(entry for entry in self.quarantine if entry[0] is not device)
        gone = [start for start in self._segment_starts if device.owns(start)]
        for start in gone:
            self._segments.pop(start, None)
        self._segment_starts = [start for start in self._segment_starts
                                if not device.owns(start)]
        for start in [start for start in self._freed_starts if device.owns(start)]:
            del self._freed[start]
        self._freed_starts = [start for start in self._freed_starts if not device.owns(start)]

    def drop_segments_of(self, parent: Block) -> None:
        """The parent block is gone: forget its segments (a pool giving a block back)."""
        for segment in self.segments_in(parent):
            del self._segments[segment.start]
            del self._segment_starts[bisect.bisect_left(self._segment_starts, segment.start)]
        self._forget_freed(parent.start, parent.start + parent.padded)

    def segments_in(self, parent: Block) -> list[Segment]:
        low = bisect.bisect_left(self._segment_starts, parent.start)
        high = bisect.bisect_left(self._segment_starts, parent.start + parent.padded)
        return [self._segments[s] for s in self._segment_starts[low:high]]

    def segment_at(self, address: int) -> Segment | None:
        i = bisect.bisect_right(self._segment_starts, address) - 1
        if i < 0:
            return None
        segment = self._segments[self._segment_starts[i]]
        return segment if address < segment.start + segment.size else None

    def verify_segment(self, segment: Segment, host: int, when: str) -> None:
        self._verify(host + segment.requested, segment.size - segment.requested, segment,
                     segment.requested, segment.stack, when)

    def next_segment(self, segment: Segment) -> Segment | None:
        i = bisect.bisect_right(self._segment_starts, segment.start)
        return self._segments[self._segment_starts[i]] if i < len(self._segment_starts) \
            else None

    # -- helpers -----------------------------------------------------------------------------------
    def _verify(self, host: int, length: int, subject: Block | Segment, offset: int,
                stack: Iterable[str] | None, when: str) -> None:
        if length <= 0:
            return
        data = ctypes.string_at(host, length)
        if data.count(CANARY) == length:
            return
        damaged = [i for i, byte in enumerate(data) if byte != CANARY]
        where = "".join(stack or ()).rstrip() or "  (stack not recorded)"
        # Described only now: a description per verified canary cost more than the check.
        what = _describe_segment(subject) if isinstance(subject, Segment) else (
            f"{subject.api} block {subject.start:#x} ({subject.requested} bytes requested)")
        self.report("canary-overwritten",
                    f"{what}: {len(damaged)} byte(s) after the requested size were "
                    f"overwritten, at offsets {offset + damaged[0]}..{offset + damaged[-1]} "
                    f"(seen at {when}); allocated at:\n{where}")


def _drop_overlapping(starts: list[int], records: dict[int, Segment], start: int,
                      end: int) -> None:
    """Forget the segments of ``records`` (sorted ``starts``) overlapping ``[start, end)``.

    The starts go first: a record left behind by an interrupt is never looked up.
    """
    low = bisect.bisect_left(starts, start)
    if low and records[starts[low - 1]].start + records[starts[low - 1]].size > start:
        low -= 1
    high = bisect.bisect_left(starts, end)
    gone = starts[low:high]
    del starts[low:high]
    for segment_start in gone:
        records.pop(segment_start, None)


def _fill(host: int, value: int, length: int) -> None:
    if length > 0:
        ctypes.memset(host, value, length)


def _describe_segment(segment: Segment) -> str:
    return (f"pool segment {segment.start:#x} of block {segment.parent:#x} "
            f"({segment.requested} bytes requested)")
