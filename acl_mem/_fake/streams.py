"""Streams that really defer: queued work runs, in order, only when synchronised.

Each context has a default stream (the NULL handle) and any number of created
streams up to the profile's limit (docs/runtime-model.md §3.4). An asynchronous copy or memset is
queued on its stream and executed at aclrtSynchronizeStream / aclrtSynchronizeDevice
(or when the stream is destroyed, which waits, docs/runtime-model.md §3.4). Streams are unordered
with respect to each other. Handles are never reused, so a destroyed handle stays
recognisable (107017).

Queued work is indexed by the allocation it touches (a block or a VMM mapping), so
"does queued work race with this free / copy" costs O(work on that allocation), not
O(all queued work) or O(streams).
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Iterator

from ..errors import HazardError, HazardWarning
from .postponed import Postponable, user_stacklevel

__all__ = ["Hazards", "Op", "PendingIndex", "Stream", "StreamTable"]

#: Where the fake's stream handles start: far from device and host memory.
_HANDLE_BASE = 0x5A00_0000_0000
_HANDLE_STEP = 0x40


class Op:
    """One queued copy (``value`` None) or memset, and the allocations it touches."""

    __slots__ = ("count", "dst", "dst_host", "src", "src_host", "targets", "value")

    def __init__(self, dst: int, dst_host: int, src: int, src_host: int, count: int,
                 value: int | None, targets: tuple[object, ...]) -> None:
        self.dst = dst
        self.dst_host = dst_host
        self.src = src
        self.src_host = src_host
        self.count = count
        self.value = value
        #: The Block / Mapping objects the op reads or writes, checked again at run time.
        self.targets = targets

    def describe(self) -> str:
        if self.value is None:
            return f"aclrtMemcpyAsync({self.dst:#x} <- {self.src:#x}, {self.count})"
        return f"aclrtMemsetAsync({self.dst:#x}, {self.value:#x}, {self.count})"

    def touches(self, start: int, end: int) -> bool:
        return self.writes_into(start, end) or (
            self.value is None and self.src < end and start < self.src + self.count)

    def writes_into(self, start: int, end: int) -> bool:
        return self.dst < end and start < self.dst + self.count


class PendingIndex:
    """Queued ops by the allocation object they touch, plus the set of all of them.

    ``add`` and ``remove`` are idempotent, so an interrupted one is completed or undone
    by running it again.
    """

    __slots__ = ("_by_target", "ops")

    def __init__(self) -> None:
        self._by_target: dict[int, dict[Op, None]] = {}
        #: Every queued op (never replaced: holders of this dict see it change).
        self.ops: dict[Op, None] = {}

    @property
    def count(self) -> int:
        return len(self.ops)

    def add(self, op: Op) -> None:
        for target in op.targets:
            self._by_target.setdefault(id(target), {})[op] = None
        self.ops[op] = None

    def remove(self, op: Op) -> None:
        for target in op.targets:
            ops = self._by_target.get(id(target))
            if ops is not None:
                ops.pop(op, None)
                if not ops:
                    self._by_target.pop(id(target), None)
        self.ops.pop(op, None)

    def on(self, target: object) -> Iterator[Op]:
        """The queued ops touching ``target`` (do not queue or run ops while iterating)."""
        return iter(self._by_target.get(id(target), ()))

    def has(self, target: object) -> bool:
        return id(target) in self._by_target

    def clear(self) -> None:
        self._by_target = {}
        self.ops.clear()


class Stream:
    __slots__ = ("device", "generation", "handle", "pending")

    def __init__(self, handle: int, device: int, generation: int) -> None:
        self.handle = handle
        self.device = device
        self.generation = generation
        self.pending: deque[Op] = deque()


class Hazards(Postponable):
    """What the fake noticed racing with queued work: counted always, warned or raised.

    Inside :meth:`held`, raising is postponed to the end of the block, so a free, a
    reset or a finalize finishes its effect before the HazardError propagates.
    """

    MODES = ("warn", "raise", "count")

    def __init__(self, mode: str = "warn") -> None:
        if mode not in self.MODES:
            raise ValueError(f"hazards must be one of {self.MODES}, got {mode!r}")
        super().__init__(HazardError)
        self.mode = mode
        self.seen: list[tuple[str, str]] = []

    def report(self, kind: str, message: str) -> None:
        self.seen.append((kind, message))
        if self.mode == "raise":
            self.raise_or_hold(f"{kind}: {message}")
        elif self.mode == "warn":
            warnings.warn(f"{kind}: {message}", HazardWarning, stacklevel=user_stacklevel())

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for kind, _ in self.seen:
            found[kind] = found.get(kind, 0) + 1
        return found


class StreamTable:
    """Every stream of the process, by handle; default streams by (device, generation)."""

    def __init__(self) -> None:
        self._next = _HANDLE_BASE
        self.streams: dict[int, Stream] = {}
        self.defaults: dict[tuple[int, int], Stream] = {}
        #: Created streams per context, default stream not included.
        self._per_context: dict[tuple[int, int], int] = {}
        self.pending = PendingIndex()

    def create(self, device: int, generation: int) -> Stream:
        handle = self._next + _HANDLE_STEP
        stream = Stream(handle, device, generation)
        self._next = handle
        key = (device, generation)
        # Counted from the table itself, so an interrupt between these lines cannot
        # leave a count that disagrees with the streams that exist.
        self.streams[handle] = stream
        self._per_context[key] = self._per_context.get(key, 0) + 1
        return stream

    def forget(self, stream: Stream) -> None:
        if self.streams.pop(stream.handle, None) is not None:
            key = (stream.device, stream.generation)
            self._per_context[key] = self._per_context.get(key, 1) - 1

    def default(self, device: int, generation: int) -> Stream:
        key = (device, generation)
        stream = self.defaults.get(key)
        if stream is None:
            stream = self.defaults.setdefault(key, Stream(0, device, generation))
        return stream

    def count_on(self, device: int, generation: int) -> int:
        """Streams of one context, the default stream included."""
        return 1 + self._per_context.get((device, generation), 0)

    def of_context(self, device: int, generation: int) -> list[Stream]:
        """Default stream first, then created streams in creation order."""
        found = [self.default(device, generation)]
        return found + [s for s in self.streams.values()
                        if s.device == device and s.generation == generation]

    def drop_device(self, device: int) -> list[Op]:
        """Forget every stream of ``device`` (its context died); returns their pending ops."""
        lost: list[Op] = []
        for stream in [s for s in self.streams.values() if s.device == device]:
            lost += stream.pending
            self.forget(stream)
        for key in [k for k in self.defaults if k[0] == device]:
            lost += self.defaults.pop(key).pending
        for key in [k for k in self._per_context if k[0] == device]:
            del self._per_context[key]
        for op in lost:
            self.pending.remove(op)
        return lost

    def any_pending(self) -> bool:
        return bool(self.pending.ops)
