"""``acl-mem trace plot``: draw a trace summary as a self-contained HTML page or a PNG.

Per device (and the host's page-locked memory): in use over time stacked by call site
and reserved over it, for the device and each page pool, with both peaks marked; and
the address space at the in-use peak, blocks and holes. The figures come from
:mod:`._plot_data`; :mod:`._plot_html` and :mod:`._plot_png` draw them.
"""

from __future__ import annotations

import os

from ._figures import TraceSummary
from ._plot_data import build_plot_data
from ._plot_html import render_html
from ._plot_png import PlotDependencyError, png_renderer
from ._progress import Progress

__all__ = ["FORMATS", "PlotDependencyError", "write_plot"]

#: File suffixes write_plot understands, and the format each one writes.
FORMATS = {".html": "html", ".htm": "html", ".png": "png"}


def write_plot(summary: TraceSummary, out: str | os.PathLike[str], *, top_sites: int = 8,
               progress: Progress | None = None) -> str:
    """Write the plot of ``summary`` to ``out`` and return the format written: ``html``
    (one self-contained file) or ``png`` (needs matplotlib, ``pip install
    'acl_mem[plot]'``), chosen by the suffix of ``out``.

    ``top_sites``: the call sites holding most bytes at each device's in-use peak get a
    band of their own, the rest share ``other``. ``progress`` is advanced while the
    series are built, in proportion, up to its ``total``.

    Raises ValueError for another suffix, :class:`PlotDependencyError` (an ImportError)
    for a PNG without matplotlib, OSError when ``out`` cannot be written.
    """
    suffix = os.path.splitext(os.fspath(out))[1].lower()
    kind = FORMATS.get(suffix)
    if kind is None:
        known = ", ".join(sorted(FORMATS))
        raise ValueError(f"cannot plot to {os.fspath(out)!r}: the file name must end with "
                         f"one of {known} (got {suffix or 'no suffix'!r})")
    if top_sites < 0:
        raise ValueError(f"top_sites must be >= 0, got {top_sites}")
    # Before the work: a missing matplotlib should not cost a long trace's series first.
    render_png = png_renderer() if kind == "png" else None
    data = build_plot_data(summary, top_sites=top_sites, progress=progress)
    if render_png is not None:
        render_png(data, out)
    else:
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(render_html(data))
    return kind
