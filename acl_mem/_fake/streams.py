"""Streams that really defer: queued work runs, in order, only when synchronised.

Each context has a default stream (the NULL handle) and any number of created
streams up to the profile's limit (spec §3.4). An asynchronous copy or memset is
queued on its stream and executed at aclrtSynchronizeStream / aclrtSynchronizeDevice
(or when the stream is destroyed, which waits, spec §3.4). Streams are unordered with
respect to each other. Handles are never reused, so a destroyed handle stays
recognisable (107017).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import HazardError, HazardWarning

__all__ = ["Hazards", "Op", "Stream", "StreamTable"]

#: Where the fake's stream handles start: far from device and host memory.
_HANDLE_BASE = 0x5A00_0000_0000
_HANDLE_STEP = 0x40


@dataclass
class Op:
    """One queued task: what it does, and which device ranges it writes and reads."""

    describe: str
    run: Callable[[], None]
    writes: tuple[int, int] | None = None
    reads: tuple[int, int] | None = None

    def touches(self, start: int, end: int) -> bool:
        return any(r is not None and r[0] < end and start < r[0] + r[1]
                   for r in (self.writes, self.reads))

    def writes_into(self, start: int, end: int) -> bool:
        return self.writes is not None and self.writes[0] < end and start < sum(self.writes)


@dataclass
class Stream:
    handle: int
    device: int
    generation: int
    pending: deque[Op] = field(default_factory=deque)


class Hazards:
    """What the fake noticed racing with queued work: counted always, warned or raised."""

    MODES = ("warn", "raise", "count")

    def __init__(self, mode: str = "warn") -> None:
        if mode not in self.MODES:
            raise ValueError(f"hazards must be one of {self.MODES}, got {mode!r}")
        self.mode = mode
        self.seen: list[tuple[str, str]] = []

    def report(self, kind: str, message: str) -> None:
        self.seen.append((kind, message))
        if self.mode == "raise":
            raise HazardError(f"{kind}: {message}")
        if self.mode == "warn":
            warnings.warn(f"{kind}: {message}", HazardWarning, stacklevel=_user_stacklevel())

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for kind, _ in self.seen:
            found[kind] = found.get(kind, 0) + 1
        return found


def _user_stacklevel() -> int:
    """Stack level of the first caller outside acl_mem, so the warning points at user code."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


class StreamTable:
    """Every stream of the process, by handle; default streams by (device, generation)."""

    def __init__(self) -> None:
        self._next = _HANDLE_BASE
        self.streams: dict[int, Stream] = {}
        self.defaults: dict[tuple[int, int], Stream] = {}

    def create(self, device: int, generation: int) -> Stream:
        self._next += _HANDLE_STEP
        stream = Stream(self._next, device, generation)
        self.streams[stream.handle] = stream
        return stream

    def default(self, device: int, generation: int) -> Stream:
        key = (device, generation)
        if key not in self.defaults:
            self.defaults[key] = Stream(0, device, generation)
        return self.defaults[key]

    def count_on(self, device: int, generation: int) -> int:
        """Streams of one context, the default stream included."""
        return 1 + sum(1 for s in self.streams.values()
                       if s.device == device and s.generation == generation)

    def of_context(self, device: int, generation: int) -> list[Stream]:
        """Default stream first, then created streams in creation order."""
        found = [self.default(device, generation)]
        return found + [s for s in self.streams.values()
                        if s.device == device and s.generation == generation]

    def drop_device(self, device: int) -> list[Op]:
        """Forget every stream of ``device`` (its context died); returns their pending ops."""
        lost: list[Op] = []
        for handle in [h for h, s in self.streams.items() if s.device == device]:
            lost += self.streams.pop(handle).pending
        for key in [k for k in self.defaults if k[0] == device]:
            lost += self.defaults.pop(key).pending
        return lost

    def pending_ops(self) -> list[Op]:
        streams = list(self.streams.values()) + list(self.defaults.values())
        return [op for stream in streams for op in stream.pending]

    def any_pending(self) -> bool:
        return any(s.pending for s in self.streams.values()) or \
            any(s.pending for s in self.defaults.values())
