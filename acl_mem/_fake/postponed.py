"""Errors that wait for the end of an operation.

In "raise" mode the fake's hazards and memory-checker findings are exceptions, but a
free, a reset or a synchronisation must finish its effect first (or memory is lost and
work dropped). Inside :meth:`Postponable.held` the first finding is raised when the
block ends, naming how many more there were.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["Postponable"]


class Postponable:
    """Raises ``error`` for a finding at once, or, inside :meth:`held`, at its end."""

    def __init__(self, error: type[Exception]) -> None:
        self._error = error
        self._held: list[str] | None = None

    def raise_or_hold(self, text: str) -> None:
        if self._held is not None:
            self._held.append(text)
            return
        raise self._error(text)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        outer = self._held is None
        if outer:
            self._held = []
        try:
            yield
        finally:
            if outer:
                held, self._held = self._held, None
        if outer and held:
            raise self._error(held[0] if len(held) == 1 else
                              f"{held[0]} (and {len(held) - 1} more)")
