"""The SVG charts of the HTML plot: a device's (or page pool's) in use over time, stacked
by call site, with reserved over it and both peaks marked; and its address map at the
in-use peak. Every string from the trace goes through :func:`esc`."""

from __future__ import annotations

import html
from collections.abc import Iterable

from ._plot_data import (
    Band,
    DevicePlot,
    Timeline,
    byte_ticks,
    site_label,
    time_text,
    time_ticks,
    time_unit,
)
from ._plot_map import AddressMap, Cluster, MapItem
from ._text import size_text

__all__ = ["WIDTH", "address_map_svg", "esc", "map_note", "timeline_svg"]

WIDTH = 960
_LEFT, _RIGHT, _TOP, _BOTTOM = 78, 18, 28, 34
#: Address map: the label column, row height and the break between rows.
_LABEL, _ROW, _BREAK = 176, 26, 20


def esc(value: object) -> str:
    """Text or an attribute value from ``value``: trace strings are user data."""
    return html.escape(str(value), quote=True)


def _f(value: float) -> str:
    """A coordinate: one decimal is finer than a pixel and keeps the file small."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


# -- the timeline ----------------------------------------------------------------------------------
class _Scale:
    """Data to pixels for one chart."""

    def __init__(self, start: int, end: int, top: int, height: int) -> None:
        self.start, self.end, self.top = start, max(end, start + 1), max(1, top)
        self.width = WIDTH - _LEFT - _RIGHT
        self.height = height - _TOP - _BOTTOM

    def x(self, t: int) -> float:
        # Nothing happens before start (the axis begins just before the first
        # allocation): the zero state until then is drawn from the axis' left edge.
        t = min(max(t, self.start), self.end)
        return _LEFT + self.width * (t - self.start) / (self.end - self.start)

    def y(self, value: int) -> float:
        return _TOP + self.height * (1 - value / self.top)


def timeline_svg(timeline: Timeline, device: DevicePlot, colors: list[str], start: int,
                  end: int, height: int) -> str:
    figures = timeline.figures
    top, ticks = byte_ticks(max(figures.peak_reserved, figures.peak_in_use) * 9 // 8)
    scale = _Scale(start, end, top, height)
    what = "all pools" if timeline.pool == "total" else f"{timeline.pool} pool"
    label = f"{device.title}: {what}"
    parts = [f'<svg class="timeline" data-pool="{esc(timeline.pool)}" '
             f'data-peak-in-use="{figures.peak_in_use}" '
             f'data-peak-reserved="{figures.peak_reserved}" width="{WIDTH}" '
             f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
             f'aria-label="{esc(label)}: in use and reserved over time">',
             f'<text class="chart-title" x="{_LEFT}" y="16">{esc(label)}</text>',
             _axes(scale, ticks),
             *_bands(timeline, device.bands, colors, scale),
             _reserved_path(timeline, scale),
             _peak("in-use", "peak in use", figures.peak_in_use, figures.peak_in_use_t, scale),
             _peak("reserved", "peak reserved", figures.peak_reserved, figures.peak_reserved_t,
                   scale),
             f'<rect class="frame" x="{_LEFT}" y="{_TOP}" width="{scale.width}" '
             f'height="{scale.height}"/>', "</svg>"]
    return "\n".join(parts)


def _axes(scale: _Scale, byte_marks: list[int]) -> str:
    unit, per = time_unit(scale.end)
    parts = ['<g class="axis">']
    for value in byte_marks:
        y = _f(scale.y(value))
        parts.append(f'<line x1="{_LEFT}" x2="{_LEFT + scale.width}" y1="{y}" y2="{y}"/>'
                     f'<text x="{_LEFT - 6}" y="{y}" dy="4" text-anchor="end">'
                     f"{esc(size_text(value))}</text>")
    bottom = _TOP + scale.height
    for t in time_ticks(scale.start, scale.end):
        x = _f(scale.x(t))
        parts.append(f'<line x1="{x}" x2="{x}" y1="{_TOP}" y2="{bottom}"/>'
                     f'<text x="{x}" y="{bottom + 16}" text-anchor="middle">'
                     f"{esc(f'{t / per:g} {unit}')}</text>")
    parts.append("</g>")
    return "".join(parts)


def _step_path(times: list[int], values: Iterable[int], scale: _Scale) -> str:
    """``x0,y0 Hx1 Vy1 Hx2 ...``: each value held until the next time, the last until
    the end."""
    out: list[str] = []
    for i, value in enumerate(values):
        y = _f(scale.y(value))
        out.append(f"{_f(scale.x(times[i]))} {y}" if i == 0 else f"V{y}")
        out.append(f"H{_f(scale.x(times[i + 1] if i + 1 < len(times) else scale.end))}")
    return "".join(out)


def _bands(timeline: Timeline, bands: list[Band], colors: list[str], scale: _Scale
           ) -> list[str]:
    series = timeline.series
    below = [0] * len(series.times)
    paths = []
    for b, (band, color) in enumerate(zip(bands, colors, strict=True)):
        above = [low + values[b] for low, values in zip(below, series.bands, strict=True)]
        if any(values[b] for values in series.bands):
            upper = _step_path(series.times, above, scale)
            lower = _reverse_step(series.times, below, scale)
            paths.append(f'<path class="band" data-band="{b}" fill="{color}" '
                         f'd="M{upper}{lower}Z"><title>{esc(band.label)}: '
                         f"{esc(size_text(band.at_peak))} in use at the device's peak"
                         "</title></path>")
        below = above
    return paths


def _reverse_step(times: list[int], values: list[int], scale: _Scale) -> str:
    """The lower edge of a band, from the end back to the start."""
    out: list[str] = []
    for i in range(len(values) - 1, -1, -1):
        out.append(f"V{_f(scale.y(values[i]))}H{_f(scale.x(times[i]))}")
    return "".join(out)


def _reserved_path(timeline: Timeline, scale: _Scale) -> str:
    series = timeline.series
    return (f'<path class="reserved" d="M{_step_path(series.times, series.reserved, scale)}">'
            "<title>reserved</title></path>")


def _peak(kind: str, what: str, value: int, t: int, scale: _Scale) -> str:
    x, y = scale.x(t), scale.y(value)
    right = x > _LEFT + scale.width * 0.65
    dx = -8 if right else 8
    # The reserved peak is usually the higher one: its label goes above the point, the
    # in-use label below, so that peaks reached together do not write over each other.
    dy = -8 if kind == "reserved" or y + 18 > _TOP + scale.height else 16
    text = f"{what} {size_text(value)} at {time_text(t)}"
    return (f'<g class="peak {kind}" data-kind="{kind}" data-value="{value}" data-t="{t}">'
            f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{_f(y)}" y2="{_TOP + scale.height}"/>'
            f'<circle cx="{_f(x)}" cy="{_f(y)}" r="4"/>'
            f'<text x="{_f(x + dx)}" y="{_f(y + dy)}" '
            f'text-anchor="{"end" if right else "start"}">{esc(text)}</text>'
            f"<title>{esc(text)}</title></g>")


# -- the address map -------------------------------------------------------------------------------
def map_note(address_map: AddressMap) -> str:
    if address_map.index < 0:
        return '<p class="note">Nothing was in use on this device.</p>'
    rows = address_map.clusters
    notes = [f"{sum(len(c.items) + len(c.nested) for c in rows)} allocation(s) live at "
             f"{time_text(address_map.t)} in {len(rows)} row(s): each row is a stretch of "
             "address space drawn to scale, with its holes; the gaps between rows are "
             "too large to draw (their size is written between the rows)."]
    if address_map.omitted:
        notes.append(f"{address_map.omitted} more row(s) holding fewer bytes are not drawn.")
    if address_map.unplaced:
        notes.append(f"{address_map.unplaced} physical allocation(s) have a handle, no "
                     "address: not on the map.")
    return f'<p class="note">{esc(" ".join(notes))}</p>'


def address_map_svg(device: DevicePlot, colors: list[str]) -> str:
    rows = device.address_map.clusters
    height = max(_ROW, len(rows) * _ROW + max(0, len(rows) - 1) * _BREAK) + 4
    parts = [f'<svg class="address-map" data-device="{esc(device.device)}" '
             f'data-peak-index="{device.address_map.index}" width="{WIDTH}" '
             f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
             f'aria-label="address space of {esc(device.title)} at the in-use peak">']
    y = 2
    for i, cluster in enumerate(rows):
        if i:
            parts.append(_break(rows[i - 1], cluster, y))
            y += _BREAK
        parts.append(_cluster(cluster, colors, y))
        y += _ROW
    parts.append("</svg>")
    return "\n".join(parts)


def _break(before: Cluster, after: Cluster, y: int) -> str:
    gap = after.start - before.end
    mid = y + _BREAK / 2
    return (f'<g class="break" data-gap="{gap}"><line x1="{_LABEL}" x2="{WIDTH - _RIGHT}" '
            f'y1="{_f(mid)}" y2="{_f(mid)}"/><text x="{(_LABEL + WIDTH) // 2}" '
            f'y="{_f(mid + 4)}" text-anchor="middle">{esc(size_text(gap))} of address '
            f"space not drawn</text></g>")


class _Row:
    """Address to pixels within one cluster's row."""

    def __init__(self, cluster: Cluster, y: int) -> None:
        self.start, self.span = cluster.start, max(1, cluster.end - cluster.start)
        self.width = WIDTH - _RIGHT - _LABEL
        self.y = y

    def x(self, address: int) -> float:
        return _LABEL + self.width * (address - self.start) / self.span


def _cluster(cluster: Cluster, colors: list[str], y: int) -> str:
    row = _Row(cluster, y)
    parts = [f'<g class="cluster" data-start="{cluster.start}" data-end="{cluster.end}">',
             f'<text x="{_LABEL - 8}" y="{y + 11}" text-anchor="end">{cluster.start:#x}</text>',
             f'<text x="{_LABEL - 8}" y="{y + 23}" text-anchor="end">'
             f"{esc(size_text(cluster.end - cluster.start))} of address space</text>"]
    for start, end in cluster.holes:
        x0, x1 = row.x(start), row.x(end)
        if x1 - x0 >= 1:
            parts.append(f'<rect class="hole" x="{_f(x0)}" y="{y + 3}" width="{_f(x1 - x0)}" '
                         f'height="{_ROW - 6}" data-size="{end - start}"><title>hole: '
                         f"{esc(size_text(end - start))} between {start:#x} and {end:#x}"
                         "</title></rect>")
    parts.extend(_items(cluster.items, row, colors, inset=2))
    parts.extend(_items(cluster.nested, row, colors, inset=7))
    parts.append("</g>")
    return "\n".join(parts)


def _items(items: list[MapItem], row: _Row, colors: list[str], *, inset: int) -> list[str]:
    """Rectangles for ``items``; runs of items narrower than a pixel become one
    rectangle (a trace can hold a hundred thousand live blocks)."""
    out: list[str] = []
    run: list[MapItem] = []
    for item in items:
        narrow = row.x(item.end) - row.x(item.start) < 1
        if run and not (narrow and row.x(item.start) - row.x(run[-1].end) < 1):
            out.append(_run(run, row, colors, inset))
            run = []
        run.append(item)
        if not narrow:
            out.append(_run(run, row, colors, inset))
            run = []
    if run:
        out.append(_run(run, row, colors, inset))
    return out


def _run(run: list[MapItem], row: _Row, colors: list[str], inset: int) -> str:
    x0 = row.x(run[0].start)
    width = max(1.0, row.x(max(item.end for item in run)) - x0)
    y, height = row.y + inset, _ROW - 2 * inset
    box = f'x="{_f(x0)}" y="{y}" width="{_f(width)}" height="{height}"'
    if len(run) > 1:
        in_use = sum(item.allocation.in_use for item in run)
        band = max(run, key=lambda item: item.allocation.in_use).band
        return (f'<rect class="many" {box} fill="{colors[band]}" data-count="{len(run)}">'
                f"<title>{len(run)} allocations, {esc(size_text(in_use))} in use, "
                f"{run[0].start:#x} to {run[-1].end:#x}</title></rect>")
    item = run[0]
    a = item.allocation
    title = esc(_tooltip(item))
    attrs = f'data-address="{a.address}" data-size="{a.size}"'
    if item.role == "container":
        return f'<rect class="container" {box} {attrs}><title>{title}</title></rect>'
    color = colors[item.band]
    used = max(1.0, min(width, row.x(a.address + a.size) - x0))
    # (The block's own title is not repeated here: a stack can be long.)
    slack = "" if width - used < 1 else (
        f'<rect class="slack" x="{_f(x0 + used)}" y="{y}" width="{_f(width - used)}" '
        f'height="{height}" fill="{color}"><title>padding and page rounding of '
        f'{a.address:#x}</title></rect>')
    return (f'<rect class="{item.role}" x="{_f(x0)}" y="{y}" width="{_f(used)}" '
            f'height="{height}" fill="{color}" {attrs}><title>{title}</title></rect>{slack}')


def _tooltip(item: MapItem) -> str:
    a = item.allocation
    if item.role == "container":
        what = "a pool's " + ("block" if a.kind == "block" else a.kind) + \
            " (its segments are in use)"
    else:
        what = f"segment of {a.parent or 0:#x}" if item.role == "segment" else a.kind
    lines = [f"{a.address:#x}  {size_text(a.size)} ({a.size:,} bytes)",
             f"{a.call}: {what}", f"call site: {site_label(a.frames)}",
             f"allocated at {time_text(a.t)}, thread {a.thread}"]
    if a.reserved > a.size:
        lines.append(f"reserved {size_text(a.reserved)} (padding and page rounding)")
    if a.frames:
        lines.append("stack (innermost first):")
        lines.extend(f"  {file}:{line} in {function}" for file, line, function in a.frames)
    return "\n".join(lines)
