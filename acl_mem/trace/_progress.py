"""Progress of long trace commands on a terminal: one line on standard error, redrawn at
most five times a second, and only when standard error is a terminal (a pipe or a file
gets nothing, so the output of scripts and tests stays clean)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]

_INTERVAL = 0.2


class Progress:
    """``with Progress("replay", total) as p: ... p.update(done)``.

    ``stream`` defaults to standard error; ``enabled`` (default: whether the stream is a
    terminal) forces it on or off. Updates are cheap when nothing is drawn: a counter
    check, then a clock read every 4096 updates at most.
    """

    def __init__(self, label: str, total: int, *, unit: str = "calls",
                 stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.label = label
        self.total = max(0, int(total))
        self.unit = unit
        self.stream = sys.stderr if stream is None else stream
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty()) if callable(isatty) else False
        self.enabled = enabled
        self._next_check = 0
        self._last_draw = 0.0
        self._started = time.monotonic()
        self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, done: int, *, label: str | None = None) -> None:
        """Report that ``done`` of ``total`` are finished (drawn when it is time)."""
        if not self.enabled or done < self._next_check:
            return
        self._next_check = done + 4096
        now = time.monotonic()
        if now - self._last_draw < _INTERVAL and done < self.total:
            return
        if label is not None:
            self.label = label
        self._last_draw = now
        self._draw(done, now)

    def _draw(self, done: int, now: float) -> None:
        elapsed = max(now - self._started, 1e-9)
        rate = done / elapsed
        share = f" ({100 * done / self.total:.0f}%)" if self.total else ""
        left = ""
        if self.total and 0 < done < self.total and rate > 0:
            left = f", {(self.total - done) / rate:.0f} s left"
        text = f"\r{self.label}: {done:,}/{self.total:,} {self.unit}{share}, " \
               f"{rate:,.0f} {self.unit}/s{left}"
        try:
            self.stream.write(text.ljust(79))
            self.stream.flush()
        except (OSError, ValueError):
            self.enabled = False
            return
        self._drawn = True

    def close(self) -> None:
        """Clear the line (when something was drawn)."""
        if self._drawn:
            try:
                self.stream.write("\r" + " " * 79 + "\r")
                self.stream.flush()
            except (OSError, ValueError):
                pass
            self._drawn = False
