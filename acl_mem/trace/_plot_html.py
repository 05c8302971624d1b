"""The plot as one self-contained HTML page: inline SVG (_plot_svg) and CSS, no script,
nothing fetched from the network, so it opens anywhere (an air-gapped Atlas host
included).

Every string that comes from the trace (paths, file and function names, the header's
fields) is user data and goes through :func:`html.escape`. Element classes and
``data-`` attributes are stable so that tools and tests can read the page:
``section.device[data-device]``, ``svg.timeline[data-pool]``, ``g.peak[data-kind]``,
``svg.address-map``, ``ul.legend li.site[data-site]``.
"""

from __future__ import annotations

from ._plot_data import Band, DevicePlot, PlotData, band_colors, time_text
from ._plot_svg import address_map_svg, esc, map_note, timeline_svg
from ._text import size_text

__all__ = ["render_html"]


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;
  max-width:1000px;color:#222;padding:0 12px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:28px 0 4px}
h3{font-size:15px;margin:18px 0 4px}
dl.trace-info{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:0}
dl.trace-info dt{color:#666}dl.trace-info dd{margin:0;word-break:break-all}
section.device{border-top:1px solid #ddd;margin-top:18px}
p.figures,p.note{margin:4px 0;color:#444}
svg{display:block;margin:6px 0;font-size:11px;overflow:visible}
svg text{fill:#333}svg .axis line{stroke:#ddd}svg .frame{fill:none;stroke:#999}
svg .chart-title{font-size:12px;font-weight:600}
svg path.band:hover,svg rect.block:hover,svg rect.segment:hover,svg rect.many:hover{
  opacity:.7;stroke:#000;stroke-width:.5}
svg path.reserved{fill:none;stroke:#222;stroke-width:1.4}
svg g.peak line{stroke:#c00;stroke-dasharray:3 3}svg g.peak circle{fill:#c00}
svg g.peak.reserved line{stroke:#222}svg g.peak.reserved circle{fill:#222}
svg g.peak text{font-weight:600;paint-order:stroke;stroke:#fff;stroke-width:3px}
svg g.peak.in-use text{fill:#c00}
svg rect.hole{fill:#fff;stroke:#bbb;stroke-dasharray:2 2}
svg rect.container{fill:#e9eef5;stroke:#8a9bb0}
svg rect.block,svg rect.segment{stroke:#fff;stroke-width:.5}svg rect.slack{opacity:.35}
svg g.break text{fill:#777;font-style:italic;paint-order:stroke;stroke:#fff;stroke-width:6px}
svg g.break line{stroke:#aaa;stroke-dasharray:6 4}
ul.legend{list-style:none;padding:0;margin:4px 0;display:flex;flex-wrap:wrap;gap:4px 18px}
ul.legend li{display:flex;align-items:center;gap:6px}
span.swatch{display:inline-block;width:14px;height:10px;border:1px solid #0003}
span.swatch.line{height:0;border:0;border-top:2px solid #222}
span.bytes{color:#666}
"""


def render_html(data: PlotData) -> str:
    """The page for ``data``."""
    summary = data.summary
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>acl_mem trace plot: {esc(summary.path)}</title>",
             f"<style>{_CSS}</style></head><body>", _header(data)]
    parts.extend(_device_section(device, data.start, data.end) for device in data.devices)
    if not data.devices:
        parts.append('<p class="note">The trace holds no allocation.</p>')
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _header(data: PlotData) -> str:
    s, h = data.summary, data.summary.header
    rows = [("trace", s.path), ("backend", h.get("backend")), ("SoC", h.get("soc")),
            ("CANN", h.get("cann")), ("calls", f"{s.calls:,}"),
            ("duration", time_text(s.duration)), ("threads", s.threads),
            ("started", h.get("started")), ("program", " ".join(map(str, h.get("argv") or [])))]
    if not s.complete:
        rows.append(("complete", "no: the trace has no end line (the process was killed?)"))
    if data.left_out:
        rows.append(("not drawn", f"{data.left_out} more devices (acl-mem trace summary "
                     "lists them)"))
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc('-' if v is None else v)}</dd>" for k, v in rows)
    return (f'<header class="trace"><h1>Allocation trace</h1>'
            f'<dl class="trace-info">{items}</dl></header>')


def _device_section(device: DevicePlot, start: int, end: int) -> str:
    total = device.figures.total
    colors = band_colors(device.bands)
    attrs = (f'data-device="{esc(device.device)}" data-peak-in-use="{total.peak_in_use}" '
             f'data-peak-in-use-t="{total.peak_in_use_t}" '
             f'data-peak-reserved="{total.peak_reserved}" '
             f'data-peak-reserved-t="{total.peak_reserved_t}"')
    figures = (f"peak in use <b>{esc(size_text(total.peak_in_use))}</b> at "
               f"{esc(time_text(total.peak_in_use_t))}, peak reserved "
               f"<b>{esc(size_text(total.peak_reserved))}</b> at "
               f"{esc(time_text(total.peak_reserved_t))}")
    charts = [timeline_svg(t, device, colors, start, end, 240 if i == 0 else 160)
              for i, t in enumerate(device.timelines)]
    return "\n".join([
        f'<section class="device" id="device-{esc(device.device)}" {attrs}>',
        f"<h2>{esc(device.title)}</h2>", f'<p class="figures">{figures}</p>',
        charts[0], _legend(device.bands, colors), *charts[1:],
        "<h3>Address space at the in-use peak</h3>",
        map_note(device.address_map),
        address_map_svg(device, colors), _MAP_KEY, "</section>"])


_MAP_KEY = (
    '<ul class="legend map-key">'
    '<li><span class="swatch" style="background:#4e79a7"></span>in use (colour of its call '
    'site)</li><li><span class="swatch" style="background:#4e79a759"></span>padding and '
    'page rounding</li><li><span class="swatch" style="background:#e9eef5;border-color:'
    '#8a9bb0"></span>pool block or mapping (segments inside)</li><li><span class="swatch" '
    'style="background:#fff;border:1px dashed #bbb"></span>hole (hover for sizes)</li></ul>')


def _legend(bands: list[Band], colors: list[str]) -> str:
    items = [f'<li class="site" data-band="{i}" data-site="{esc(band.label)}">'
             f'<span class="swatch" style="background:{color}"></span>'
             f'<span class="label">{esc(band.label)}</span>'
             f'<span class="bytes">{esc(size_text(band.at_peak))} at the peak</span></li>'
             for i, (band, color) in enumerate(zip(bands, colors, strict=True)) if band.used]
    items.append('<li class="reserved-key"><span class="swatch line"></span>'
                 '<span class="label">reserved (runtime memory held)</span></li>')
    return f'<ul class="legend">{"".join(items)}</ul>'
