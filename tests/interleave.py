"""Putting another thread's action exactly inside a window of this thread's call, for
tests of races: the window is found by wrapping a call made inside it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["WINDOW", "Meanwhile"]

#: How long the first thread waits for the other inside its window: long enough for an
#: unprotected other thread to finish its close and remap there.
WINDOW = 0.3


class Meanwhile:
    """Runs ``action`` on another thread the first time the wrapped call is made, and
    waits up to WINDOW for it: where a lock keeps it out, it cannot finish there."""

    def __init__(self, action: Callable[[], None], *, after: bool = False) -> None:
        self.action = action
        #: Run it when the wrapped call returns, not before the call.
        self.after = after
        self.thread: threading.Thread | None = None
        self.failure: BaseException | None = None

    def wrap(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            first = self.thread is None
            if first and not self.after:
                self._meanwhile()
            result = call(*args, **kwargs)
            if first and self.after:
                self._meanwhile()
            return result

        return wrapped

    def _meanwhile(self) -> None:
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        self.thread.join(WINDOW)

    def _run(self) -> None:
        try:
            self.action()
        except BaseException as exc:  # reported by finish()
            self.failure = exc

    def finish(self) -> BaseException | None:
        assert self.thread is not None, "the window was never reached"
        self.thread.join(30)
        assert not self.thread.is_alive()
        return self.failure
