"""Asynchronous exceptions injected at every line acl_mem executes.

Python delivers KeyboardInterrupt (or an exception raised by a signal handler) between
bytecodes, so any line of acl_mem may be the last one an operation runs. These helpers
count the lines an operation executes inside the package and re-run it with an
exception raised at the n-th one (``sys.settrace``), so a test can check, for every
``n``, that the operation either completed or had no effect.

``where`` (optional, every function) narrows the lines that count, for instance to the
files under test (:func:`in_files`) or away from points where CPython never delivers
a signal (:func:`is_unsignalled`).
"""

from __future__ import annotations

import dis
import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any

import acl_mem

__all__ = ["Injected", "count_lines", "in_files", "interrupted_runs", "is_unsignalled",
           "lock_is_free", "run_interrupted"]

_PACKAGE = os.path.dirname(os.path.abspath(acl_mem.__file__))
_CHECKS = os.path.join(_PACKAGE, "conformance")


class Injected(KeyboardInterrupt):
    """The exception the harness raises; a KeyboardInterrupt, so ``except Exception``
    in the code under test does not swallow it."""


def _in_package(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    return filename.startswith(_PACKAGE) and not filename.startswith(_CHECKS)


#: Which line events count; None counts every line of the package.
Where = Callable[[FrameType], bool] | None


def in_files(*paths: str) -> Callable[[FrameType], bool]:
    """A ``where`` that counts only lines of these source files."""
    wanted = frozenset(os.path.abspath(path) for path in paths)
    return lambda frame: frame.f_code.co_filename in wanted


_WITH_ENTRY = frozenset({"BEFORE_WITH", "SETUP_WITH", "BEFORE_ASYNC_WITH", "SETUP_ASYNC_WITH"})


@functools.cache
def _instructions(code: CodeType) -> tuple[dict[int, str], dict[int, int]]:
    """Opcode name by offset, and line -> offset of the with-block entry on that line."""
    names: dict[int, str] = {}
    entries: dict[int, int] = {}
    for instruction in dis.get_instructions(code):
        names[instruction.offset] = instruction.opname
        if instruction.opname in _WITH_ENTRY:
            positions = getattr(instruction, "positions", None)
            line = positions.lineno if positions is not None else None
            if line is not None:
                entries[line] = instruction.offset
    return names, entries


def is_unsignalled(frame: FrameType) -> bool:
    """True at line events where CPython never delivers a signal, yet an exception
    raised there by the tracer escapes the surrounding handlers.

    Two such points: the line of a ``try:`` (a NOP, which no exception table covers,
    so the exception skips the ``except`` and any enclosing ``with``), and the
    ``with`` line reported again when its block ends normally (before ``__exit__`` is
    called, outside the block's handler: a lock would stay held). Asynchronous
    exceptions are raised only where the interpreter checks for them (function entry,
    backward jumps, after calls), and the last such check before either point is
    still inside the handler's range.
    """
    names, entries = _instructions(frame.f_code)
    if names.get(frame.f_lasti) == "NOP":
        return True
    offset = entries.get(frame.f_lineno)
    return offset is not None and frame.f_lasti > offset


def _traced(operation: Callable[[], object], on_line: Callable[[], None],
            where: Where = None) -> None:
    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and (where is None or where(frame)):
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


def count_lines(operation: Callable[[], object], where: Where = None) -> int:
    """Lines of acl_mem that ``operation`` executes (run once, to completion)."""
    seen = 0

    def on_line() -> None:
        nonlocal seen
        seen += 1

    _traced(operation, on_line, where)
    return seen


def run_interrupted(operation: Callable[[], object], n: int, where: Where = None) -> bool:
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
        _traced(operation, on_line, where)
    except Injected:
        return True
    return False


def interrupted_runs(setup: Callable[[], Callable[[], object]], limit: int = 2000,
                     where: Where = None) -> Iterator[int]:
    """For n = 1, 2, ...: build a fresh operation with ``setup()``, interrupt it at line
    ``n`` and yield ``n``; stops once the operation completes without interruption."""
    for n in range(1, limit + 1):
        operation = setup()
        delivered = run_interrupted(operation, n, where)
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
