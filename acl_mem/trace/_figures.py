"""The figures of a trace summary as data: allocations, per-pool and per-device in-use
and reserved bytes with their peaks, failed calls, and the summary that holds them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import error_name

__all__ = ["HOST", "UNKNOWN", "Allocation", "DeviceFigures", "FailedCalls", "PoolFigures",
           "StackTable", "TraceSummary"]

HOST = "host"
UNKNOWN = "?"

Frames = Sequence[tuple[str, int, str]]


class StackTable:
    """The call sites of a ``--json`` report, each written once in its ``stacks`` list
    and referred to by position: allocations made at one site would otherwise repeat its
    frames, and a report of a trace's never-freed allocations grew many times larger
    than the trace (where each call names its stack by number)."""

    def __init__(self) -> None:
        self.stacks: list[list[list[object]]] = []
        self._numbers: dict[tuple[tuple[str, int, str], ...], int] = {}

    def number(self, frames: Frames) -> int | None:
        """The position of ``frames`` in :attr:`stacks` (added when new); None for none."""
        if not frames:
            return None
        key = tuple(frames)
        number = self._numbers.get(key)
        if number is None:
            number = self._numbers[key] = len(self.stacks)
            self.stacks.append([list(f) for f in frames])
        return number


def _stack(frames: Frames, table: StackTable | None) -> object:
    """A record's ``stack``: its position in ``table``, or (no table) its frames."""
    return [list(f) for f in frames] if table is None else table.number(frames)


@dataclass(slots=True)
class Allocation:
    """One allocation of a trace: a runtime block (``block``), page-locked host memory
    (``host``), a pool segment (``segment``), physical memory (``physical``), an address
    reservation (``reservation``) or a mapping (``mapping``)."""

    kind: str
    call: str
    #: The pointer (the handle for physical memory).
    address: int
    #: Bytes asked for.
    size: int
    #: Device id as a string, ``host``, or ``?`` when the trace does not say.
    device: str
    #: Page pool: normal, huge, giant, pinned; ``-`` for reservations.
    pool: str
    #: Runtime memory it holds (bytes after padding and page rounding).
    reserved: int
    #: Bytes it counts as in use (0 for a pool's own blocks and for reservations).
    in_use: int
    #: Nanoseconds since the trace started.
    t: int
    #: Thread number in the trace.
    thread: int
    #: The recorded call site, innermost frame first (empty without stacks).
    frames: list[tuple[str, int, str]] = field(default_factory=list)
    #: A segment's pool block, a mapping's physical handle.
    parent: int | None = None
    #: Position of the allocating call among the trace's events.
    index: int = 0
    freed_index: int | None = None
    #: Nanoseconds since the start when it ended; None while live.
    freed_t: int | None = None
    #: How it ended: free, reset (its device was released), finalize, parent (its pool
    #: block went), backend (another backend was installed); None while live.
    freed_by: str | None = None

    def as_dict(self, stacks: StackTable | None = None) -> dict[str, object]:
        """Plain data for JSON; ``stack`` is the frames, or given ``stacks`` their
        position there (null without a stack)."""
        return {"kind": self.kind, "call": self.call, "address": self.address,
                "size": self.size, "device": self.device, "pool": self.pool,
                "reserved": self.reserved, "in_use": self.in_use, "t": self.t,
                "thread": self.thread, "parent": self.parent,
                "stack": _stack(self.frames, stacks)}


@dataclass(slots=True)
class PoolFigures:
    """In use and reserved bytes of one page pool (or a whole device): now and at peak."""

    in_use: int = 0
    reserved: int = 0
    peak_in_use: int = 0
    #: Time (ns since the start) the in-use peak was first reached.
    peak_in_use_t: int = 0
    peak_reserved: int = 0
    peak_reserved_t: int = 0
    #: Event index of the in-use peak.
    peak_in_use_index: int = -1

    def add(self, in_use: int, reserved: int, t: int, index: int) -> None:
        self.in_use += in_use
        self.reserved += reserved
        if self.in_use > self.peak_in_use:
            self.peak_in_use, self.peak_in_use_t, self.peak_in_use_index = \
                self.in_use, t, index
        if self.reserved > self.peak_reserved:
            self.peak_reserved, self.peak_reserved_t = self.reserved, t

    def as_dict(self) -> dict[str, int]:
        """Plain data for JSON."""
        return {"in_use": self.in_use, "reserved": self.reserved,
                "peak_in_use": self.peak_in_use, "peak_in_use_t": self.peak_in_use_t,
                "peak_reserved": self.peak_reserved, "peak_reserved_t": self.peak_reserved_t}


@dataclass
class DeviceFigures:
    """A device's figures: the whole device, each page pool, and the largest allocations
    live at its in-use peak."""

    device: str
    total: PoolFigures = field(default_factory=PoolFigures)
    pools: dict[str, PoolFigures] = field(default_factory=dict)
    largest_at_peak: list[Allocation] = field(default_factory=list)
    #: Pool totals the trace's aclrtGetMemInfo calls reported, by aclrtMemAttr value.
    capacity: dict[int, int] = field(default_factory=dict)

    def as_dict(self, stacks: StackTable | None = None) -> dict[str, object]:
        """Plain data for JSON (``stacks``: as :meth:`Allocation.as_dict`)."""
        return {"device": self.device, **self.total.as_dict(),
                "pools": {name: pool.as_dict() for name, pool in sorted(self.pools.items())},
                "largest_at_peak": [a.as_dict(stacks) for a in self.largest_at_peak]}


@dataclass
class FailedCalls:
    """Calls of one name that failed the same way."""

    call: str
    #: The return code, or None when the call raised.
    rc: int | None
    raised: str | None
    count: int
    first_t: int
    #: The first one, with its arguments: ``aclrtMalloc(size=..., policy=...)``.
    first: str
    frames: list[tuple[str, int, str]] = field(default_factory=list)

    @property
    def reason(self) -> str:
        """``207001 ACL_ERROR_RT_MEMORY_ALLOCATION`` or ``raised HazardError``."""
        if self.raised is not None:
            return f"raised {self.raised}"
        assert self.rc is not None
        return f"{self.rc} {error_name(self.rc)}"

    def as_dict(self, stacks: StackTable | None = None) -> dict[str, object]:
        """Plain data for JSON (``stacks``: as :meth:`Allocation.as_dict`)."""
        return {"call": self.call, "rc": self.rc, "raised": self.raised, "count": self.count,
                "first_t": self.first_t, "first": self.first,
                "stack": _stack(self.frames, stacks)}


@dataclass
class TraceSummary:
    """What ``acl-mem trace summary`` reports about one trace."""

    path: str
    header: dict[str, Any]
    calls: int
    duration: int
    threads: int
    by_call: dict[str, int]
    devices: dict[str, DeviceFigures]
    never_freed: list[Allocation]
    failed: list[FailedCalls]
    #: Streams created in the trace and never destroyed (nor released with their device).
    streams_left: int = 0
    #: Successful frees of memory the trace never saw allocated (allocated before it began).
    unknown_frees: int = 0
    #: Whether the trace ends with its ``end`` line (not when the process was killed).
    complete: bool = True
    lost: int = 0
    bad_lines: int = 0
    live: list[Allocation] = field(default_factory=list)
    #: Every allocation of the trace, in the order they were made (with when each ended).
    allocations: list[Allocation] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON: what ``acl-mem trace summary --json`` prints."""
        report = self.json_report()
        never = report["never_freed"]
        assert isinstance(never, Iterator)
        report["never_freed"] = list(never)
        return report

    def json_report(self) -> dict[str, object]:
        """:meth:`as_dict` with ``never_freed`` (the one list as long as the trace) an
        iterator of its dicts, made one at a time as it is written (``_json_out``).
        Records name their call site by its position in ``stacks``."""
        table = StackTable()
        # Numbered now, so that ``stacks`` is complete whatever order the keys are
        # written in.
        for allocation in self.never_freed:
            table.number(allocation.frames)
        never_freed = (a.as_dict(table) for a in self.never_freed)
        return {
            "path": self.path, "header": self.header, "calls": self.calls,
            "duration": self.duration, "threads": self.threads, "by_call": self.by_call,
            "devices": {d: f.as_dict(table) for d, f in self.devices.items()},
            "never_freed": never_freed,
            "failed": [f.as_dict(table) for f in self.failed],
            "streams_left": self.streams_left, "unknown_frees": self.unknown_frees,
            "complete": self.complete, "lost": self.lost, "bad_lines": self.bad_lines,
            "stacks": table.stacks,
        }
