"""Step series of memory in use (per band) and reserved over a trace, built from the
allocations' open and close events sorted by event index: one sort and one pass per
series, so a trace of a million calls takes seconds.

A long series is cut to at most ``max_points`` points: each time bucket keeps the state
where in use was highest, the state where reserved was highest and its last state, so
that no peak is lost and the level after each bucket is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

from ._figures import Allocation
from ._progress import Progress

__all__ = ["MAX_POINTS", "Event", "Series", "Work", "events", "step_series"]

MAX_POINTS = 2000
#: (event index, time, band, in-use delta, reserved delta).
Event = tuple[int, int, int, int, int]


@dataclass
class Series:
    """A step series: the values at ``times[i]`` hold until ``times[i + 1]``, the last
    ones until ``end``."""

    times: list[int]
    #: Bytes in use per band at each time.
    bands: list[tuple[int, ...]]
    reserved: list[int]
    end: int

    def in_use(self) -> list[int]:
        """Bytes in use (all bands) at each time."""
        return [sum(values) for values in self.bands]


class Work:
    """Reports to a caller's Progress in proportion to the events processed, whatever
    unit the caller counted its total in."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress = progress
        self.total = max(1, total)
        self.done = 0

    def advance(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress.update(self.progress.total * min(self.done, self.total) // self.total)


def events(allocations: list[Allocation], bands: list[int]) -> list[Event]:
    """Open and close events of ``allocations`` (``bands[i]`` is the band of the i-th),
    sorted by event index."""
    counted = [(a, band) for a, band in zip(allocations, bands, strict=True)
               if a.in_use or a.reserved]
    out = [(a.index, a.t, band, a.in_use, a.reserved) for a, band in counted]
    out += [(a.freed_index, a.freed_t or 0, band, -a.in_use, -a.reserved)
            for a, band in counted if a.freed_index is not None]
    # Opens come in index order and closes nearly so: the sort merges a few runs.
    # (Whole tuples compare faster than through a key function; ties are harmless.)
    out.sort()
    return out


def step_series(events: list[Event], bands: int, end: int, *,
                max_points: int = MAX_POINTS, work: Work | None = None) -> Series:
    """The step series of ``events`` sorted by index (all events of one index are one
    change, at one time), cut to at most ``max_points`` points keeping every maximum."""
    series = Series([0], [(0,) * bands], [0], end)
    if not events:
        return series
    # A short series keeps every state: each change is a bucket of its own.
    exact = len(events) < max_points
    buckets = _Buckets(series, max_points)
    # Wider than every time, so that each bucket number is below the count.
    span = max(1, end, events[-1][1]) + 1
    values = [0] * bands
    in_use = reserved = seq = t_current = 0
    bucket = current = -1
    # A last event of no change, with an index of its own, closes the last change.
    for index, t, band, d_use, d_res in chain(events, [(_CLOSING, events[-1][1], 0, 0, 0)]):
        if index != current:
            if current != -1:  # the change at `current` is complete
                seq += 1
                if in_use > buckets.top_use or reserved > buckets.top_res:
                    buckets.offer(seq, t_current, values, reserved, in_use)
                if work is not None and seq & 1023 == 0:
                    work.advance(1024)
                if index == _CLOSING:
                    break
            here = seq if exact else t * buckets.count // span
            if here != bucket:
                if bucket != -1:
                    buckets.close((seq, t_current, tuple(values), reserved, in_use))
                bucket = here
            current, t_current = index, t
        values[band] += d_use
        in_use += d_use
        reserved += d_res
    buckets.close((seq, t_current, tuple(values), reserved, in_use))
    if work is not None:
        work.advance(seq & 1023)
    return series


_CLOSING = -2
#: A state after one change: (sequence number, time, bands, reserved, in use).
_State = tuple[int, int, tuple[int, ...], int, int]


class _Buckets:
    """Time buckets of a long series, each keeping up to three states: the first at
    its in-use maximum, the first at its reserved maximum, and its last state (so that
    no peak is lost and the level after the bucket is exact)."""

    def __init__(self, series: Series, max_points: int) -> None:
        self.series = series
        self.count = max(1, (max_points - 1) // 3)
        self.use: _State | None = None
        self.res: _State | None = None
        #: The bucket's maxima so far (-1: none yet), read by the caller's loop.
        self.top_use = self.top_res = -1

    def offer(self, seq: int, t: int, values: list[int], reserved: int, in_use: int) -> None:
        """The state after change ``seq``: kept where it tops the bucket's maxima."""
        state = (seq, t, tuple(values), reserved, in_use)
        if in_use > self.top_use:
            self.use, self.top_use = state, in_use
        if reserved > self.top_res:
            self.res, self.top_res = state, reserved

    def close(self, last: _State) -> None:
        """Append the bucket's kept states, each once, in the order they happened."""
        unique = {s[0]: s for s in (self.use, self.res, last) if s is not None}
        for seq in sorted(unique):
            _, t, values, reserved, _ = unique[seq]
            self.series.times.append(t)
            self.series.bands.append(values)
            self.series.reserved.append(reserved)
        self.use = self.res = None
        self.top_use = self.top_res = -1
