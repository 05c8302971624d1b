"""Python call sites for the fake's reports: the stack of the user's code that made an
allocation, kept by the binding while the memory checker is on (the library knows only
the C caller, which for a Python program is the binding itself)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from types import CodeType

__all__ = ["Stack", "allocation_stack", "user_stacklevel"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The shipped conformance checks are user code as far as warnings and stacks are concerned.
_CHECKS = os.path.join(_PACKAGE, "conformance", "checks")


def user_stacklevel() -> int:
    """``warnings.warn`` stacklevel of the first caller outside acl_mem, for the function
    that calls this: a warning must point at the user's line, not at acl_mem's."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        if _library_frame(frame.f_code.co_filename):
            frame = frame.f_back  # type: ignore[assignment]
            level += 1
            continue
        break
    return level


def _library_frame(filename: str) -> bool:
    library = _LIBRARY_FILES.get(filename)
    if library is None:
        library = filename.startswith(_PACKAGE) and not filename.startswith(_CHECKS)
        _LIBRARY_FILES[filename] = library
    return library


#: Frames kept per allocation stack, and frames walked at most to find them.
STACK_DEPTH = 8
_STACK_WALK = 64
#: Whether a source file is acl_mem's own (the same few files come up at every capture).
_LIBRARY_FILES: dict[str, bool] = {}


class Stack:
    """Where an allocation was made: (code, line) pairs, formatted only when shown.

    Iterating gives traceback-style lines, outermost first, so ``"".join(stack)`` reads
    like a traceback.
    """

    __slots__ = ("_frames",)

    def __init__(self, frames: tuple[tuple[CodeType, int], ...]) -> None:
        self._frames = frames

    def __iter__(self) -> Iterator[str]:
        for code, line in reversed(self._frames):
            yield f'  File "{code.co_filename}", line {line}, in {code.co_name}\n'

    def __len__(self) -> int:
        return len(self._frames)


def allocation_stack() -> Stack:
    """The caller's Python stack without acl_mem's own frames (innermost 8 kept).

    Bounded: at most 64 frames are looked at, whatever the depth of the stack; nothing
    is formatted (or read from source files) until the stack is shown.
    """
    frames: list[tuple[CodeType, int]] = []
    frame = sys._getframe(1)
    walked = 0
    library_files = _LIBRARY_FILES
    while frame is not None and len(frames) < STACK_DEPTH and walked < _STACK_WALK:
        code = frame.f_code
        library = library_files.get(code.co_filename)
        if library is None:
            library = _library_frame(code.co_filename)
        if not library:
            frames.append((code, frame.f_lineno))
        frame = frame.f_back  # type: ignore[assignment]
        walked += 1
    return Stack(tuple(frames))
