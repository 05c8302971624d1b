"""What ``acl-mem trace plot`` draws, as data: per device the call sites that held the
most memory at the in-use peak (a band each, the rest ``other``), step series of in use
per band and reserved over time for the device and each page pool (_plot_series), and
the live allocations at the peak laid out by address (_plot_map). The renderers
(_plot_html with _plot_svg, and _plot_png) only draw these.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ._figures import HOST, UNKNOWN, Allocation, DeviceFigures, PoolFigures, TraceSummary
from ._plot_map import AddressMap, address_map, live_at
from ._plot_series import MAX_POINTS, Series, Work, events, step_series
from ._progress import Progress
from ._text import size_text

__all__ = ["NO_STACK", "OTHER", "PALETTE", "Band", "DevicePlot", "PlotData", "Timeline",
           "band_colors", "build_plot_data", "byte_ticks", "device_title", "site_label",
           "time_text", "time_ticks", "time_unit"]

OTHER = "other"
NO_STACK = "(no stack recorded)"
_POOL_ORDER = ("normal", "huge", "giant", "pinned")
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


def time_unit(largest: int) -> tuple[str, float]:
    """The unit (and nanoseconds per unit) of a time axis reaching ``largest`` ns."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if largest >= 2 * scale:
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
class Timeline:
    """In use and reserved over time of a device (``pool == "total"``) or a page pool."""

    pool: str
    figures: PoolFigures
    series: Series


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
    #: Numbered devices with figures that are not drawn (beyond :data:`MAX_DEVICES`).
    left_out: int = 0


def device_title(device: str, header: dict[str, object]) -> str:
    """``device 0 (HBM 64 GiB)``, ``host (page-locked memory)``."""
    if device == HOST:
        return "host (page-locked memory)"
    if device == UNKNOWN:
        return "device unknown (threads with no device the trace knows)"
    capacity = header.get("capacity")
    memory = f"{header['memory']} " if header.get("memory") else ""
    tail = f" ({memory}{size_text(capacity)})" if isinstance(capacity, int) and capacity else ""
    return f"device {device}{tail}"


def _rank_sites(allocations: list[Allocation], labels: list[str], peak: int, top: int
                ) -> list[Band]:
    """The ``top`` sites with most bytes in use at the peak, then ``other``."""
    at_peak: Counter[str] = Counter()
    for a, label in zip(allocations, labels, strict=True):
        if a.in_use and live_at(a, peak):
            at_peak[label] += a.in_use
    ranked = sorted(at_peak.items(), key=lambda kv: (-kv[1], kv[0]))[:max(0, top)]
    rest = sum(at_peak.values()) - sum(n for _, n in ranked)
    return [*(Band(label, n) for label, n in ranked), Band(OTHER, rest)]


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
                 top_sites: int, max_points: int, work: Work) -> DevicePlot:
    labels = _site_labels(allocations)
    bands = _rank_sites(allocations, labels, figures.total.peak_in_use_index, top_sites)
    index_of = {band.label: i for i, band in enumerate(bands)}
    other = len(bands) - 1
    #: The band of each allocation, by position in ``allocations``.
    band_list = [index_of.get(label, other) for label in labels]
    end = summary.duration
    timelines = [Timeline("total", figures.total,
                          step_series(events(allocations, band_list), len(bands), end,
                                      max_points=max_points, work=work))]
    pools = sorted(figures.pools, key=_pool_order)
    if len(pools) > 1:
        for pool in pools:
            mine = [(a, b) for a, b in zip(allocations, band_list, strict=True)
                    if a.pool == pool]
            pool_events = events([a for a, _ in mine], [b for _, b in mine])
            timelines.append(Timeline(pool, figures.pools[pool],
                                      step_series(pool_events, len(bands), end,
                                                  max_points=max_points, work=work)))
    used = [any(values[b] for values in timelines[0].series.bands) for b in range(len(bands))]
    bands = [Band(band.label, band.at_peak, u) for band, u in zip(bands, used, strict=True)]
    return DevicePlot(figures.device, device_title(figures.device, summary.header), figures,
                      bands, timelines, address_map(allocations, band_list, figures.total))


#: Numbered devices drawn at most: a host has 16 at most, the fake 32; a trace naming
#: thousands (forged, or damaged) would make a page, or an image, without end.
MAX_DEVICES = 32


def build_plot_data(summary: TraceSummary, *, top_sites: int = 8,
                    max_points: int = MAX_POINTS, progress: Progress | None = None
                    ) -> PlotData:
    """The plot of ``summary``: one :class:`DevicePlot` per device with figures (the
    host's pinned memory included). ``progress`` is advanced in proportion to the
    work, up to its ``total``."""
    numbered = [d for d in summary.devices if d.isdigit()]
    drawn = {d: summary.devices[d] for d in summary.devices
             if not d.isdigit() or d in numbered[:MAX_DEVICES]}
    by_device: dict[str, list[Allocation]] = {}
    for a in summary.allocations:
        if a.device in drawn:
            by_device.setdefault(a.device, []).append(a)
    # Work: one pass over each device's groups, and another per pool when there are
    # several; counting allocations (about two events each) is close enough.
    work_total = 0
    for device, figures in drawn.items():
        count = len(by_device.get(device, ()))
        work_total += count * (2 if len(figures.pools) > 1 else 1)
    work = Work(progress, work_total)
    plots = [_device_plot(summary, figures, by_device.get(device, []), top_sites, max_points,
                          work)
             for device, figures in drawn.items()]
    return PlotData(summary, plots, *_time_axis(summary, by_device),
                    left_out=max(0, len(numbered) - MAX_DEVICES))


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
