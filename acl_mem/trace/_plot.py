"""``acl-mem trace plot``: draw a trace summary as a self-contained HTML page or a PNG.

Per device (and the host's page-locked memory): in use over time stacked by call site
and reserved over it, for the device and each page pool, with both peaks marked; and
the address space at the in-use peak, blocks and holes. The figures come from
:mod:`._plot_data`; :mod:`._plot_html` and :mod:`._plot_png` draw them.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

from ._figures import TraceSummary
from ._open import file_kind
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
    with open_output(out) as handle:
        if render_png is not None:
            render_png(data, handle)
        else:
            handle.write(render_html(data).encode("utf-8"))
    return kind


def open_output(out: str | os.PathLike[str]) -> BinaryIO:
    """``out`` opened to be written afresh: a regular file (made if missing), or a FIFO
    that has a reader. Never waits to open: a FIFO nobody reads is refused (O_NONBLOCK)
    rather than hanging; and a symbolic link at ``out`` is refused (O_NOFOLLOW), not
    followed, so that one planted in a shared directory cannot point the plot at
    another file. OSError says which."""
    path = os.fspath(out)
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | \
        getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link: not followed (name its target)",
                          path) from None
        if exc.errno == errno.ENXIO:  # O_NONBLOCK's answer for a FIFO nobody reads
            raise OSError(errno.ENXIO, "a FIFO nobody reads", path) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            os.ftruncate(fd, 0)  # only now: nothing else is emptied before it is checked
        elif not stat.S_ISFIFO(mode):
            raise OSError(errno.EINVAL, f"{file_kind(mode)}: a plot is written to a "
                          "regular file or a FIFO", path)
        # A FIFO with a reader is written as a pipe is, waiting for its reader.
        os.set_blocking(fd, True)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise
