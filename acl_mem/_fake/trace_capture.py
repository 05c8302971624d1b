"""The fake library's capture of traced calls (``acl_mem_fake_trace_capture``): while a
recording of this process is on, the library keeps each traced call's record as a few
numbers, and the recorder takes them in bulk and hands them to its writer unread
(acl_mem/trace/_tap.py). A call then costs its program no Python at all for the record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["TraceCapture"]


class TraceCapture:
    """One library's capture (the library has one, so each library has one of these)."""

    def __init__(self, ffi: Any, lib: Any, path: str) -> None:
        self._ffi = ffi
        self._lib = lib
        #: The library (its writer formats the records with it: acl_mem_fake_trace_lines).
        self.path = path
        # Read before each take: the common "nothing waiting" answer costs no call.
        self._waiting = ffi.addressof(lib, "acl_mem_fake_captured_bytes")
        self._lost = ffi.new("unsigned long *")

    def start(self) -> None:
        self._lib.acl_mem_fake_trace_capture(1)

    def stop(self) -> None:
        """Capture off; what was not taken is dropped."""
        self._lib.acl_mem_fake_trace_capture(0)

    def waiting(self) -> int:
        """Bytes of records not taken yet."""
        return int(self._waiting[0])

    def take(self) -> tuple[bytes, int]:
        """The records waiting, oldest first (whole records), and how many were dropped
        since the last take. One taker at a time (the tap's drain lock)."""
        size = int(self._waiting[0])
        buffer = self._ffi.new("char[]", max(size, 1))
        got = int(self._lib.acl_mem_fake_trace_take(buffer, size, self._lost))
        return self._ffi.buffer(buffer, got)[:], int(self._lost[0])

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Calls this thread makes inside are not captured (a recorder's own queries)."""
        try:
            # Inside the try: a Ctrl-C right after it must not leave the thread quiet.
            self._lib.acl_mem_fake_trace_quiet(1)
            yield
        finally:
            self._lib.acl_mem_fake_trace_quiet(0)
