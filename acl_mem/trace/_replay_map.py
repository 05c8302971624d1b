"""What a replay knows about the trace's values: recorded addresses, handles, streams,
contexts and shareable handles mapped to the ones the replay got for the same calls
(docs/trace-format.md, "Mapping recorded addresses to replayed ones")."""

from __future__ import annotations

import bisect

__all__ = ["AddressMap", "ValueMap"]


class ValueMap:
    """Recorded → replayed values of one kind (handles, streams, contexts, shareables).

    A value that was given back moves to ``stale``, so that a later use of it (a double
    free, a use after destroy) is replayed with the replay's own stale value, as the
    recorded program used its own: the runtime refuses both alike.
    """

    __slots__ = ("live", "lost", "stale")

    def __init__(self) -> None:
        self.live: dict[int, int] = {}
        self.stale: dict[int, int] = {}
        #: Recorded values whose call failed in the replay though it had succeeded.
        self.lost: set[int] = set()

    def add(self, recorded: int, replayed: int) -> None:
        self.live[recorded] = replayed
        self.lost.discard(recorded)

    def lose(self, recorded: int) -> None:
        """The call that made ``recorded`` succeeded when recorded but failed in the
        replay: later uses of it cannot be replayed (not even with an older stale value
        that the recording had at the same address)."""
        self.lost.add(recorded)
        self.stale.pop(recorded, None)

    def get(self, recorded: int) -> int | None:
        """The replayed value, a stale one, or None (never seen, or lost)."""
        if recorded == 0:
            return 0
        value = self.live.get(recorded)
        if value is None:
            value = self.stale.get(recorded)
        return value

    def drop(self, recorded: int) -> None:
        value = self.live.pop(recorded, None)
        if value is not None:
            self.stale[recorded] = value

    def drop_all(self) -> None:
        self.stale.update(self.live)
        self.live.clear()


class AddressMap(ValueMap):
    """Recorded → replayed addresses, with the ranges of live allocations, so that an
    address inside one (a pool segment in its block, a mapping in its reservation) maps
    by its offset: ``replayed(start) + (address - start)``."""

    __slots__ = ("_sizes", "_starts")

    def __init__(self) -> None:
        super().__init__()
        #: Sorted recorded starts of live ranges, and each one's size.
        self._starts: list[int] = []
        self._sizes: dict[int, int] = {}

    def add_range(self, recorded: int, replayed: int, size: int) -> None:
        self.add(recorded, replayed)
        if recorded not in self._sizes:
            bisect.insort(self._starts, recorded)
        # Only the bytes asked for: blocks can be adjacent, so the first byte after one
        # may be the start of the next.
        self._sizes[recorded] = max(size, 1)

    def get(self, recorded: int) -> int | None:
        value = self.live.get(recorded)
        if value is not None or recorded == 0:
            return 0 if recorded == 0 else value
        if recorded in self.lost:
            return None
        i = bisect.bisect_right(self._starts, recorded) - 1
        if i >= 0:
            start = self._starts[i]
            if recorded < start + self._sizes[start]:
                return self.live[start] + (recorded - start)
        return self.stale.get(recorded)

    def drop(self, recorded: int) -> None:
        super().drop(recorded)
        if self._sizes.pop(recorded, None) is not None:
            i = bisect.bisect_left(self._starts, recorded)
            del self._starts[i]

    def drop_all(self) -> None:
        super().drop_all()
        self._starts.clear()
        self._sizes.clear()
