"""The plot as a PNG, drawn with matplotlib (the optional ``plot`` extra).

matplotlib is imported only when a PNG is asked for, and drawn through a Figure on an
Agg canvas rather than pyplot: that renders without a display and leaves the process's
pyplot backend alone (``matplotlib.use("Agg")`` would switch it for a notebook that
called us).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

from ._plot_data import (
    Band,
    DevicePlot,
    PlotData,
    Timeline,
    band_colors,
    byte_ticks,
    time_text,
    time_unit,
)
from ._plot_map import AddressMap, MapItem
from ._text import size_text

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["PlotDependencyError", "png_renderer"]

_RESERVED_COLOR = "#222222"
_PEAK_COLOR = "#cc0000"
_CONTAINER_COLOR = "#e9eef5"
_INCH_PER_ROW = 0.45

Renderer = Callable[[PlotData, BinaryIO], None]


class PlotDependencyError(ImportError):
    """A PNG was asked for and matplotlib is not installed."""


def png_renderer() -> Renderer:
    """The PNG writer; raises :class:`PlotDependencyError` when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise PlotDependencyError(
            "writing a PNG needs matplotlib: pip install 'acl_mem[plot]' "
            "(an .html plot needs nothing more)") from exc
    return _write_png


def _write_png(data: PlotData, out: BinaryIO) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    heights = [h for device in data.devices for h in _heights(device)] or [1.0]
    figure = Figure(figsize=(13, sum(heights) + 0.8), dpi=100, constrained_layout=True)
    FigureCanvasAgg(figure)
    _title(figure, data)
    grid = figure.add_gridspec(len(heights), 1, height_ratios=heights)
    row = 0
    for device in data.devices:
        colors = band_colors(device.bands)
        for i, timeline in enumerate(device.timelines):
            _timeline(figure.add_subplot(grid[row]), timeline, device, colors,
                      (data.start, data.end), legend=i == 0)
            row += 1
        _address_map(figure.add_subplot(grid[row]), device.address_map, device.title, colors)
        row += 1
    if not data.devices:
        figure.text(0.5, 0.5, "the trace holds no allocation", ha="center")
    figure.savefig(out, format="png")


def _heights(device: DevicePlot) -> list[float]:
    """Inches for each of a device's axes: its timelines, then its address map."""
    timelines = [3.2 if i == 0 else 2.0 for i in range(len(device.timelines))]
    rows = max(1, len(device.address_map.clusters))
    return [*timelines, 0.7 + rows * _INCH_PER_ROW]


def _text(label: str) -> str:
    """User text as matplotlib prints it literally: ``$`` would start mathtext."""
    return label.replace("$", r"\$")


def _title(figure: Figure, data: PlotData) -> None:
    s, h = data.summary, data.summary.header
    about = [f"{h['backend']} backend" if h.get("backend") else "",
             str(h.get("soc") or ""), f"CANN {h['cann']}" if h.get("cann") else "",
             f"{s.calls:,} calls in {time_text(s.duration)}",
             f"{data.left_out} more devices not drawn" if data.left_out else ""]
    figure.suptitle(_text(f"{s.path}: {', '.join(a for a in about if a)}"), fontsize=11)


def _timeline(ax: Axes, timeline: Timeline, device: DevicePlot, colors: list[str],
              span: tuple[int, int], *, legend: bool) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    series = timeline.series
    start, end = span
    unit, per = time_unit(end)
    x = [max(t, start) / per for t in series.times] + [max(end, series.times[-1]) / per]
    # The last state holds until the end: repeat it for the closing step.
    stacks = [[values[b] for values in series.bands] for b in range(len(device.bands))]
    stacks = [values + values[-1:] for values in stacks]
    ax.stackplot(x, *stacks, colors=colors, step="post", linewidth=0)
    ax.step(x, series.reserved + series.reserved[-1:], where="post", color=_RESERVED_COLOR,
            linewidth=1.2)
    figures = timeline.figures
    top, ticks = byte_ticks(max(figures.peak_reserved, figures.peak_in_use) * 9 // 8)
    ax.set_ylim(0, top)
    ax.set_yticks(ticks)
    ax.set_yticklabels([size_text(t) for t in ticks])
    ax.set_xlim(start / per, max(end, start + 1) / per)
    ax.set_xlabel(f"time since the recording started ({unit})", fontsize=8)
    ax.grid(True, color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    what = "all pools" if timeline.pool == "total" else f"{timeline.pool} pool"
    ax.set_title(_text(f"{device.title}: {what}"), fontsize=10, loc="left")
    _peak(ax, "peak in use", figures.peak_in_use, figures.peak_in_use_t, per, span,
          below=figures.peak_in_use > top // 6)
    _peak(ax, "peak reserved", figures.peak_reserved, figures.peak_reserved_t, per, span)
    if legend:
        # Explicit handles: matplotlib would drop a label starting with "_" (a file
        # named _model.py) from an automatic legend.
        shown = [b for b, band in enumerate(device.bands) if band.used]
        handles: list[Artist] = [Patch(facecolor=colors[b]) for b in shown]
        handles.append(Line2D([], [], color=_RESERVED_COLOR))
        labels = [_legend_label(device.bands[b]) for b in shown] + ["reserved"]
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8,
                  frameon=False)


def _legend_label(band: Band) -> str:
    return _text(f"{band.label} ({size_text(band.at_peak)} at the peak)")


def _peak(ax: Axes, what: str, value: int, t: int, per: float, span: tuple[int, int], *,
          below: bool = False) -> None:
    """Mark a peak. The reserved peak is usually the higher: its label goes above the
    point, the in-use label below (unless it would fall on the time axis), so that two
    peaks reached together do not write over each other."""
    color = _RESERVED_COLOR if what == "peak reserved" else _PEAK_COLOR
    x = t / per
    ax.plot([x], [value], "o", color=color, markersize=5)
    ax.axvline(x, color=color, linestyle=":", linewidth=0.8)
    start, end = span
    right = t - start > 0.65 * max(end - start, 1)
    ax.annotate(f"{what} {size_text(value)} at {time_text(t)}", (x, value),
                xytext=(-8 if right else 8, -14 if below else 8), textcoords="offset points",
                ha="right" if right else "left", fontsize=8, color=color, fontweight="bold",
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none",
                      "alpha": 0.8})


def _bars(ax: Axes, items: list[MapItem], at: Callable[[int], float],
          rows: tuple[float, float], colors: list[str]) -> None:
    """One row's items: containers pale, blocks in their site's colour with their
    padding and page rounding (reserved beyond the size) lighter."""
    containers = [i for i in items if i.role == "container"]
    ax.broken_barh([(at(i.start), at(i.end) - at(i.start)) for i in containers], rows,
                   facecolors=_CONTAINER_COLOR, edgecolors="#8a9bb0", linewidth=0.5)
    used = [i for i in items if i.role != "container"]
    # A sliver still shows: a block can be a millionth of its row.
    ax.broken_barh([(at(i.start), max(at(i.start + i.allocation.size) - at(i.start), 0.001))
                    for i in used], rows, facecolors=[colors[i.band] for i in used],
                   edgecolors="white", linewidth=0.4)
    slack = [i for i in used if i.extent > i.allocation.size]
    ax.broken_barh([(at(i.start + i.allocation.size), at(i.end) - at(i.start + i.allocation.size))
                    for i in slack], rows, facecolors=[colors[i.band] for i in slack],
                   alpha=0.35, linewidth=0)


def _address_map(ax: Axes, address_map: AddressMap, title: str, colors: list[str]) -> None:
    ax.set_title(_text(f"{title}: address space at the in-use peak "
                       f"({time_text(address_map.t)})"), fontsize=10, loc="left")
    ax.set_xticks([])
    rows = address_map.clusters
    if not rows:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "nothing in use", ha="center", va="center", transform=ax.transAxes)
        return
    for y, cluster in enumerate(rows):
        span = max(1, cluster.end - cluster.start)

        def at(address: int, start: int = cluster.start, span: int = span) -> float:
            return (address - start) / span

        holes = [(at(s), at(e) - at(s)) for s, e in cluster.holes]
        ax.broken_barh(holes, (y - 0.4, 0.8), facecolors="white", edgecolors="#bbbbbb",
                       hatch="////", linewidth=0.3)
        for items, half in ((cluster.items, 0.4), (cluster.nested, 0.25)):
            _bars(ax, items, at, (y - half, 2 * half), colors)
        if y:
            gap = cluster.start - rows[y - 1].end
            ax.text(0.5, y - 0.5, f"⋯ {size_text(gap)} of address space not drawn ⋯",
                    ha="center", va="center", fontsize=7, color="#777777", style="italic")
    ax.set_xlim(0, 1)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{c.start:#x}\n{size_text(c.end - c.start)}" for c in rows],
                       fontsize=7)
    _map_key(ax)
    if address_map.omitted:
        ax.set_xlabel(f"{address_map.omitted} more row(s) holding fewer bytes not drawn",
                      fontsize=8)


def _map_key(ax: Axes) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(facecolor="#4e79a7"), Patch(facecolor="#4e79a7", alpha=0.35),
               Patch(facecolor=_CONTAINER_COLOR, edgecolor="#8a9bb0"),
               Patch(facecolor="white", edgecolor="#bbbbbb", hatch="////")]
    labels = ["in use (colour of its call site)", "padding and page rounding",
              "pool block or mapping (segments inside)", "hole"]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8,
              frameon=False)
