"""Asynchronous exceptions injected at every line acl_mem executes.

Python delivers KeyboardInterrupt (or an exception raised by a signal handler) between
bytecodes, so any line of acl_mem may be the last one an operation runs. These helpers
count the lines an operation executes inside the package and re-run it with an
exception raised at the n-th one (``sys.settrace``), so a test can check, for every
``n``, that the operation either completed or had no effect.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import acl_mem

__all__ = ["Injected", "count_lines", "interrupted_runs", "lock_is_free", "run_interrupted"]

_PACKAGE = os.path.dirname(os.path.abspath(acl_mem.__file__))
_CHECKS = os.path.join(_PACKAGE, "conformance")


class Injected(KeyboardInterrupt):
    """The exception the harness raises; a KeyboardInterrupt, so ``except Exception``
    in the code under test does not swallow it."""


def _in_package(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    return filename.startswith(_PACKAGE) and not filename.startswith(_CHECKS)


def _traced(operation: Callable[[], object], on_line: Callable[[], None]) -> None:
    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            on_line()
        return local

    def global_(frame: FrameType, event: str, arg: Any) -> Any:
        return local if event == "call" and _in_package(frame) else None

    previous = sys.gettrace()
    sys.settrace(global_)
    try:
        operation()
    finally:
        sys.settrace(previous)


def count_lines(operation: Callable[[], object]) -> int:
    """Lines of acl_mem that ``operation`` executes (run once, to completion)."""
    seen = 0

    def on_line() -> None:
        nonlocal seen
        seen += 1

    _traced(operation, on_line)
    return seen


def run_interrupted(operation: Callable[[], object], n: int) -> bool:
    """Run ``operation`` with :class:`Injected` raised at its ``n``-th acl_mem line.

    True when the exception was delivered (and swallowed here), False when the
    operation finished first.
    """
    seen = 0

    def on_line() -> None:
        nonlocal seen
        seen += 1
        if seen == n:
            raise Injected(f"injected at line event {n}")

    try:
        _traced(operation, on_line)
    except Injected:
        return True
    return False


def interrupted_runs(setup: Callable[[], Callable[[], object]], limit: int = 2000,
                     ) -> Iterator[int]:
    """For n = 1, 2, ...: build a fresh operation with ``setup()``, interrupt it at line
    ``n`` and yield ``n``; stops once the operation completes without interruption."""
    for n in range(1, limit + 1):
        operation = setup()
        delivered = run_interrupted(operation, n)
        yield n
        if not delivered:
            return
    raise AssertionError(f"operation still running after {limit} injected interrupts")


def lock_is_free(lock: Any) -> bool:
    """True when another thread can take ``lock`` now (nothing left it held)."""
    got: list[bool] = []

    def probe() -> None:
        acquired = lock.acquire(timeout=1)
        got.append(acquired)
        if acquired:
            lock.release()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return got == [True]
