"""Errors that wait for the end of an operation.

In "raise" mode the fake's hazards and memory-checker findings are exceptions, but a
free, a reset or a synchronisation must finish its effect first (or memory is lost and
work dropped). Inside :meth:`Postponable.held` the first finding is raised when the
block ends, naming how many more there were.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

__all__ = ["Postponable", "user_stacklevel"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The shipped conformance checks are user code as far as warnings are concerned.
_CHECKS = os.path.join(_PACKAGE, "conformance", "checks")


def user_stacklevel() -> int:
    """``warnings.warn`` stacklevel of the first caller outside acl_mem, for the function
    that calls this: a warning must point at the user's line, not at acl_mem's."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE) or filename.startswith(_CHECKS):
            break
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


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
