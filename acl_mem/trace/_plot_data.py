"""What ``acl-mem trace plot`` draws, as data: per device the call sites that held the
most memory at the in-use peak, step series of in use (one band per call site) and
reserved over time for the device and each page pool, and the live allocations at the
peak laid out by address. The renderers (_plot_html, _plot_png) only draw these.

Series come from the allocations' open and close events sorted by event index, so a
trace of a million calls costs one sort and one pass per series. Long series are cut to
at most ``max_points`` points: each time bucket keeps the state where in use was
highest, the state where reserved was highest and its last state, so no peak is lost
and the level after each bucket is exact.
"""

from __future__ import annotations

import bisect
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain

from ._figures import HOST, UNKNOWN, Allocation, DeviceFigures, PoolFigures, TraceSummary
from ._progress import Progress
from ._text import size_text

__all__ = ["MAX_POINTS", "NO_STACK", "OTHER", "PALETTE", "AddressMap", "Band", "Cluster",
           "DevicePlot", "MapItem", "PlotData", "Series", "Timeline", "band_colors",
           "build_plot_data", "device_title", "site_label", "step_series", "time_text",
           "time_unit"]

MAX_POINTS = 2000
OTHER = "other"
NO_STACK = "(no stack recorded)"
#: Rows of the address map; a device with more clusters shows those holding most bytes.
MAX_CLUSTERS = 24
#: A hole larger than this and than all the live bytes breaks the row: drawn to scale it
#: would squeeze every block into a sliver.
MIN_BREAK = 1 << 20
_POOL_ORDER = ("normal", "huge", "giant", "pinned")
#: Event tuples: (event index, time, band, in-use delta, reserved delta).
_Event = tuple[int, int, int, int, int]
_Frame = tuple[str, int, str]


def site_label(frames: Sequence[_Frame]) -> str:
    """``train.py:42 in step`` for the innermost frame, as the text summary prints it."""
    if not frames:
        return NO_STACK
    file, line, function = frames[0]
    return f"{os.path.basename(str(file))}:{line} in {function}"


#: Band colours (the last band, ``other``, is grey); sites beyond them reuse them.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#86bcb6")
OTHER_COLOR = "#bab0ac"


def band_colors(bands: Sequence[Band]) -> list[str]:
    """A colour per band, the same in the HTML and the PNG."""
    return [OTHER_COLOR if band.label == OTHER and i == len(bands) - 1
            else PALETTE[i % len(PALETTE)] for i, band in enumerate(bands)]


def time_unit(span: int) -> tuple[str, float]:
    """The unit (and nanoseconds per unit) an axis ``span`` ns long is labelled in."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if span >= 2 * scale:
            return unit, scale
    return "ns", 1.0


def time_text(ns: int | float) -> str:
    """A time since the start with a unit that suits it: ``850 ns``, ``12.5 ms``, ``3.2 s``."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.4g} {unit}"
    return f"{ns:.0f} ns"


@dataclass(frozen=True)
class Band:
    """One band of the in-use stack: a call site, or ``other`` for the rest."""

    label: str
    #: Bytes in use from this site at the device's in-use peak.
    at_peak: int
    #: Whether the band holds bytes at any time (``other`` may stay empty).
    used: bool = True


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


@dataclass
class Timeline:
    """In use and reserved over time of a device (``pool == "total"``) or a page pool."""

    pool: str
    figures: PoolFigures
    series: Series


@dataclass
class MapItem:
    """A live allocation on the address map.

    ``role``: ``block`` (memory in use), ``container`` (a pool's block or a mapping a
    pool carves: reserved, its segments are in use) or ``segment`` (inside a container).
    """

    allocation: Allocation
    role: str
    band: int
    #: Address space it takes: its reserved bytes when they exceed its size (padding
    #: and page rounding belong to it, they are no hole).
    extent: int

    @property
    def start(self) -> int:
        return self.allocation.address

    @property
    def end(self) -> int:
        return self.allocation.address + self.extent


@dataclass
class Cluster:
    """Allocations close enough to draw to scale on one row."""

    start: int
    end: int
    #: Blocks and containers by address.
    items: list[MapItem]
    #: Segments by address (each inside one of the containers).
    nested: list[MapItem] = field(default_factory=list)
    #: (start, end) of the free address space between consecutive items.
    holes: list[tuple[int, int]] = field(default_factory=list)

    @property
    def live(self) -> int:
        return sum(item.allocation.in_use for item in (*self.items, *self.nested))


@dataclass
class AddressMap:
    """The live allocations of a device at its in-use peak, by address."""

    #: Event index and time of the peak (-1 when nothing was ever in use).
    index: int
    t: int
    clusters: list[Cluster]
    #: Clusters left out (the rows keep the MAX_CLUSTERS holding most bytes).
    omitted: int = 0
    #: Physical memory live at the peak: its handle is no address, so it has no place.
    unplaced: int = 0


@dataclass
class DevicePlot:
    """Everything drawn for one device (or the host's pinned memory)."""

    device: str
    title: str
    figures: DeviceFigures
    bands: list[Band]
    #: The device's total first, then one per page pool when it used more than one.
    timelines: list[Timeline]
    address_map: AddressMap


@dataclass
class PlotData:
    summary: TraceSummary
    devices: list[DevicePlot]
    #: Where the time axes start and end (ns): a little before the first allocation,
    #: since a recording often begins long before the program allocates anything, and
    #: a little after the last event, so that a drop at the very end shows.
    start: int = 0
    end: int = 0


class _Work:
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


def device_title(device: str, header: dict[str, object]) -> str:
    if device == HOST:
        return "host (page-locked memory)"
    if device == UNKNOWN:
        return "device unknown (threads with no device the trace knows)"
    capacity = header.get("capacity")
    memory = f"{header['memory']} " if header.get("memory") else ""
    tail = f" ({memory}{size_text(capacity)})" if isinstance(capacity, int) and capacity else ""
    return f"device {device}{tail}"


def _live_at(a: Allocation, index: int) -> bool:
    return a.index <= index and (a.freed_index is None or a.freed_index > index)


def _rank_sites(allocations: list[Allocation], labels: list[str], peak: int, top: int
                ) -> list[Band]:
    """The ``top`` sites with most bytes in use at the peak, then ``other``."""
    at_peak: Counter[str] = Counter()
    for a, label in zip(allocations, labels, strict=True):
        if a.in_use and _live_at(a, peak):
            at_peak[label] += a.in_use
    ranked = sorted(at_peak.items(), key=lambda kv: (-kv[1], kv[0]))[:max(0, top)]
    rest = sum(at_peak.values()) - sum(n for _, n in ranked)
    return [*(Band(label, n) for label, n in ranked), Band(OTHER, rest)]


def _events(allocations: list[Allocation], bands: list[int]) -> list[_Event]:
    """Open and close events of ``allocations`` (``bands[i]`` is the band of the i-th),
    sorted by event index."""
    counted = [(a, band) for a, band in zip(allocations, bands, strict=True)
               if a.in_use or a.reserved]
    events = [(a.index, a.t, band, a.in_use, a.reserved) for a, band in counted]
    events += [(a.freed_index, a.freed_t or 0, band, -a.in_use, -a.reserved)
               for a, band in counted if a.freed_index is not None]
    # Opens come in index order and closes nearly so: the sort merges a few runs.
    # (Whole tuples compare faster than through a key function; ties are harmless.)
    events.sort()
    return events


def step_series(events: list[_Event], bands: int, end: int, *,
                max_points: int = MAX_POINTS, work: _Work | None = None) -> Series:
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


# -- the address map -------------------------------------------------------------------------------
def _map_items(live: list[tuple[Allocation, int]]) -> list[MapItem]:
    items = []
    for a, band in live:
        if a.kind in ("physical", "reservation"):
            continue
        role = "segment" if a.kind == "segment" else "block" if a.in_use else "container"
        extent = a.size if role == "segment" else max(a.size, a.reserved)
        items.append(MapItem(a, role, band, max(extent, 1)))
    items.sort(key=lambda item: (item.start, -item.extent))
    return items


def _clusters(items: list[MapItem]) -> list[Cluster]:
    """Rows of top-level items whose holes are small enough to draw to scale."""
    top = [item for item in items if item.role != "segment"]
    if not top:
        return []
    limit = max(MIN_BREAK, sum(item.extent for item in top))
    clusters = [Cluster(top[0].start, top[0].end, [top[0]])]
    for item in top[1:]:
        row = clusters[-1]
        if item.start - row.end > limit:
            clusters.append(Cluster(item.start, item.end, [item]))
            continue
        if item.start > row.end:
            row.holes.append((row.end, item.start))
        row.items.append(item)
        row.end = max(row.end, item.end)
    _nest([item for item in items if item.role == "segment"], clusters)
    return clusters


def _nest(segments: list[MapItem], clusters: list[Cluster]) -> None:
    """Put each segment in the row holding its address (a segment outside every row,
    its parent unseen, starts a row of its own)."""
    starts = [c.start for c in clusters]
    for segment in segments:
        at = bisect.bisect_right(starts, segment.start) - 1
        if at >= 0 and segment.start < clusters[at].end:
            clusters[at].nested.append(segment)
        else:
            lone = Cluster(segment.start, segment.end, [segment])
            clusters.insert(at + 1, lone)
            starts.insert(at + 1, lone.start)


def address_map(allocations: list[Allocation], bands: list[int], figures: PoolFigures
                ) -> AddressMap:
    """The live allocations at the device's in-use peak, in rows of clusters."""
    index = figures.peak_in_use_index
    if index < 0:
        return AddressMap(index, figures.peak_in_use_t, [])
    live = [(a, band) for a, band in zip(allocations, bands, strict=True)
            if _live_at(a, index)]
    clusters = _clusters(_map_items(live))
    omitted = max(0, len(clusters) - MAX_CLUSTERS)
    if omitted:
        keep = sorted(clusters, key=lambda c: -(c.live or c.end - c.start))[:MAX_CLUSTERS]
        clusters = sorted(keep, key=lambda c: c.start)
    unplaced = sum(1 for a, _ in live if a.kind == "physical")
    return AddressMap(index, figures.peak_in_use_t, clusters, omitted, unplaced)


# -- everything ------------------------------------------------------------------------------------
def _pool_order(name: str) -> tuple[int, str]:
    return (_POOL_ORDER.index(name) if name in _POOL_ORDER else len(_POOL_ORDER), name)


def _site_labels(allocations: list[Allocation]) -> list[str]:
    # Half a million allocations share a few hundred sites: label each site once.
    cache: dict[tuple[str, int, str] | None, str] = {}
    labels = []
    for a in allocations:
        key = a.frames[0] if a.frames else None
        label = cache.get(key)
        if label is None:
            label = cache[key] = site_label(a.frames)
        labels.append(label)
    return labels


def _device_plot(summary: TraceSummary, figures: DeviceFigures, allocations: list[Allocation],
                 top_sites: int, max_points: int, work: _Work) -> DevicePlot:
    labels = _site_labels(allocations)
    bands = _rank_sites(allocations, labels, figures.total.peak_in_use_index, top_sites)
    index_of = {band.label: i for i, band in enumerate(bands)}
    other = len(bands) - 1
    #: The band of each allocation, by position in ``allocations``.
    band_list = [index_of.get(label, other) for label in labels]
    end = summary.duration
    timelines = [Timeline("total", figures.total,
                          step_series(_events(allocations, band_list), len(bands), end,
                                      max_points=max_points, work=work))]
    pools = sorted(figures.pools, key=_pool_order)
    if len(pools) > 1:
        for pool in pools:
            mine = [(a, b) for a, b in zip(allocations, band_list, strict=True)
                    if a.pool == pool]
            events = _events([a for a, _ in mine], [b for _, b in mine])
            timelines.append(Timeline(pool, figures.pools[pool],
                                      step_series(events, len(bands), end,
                                                  max_points=max_points, work=work)))
    used = [any(values[b] for values in timelines[0].series.bands) for b in range(len(bands))]
    bands = [Band(band.label, band.at_peak, u) for band, u in zip(bands, used, strict=True)]
    return DevicePlot(figures.device, device_title(figures.device, summary.header), figures,
                      bands, timelines, address_map(allocations, band_list, figures.total))


def build_plot_data(summary: TraceSummary, *, top_sites: int = 8,
                    max_points: int = MAX_POINTS, progress: Progress | None = None
                    ) -> PlotData:
    """The plot of ``summary``: one :class:`DevicePlot` per device with figures (the
    host's pinned memory included). ``progress`` is advanced in proportion to the
    work, up to its ``total``."""
    by_device: dict[str, list[Allocation]] = {}
    for a in summary.allocations:
        by_device.setdefault(a.device, []).append(a)
    # Work: one pass over each device's groups, and another per pool when there are
    # several; counting allocations (about two events each) is close enough.
    work_total = 0
    for device, figures in summary.devices.items():
        count = len(by_device.get(device, ()))
        work_total += count * (2 if len(figures.pools) > 1 else 1)
    work = _Work(progress, work_total)
    plots = [_device_plot(summary, figures, by_device.get(device, []), top_sites, max_points,
                          work)
             for device, figures in summary.devices.items()]
    return PlotData(summary, plots, *_time_axis(summary, by_device))


def _time_axis(summary: TraceSummary, by_device: dict[str, list[Allocation]]
               ) -> tuple[int, int]:
    first = min((a.t for device in summary.devices for a in by_device.get(device, ())
                 if a.in_use or a.reserved), default=0)
    margin = max(1, (summary.duration - first) // 50)
    return max(0, first - margin), summary.duration + margin


# -- axes ------------------------------------------------------------------------------------------
def byte_ticks(largest: int) -> tuple[int, list[int]]:
    """The top of a bytes axis holding ``largest`` and its ticks, a power of two apart
    so that they read as whole binary units (16 MiB, 32 MiB, ...)."""
    if largest <= 0:
        return 1, [0]
    step = 1 << max(0, (largest // 5).bit_length())
    while step > 1 and largest // step < 3:
        step //= 2
    top = -(-largest // step) * step
    return top, list(range(0, top + 1, step))


def time_ticks(start: int, end: int) -> list[int]:
    """Ticks between ``start`` and ``end`` (ns) on multiples of 1, 2 or 5 times a power
    of ten nanoseconds, about six of them."""
    span = end - start
    if span <= 0:
        return [start]
    rough = span / 6
    magnitude = 10 ** max(0, len(str(int(rough))) - 1)
    step = next((m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= rough),
                10 * magnitude)
    return list(range(-(-start // step) * step, end + 1, step))
