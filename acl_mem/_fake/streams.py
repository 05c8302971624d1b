"""Streams that really defer: queued work runs, in order, only when synchronised.

Each context has a default stream (the NULL handle) and any number of created
streams up to the profile's limit (docs/runtime-model.md §3.4). An asynchronous copy or memset is
queued on its stream and executed at aclrtSynchronizeStream / aclrtSynchronizeDevice
(or when the stream is destroyed, which waits, docs/runtime-model.md §3.4). Streams are unordered
with respect to each other except through events: a :class:`Marker` records an event or
waits for another stream's record point, and running a wait first runs the other
stream's work up to that point (docs/runtime-model.md §3.15). Handles are never reused,
so a destroyed handle stays recognisable (107017).

Queued work is indexed by the allocation it touches (a block or a VMM mapping), so
"does queued work race with this free / copy" costs O(work on that allocation), not
O(all queued work) or O(streams).
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..errors import HazardError, HazardWarning
from .postponed import Postponable, user_stacklevel

if TYPE_CHECKING:
    from .runtime import Context

__all__ = ["Hazards", "Marker", "Op", "PendingIndex", "Stream", "StreamTable"]

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


class Marker:
    """A point in a stream's queue that other work refers to: an event's record
    (``event`` set), a wait for another stream's marker, or an event's reset.

    ``ran`` turns true when the stream's work reaches it; ``time`` is then the host's
    clock in seconds (the record's timestamp)."""

    __slots__ = ("kind", "on_run", "ran", "stream", "time", "waits_for")

    def __init__(self, kind: str, stream: Stream, *, waits_for: Marker | None = None,
                 on_run: Callable[[Marker], None] | None = None) -> None:
        self.kind = kind
        self.stream = stream
        self.waits_for = waits_for
        self.on_run = on_run
        self.ran = False
        self.time = 0.0

    def finish(self) -> None:
        """The stream's work reached this point (idempotent: an interrupted drain that
        finished it but left it queued finishes nothing twice)."""
        if not self.ran:
            self.time = time.perf_counter()
            self.ran = True
            if self.on_run is not None:
                self.on_run(self)


class Stream:
    __slots__ = ("context", "handle", "pending")

    def __init__(self, handle: int, context: Context) -> None:
        self.handle = handle
        self.context = context
        self.pending: deque[Op | Marker] = deque()

    @property
    def device(self) -> int:
        return self.context.device

    @property
    def alive(self) -> bool:
        return self.context.alive


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
    """Every created stream of the process, by handle; default streams by context."""

    def __init__(self) -> None:
        self._next = _HANDLE_BASE
        self.streams: dict[int, Stream] = {}
        self.defaults: dict[Context, Stream] = {}
        #: Created streams per context, default stream not included.
        self._per_context: dict[Context, int] = {}
        self.pending = PendingIndex()

    def create(self, context: Context) -> Stream:
        handle = self._next + _HANDLE_STEP
        stream = Stream(handle, context)
        self._next = handle
        # Counted from the table itself, so an interrupt between these lines cannot
        # leave a count that disagrees with the streams that exist.
        self.streams[handle] = stream
        self._per_context[context] = self._per_context.get(context, 0) + 1
        return stream

    def forget(self, stream: Stream) -> None:
        if self.streams.pop(stream.handle, None) is not None:
            key = stream.context
            self._per_context[key] = self._per_context.get(key, 1) - 1

    def default(self, context: Context) -> Stream:
        stream = self.defaults.get(context)
        if stream is None:
            stream = self.defaults.setdefault(context, Stream(0, context))
        return stream

    def count_on(self, context: Context) -> int:
        """Streams of one context, the default stream included."""
        return 1 + self._per_context.get(context, 0)

    def of_context(self, context: Context) -> list[Stream]:
        """Default stream first, then created streams in creation order."""
        found = [self.default(context)]
        return found + [s for s in self.streams.values() if s.context is context]

    def discard(self, stream: Stream) -> None:
        """Drop a stream's queued work without running it; its record points complete, so
        nothing waits for them for ever."""
        while stream.pending:
            op = stream.pending[0]
            if isinstance(op, Op):
                self.pending.remove(op)
            else:
                op.finish()
            stream.pending.popleft()

    def drop_context(self, context: Context) -> list[Op | Marker]:
        """Forget every stream of ``context`` (it ended); returns their queued work."""
        lost: list[Op | Marker] = []
        for stream in [s for s in self.streams.values() if s.context is context]:
            lost += stream.pending
            self.forget(stream)
        default = self.defaults.pop(context, None)
        if default is not None:
            lost += default.pending
        self._per_context.pop(context, None)
        for op in lost:
            if isinstance(op, Op):
                self.pending.remove(op)
        return lost

    def any_pending(self) -> bool:
        return bool(self.pending.ops)
