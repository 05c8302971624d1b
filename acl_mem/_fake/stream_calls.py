"""Streams and asynchronous copies of the fake backend (spec §3.4, §3.10, §3.11).

Mixed into :class:`~acl_mem._fake.backend.FakeBackend`. Checks run in the order of the
spec; queued work is executed only by a synchronisation (or by destroying its stream,
which waits). Memory of the pinned host pool and of the device is touched when the
work runs, so data read before synchronising is stale, as on hardware.
"""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING

from ..enums import MemcpyKind
from . import codes
from .hostmem import ffi
from .streams import Hazards, Op, Stream, StreamTable

if TYPE_CHECKING:
    from .checker import Checker
    from .profiles import Profile
    from .runtime import FakeRuntime

__all__ = ["StreamCalls"]

_H2H, _H2D, _D2H, _D2D, _DEFAULT, _BUF = 0, 1, 2, 3, 4, 5
# What the runtime accepts per (src, dst) location and what DEFAULT becomes (spec §3.10).
# Locations: "host" (pinned), "device", "unreg" (pageable host memory).
_FORCED = {("host", "device"): _H2D, ("device", "host"): _D2H, ("host", "host"): _H2H,
           ("device", "device"): _D2D}
_ACCEPTED = {
    ("unreg", "device"): ({_H2D, _D2D}, _H2D),
    ("device", "unreg"): ({_D2H, _D2D}, _D2H),
    ("host", "unreg"): ({_H2H, _H2D}, _H2H),
    ("unreg", "host"): ({_H2H, _D2H}, _H2H),
    ("unreg", "unreg"): ({_H2H, _H2D, _D2H, _D2D}, _H2H),
}


def corrected_kind(src: str, dst: str, kind: int) -> int | None:
    """The kind the runtime really uses, or None when the pair rejects ``kind`` (107000)."""
    if kind == _BUF:
        return kind
    if (src, dst) in _FORCED:
        return _FORCED[(src, dst)]
    accepted, default = _ACCEPTED[(src, dst)]
    if kind == _DEFAULT:
        return default
    return kind if kind in accepted else None


class StreamCalls:
    """aclrtCreateStream ... aclrtMemsetAsync for the fake."""

    streams: StreamTable
    hazards: Hazards
    profile: Profile
    runtime: FakeRuntime
    _lock: threading.RLock

    checker: Checker | None

    if TYPE_CHECKING:  # provided by FakeBackend
        def checker_verify(self, when: str = ...) -> list[tuple[str, str]]: ...
        def _check_bounds(self, address: int, count: int, what: str) -> None: ...
        def _locate(self, address: int, count: int) -> tuple[int, int | None, bool] | None: ...
        def aclrtMemcpy(self, dst: int, destMax: int, src: int, count: int,
                        kind: int) -> int: ...

    # -- stream lifetime (spec §3.4) -------------------------------------------------
    def aclrtCreateStream(self, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        with self._lock:
            context = self.runtime.current_context()
            if context is None:
                return codes.CONTEXT_NULL, 0
            if self.streams.count_on(*context) >= self.profile.max_streams:
                return codes.NO_STREAM_RESOURCE, 0
            return codes.SUCCESS, self.streams.create(*context).handle

    def aclrtDestroyStream(self, stream: int) -> int:
        if stream == 0:
            return codes.INVALID_PARAM
        with self._lock:
            found = self.streams.streams.get(stream)
            if found is None or not self._stream_alive(found):
                return codes.INVALID_HANDLE
            context = self.runtime.current_context()
            if context is not None and context != (found.device, found.generation):
                return codes.STREAM_CONTEXT
            if found.pending:
                self.hazards.report("destroy-with-pending-work",
                                    f"stream {stream:#x} destroyed with {len(found.pending)} "
                                    "queued operation(s); the runtime waits for them")
            self._drain(found)
            del self.streams.streams[stream]
            return codes.SUCCESS

    def aclrtSynchronizeStream(self, stream: int) -> int:
        with self._lock:
            found, rc = self._resolve_stream(stream)
            if found is None:
                return rc
            self._drain(found)
            self._after_synchronize()
            return codes.SUCCESS

    def _after_synchronize(self) -> None:
        if self.checker is not None:
            self.checker_verify("synchronize")

    def aclrtSynchronizeDevice(self) -> int:
        with self._lock:
            context = self.runtime.current_context()
            if context is None:
                return codes.CONTEXT_NULL
            for stream in self.streams.of_context(*context):
                self._drain(stream)
            self._after_synchronize()
            return codes.SUCCESS

    # -- asynchronous copies (spec §3.10, §3.11) -------------------------------------
    def aclrtMemcpyAsync(self, dst: int, destMax: int, src: int, count: int,
                         kind: int, stream: int) -> int:
        if kind > 5:
            return codes.INVALID_PARAM
        if count == 0:
            return codes.SUCCESS
        if dst == 0 or src == 0:
            return codes.INVALID_PARAM
        with self._lock:
            if stream != 0 and not self._handle_valid(stream):
                return codes.INVALID_HANDLE
            if count > destMax:
                return codes.RT_PARAM_INVALID
            source, target = self._locate(src, count), self._locate(dst, count)
            if source is None or target is None:
                return codes.RT_PARAM_INVALID
            real_kind = corrected_kind(_where(source), _where(target), kind)
            if real_kind is None:
                return codes.RT_PARAM_INVALID
            if real_kind == _H2H:
                return codes.FEATURE_NOT_SUPPORT
            if dst == src:
                return codes.SUCCESS
            found, rc = self._resolve_stream(stream)
            if found is None:
                return rc
            if "unreg" in (_where(source), _where(target)):
                # Pageable memory: the runtime synchronises the stream and copies now.
                self._drain(found)
                return self.aclrtMemcpy(dst, destMax, src, count, MemcpyKind.DEFAULT)
            self._enqueue(found, Op(
                f"aclrtMemcpyAsync({dst:#x} <- {src:#x}, {count})",
                lambda: self._run_copy(dst, src, count),
                writes=(dst, count), reads=(src, count)))
            return codes.SUCCESS

    def aclrtMemsetAsync(self, devPtr: int, maxCount: int, value: int,
                         count: int, stream: int) -> int:
        if count == 0:
            return codes.SUCCESS
        if devPtr == 0:
            return codes.INVALID_PARAM
        with self._lock:
            if stream != 0 and not self._handle_valid(stream):
                return codes.INVALID_HANDLE
            if count > maxCount:
                return codes.RT_PARAM_INVALID
            found, rc = self._resolve_stream(stream)
            if found is None:
                return rc
            target = self._locate(devPtr, count)
            if target is None or _where(target) == "unreg":
                return codes.RT_PARAM_INVALID
            self._enqueue(found, Op(
                f"aclrtMemsetAsync({devPtr:#x}, {value & 0xFF:#x}, {count})",
                lambda: self._run_memset(devPtr, value, count), writes=(devPtr, count)))
            return codes.SUCCESS

    # -- helpers -----------------------------------------------------------------------
    def _stream_alive(self, stream: Stream) -> bool:
        return self.runtime.references(stream.device) > 0 and \
            self.runtime.generation(stream.device) == stream.generation

    def _handle_valid(self, handle: int) -> bool:
        found = self.streams.streams.get(handle)
        return found is not None and self._stream_alive(found)

    def _resolve_stream(self, handle: int) -> tuple[Stream | None, int]:
        """The stream for ``handle`` (0 = default of the current context), or an error code."""
        if handle != 0 and not self._handle_valid(handle):
            return None, codes.INVALID_HANDLE
        context = self.runtime.current_context()
        if context is None:
            return None, codes.CONTEXT_NULL
        if handle == 0:
            return self.streams.default(*context), codes.SUCCESS
        found = self.streams.streams[handle]
        if (found.device, found.generation) != context:
            return None, codes.STREAM_CONTEXT
        return found, codes.SUCCESS

    def _enqueue(self, stream: Stream, op: Op) -> None:
        stream.pending.append(op)

    def _drain(self, stream: Stream) -> None:
        while stream.pending:
            stream.pending.popleft().run()

    def _run_copy(self, dst: int, src: int, count: int) -> None:
        target, source = self._locate(dst, count), self._locate(src, count)
        if target is None or source is None:
            self.hazards.report("queued-work-on-freed-memory",
                                f"a queued copy {src:#x} -> {dst:#x} ({count} bytes) ran "
                                "after its memory was freed; on hardware it corrupts whatever "
                                "lives there now")
            return
        if self.checker is not None:
            self._check_bounds(dst, count, "queued aclrtMemcpyAsync write")
            self._check_bounds(src, count, "queued aclrtMemcpyAsync read")
        ffi.memmove(ffi.cast("void *", target[0]), ffi.cast("void *", source[0]), count)

    def _run_memset(self, ptr: int, value: int, count: int) -> None:
        target = self._locate(ptr, count)
        if target is None:
            self.hazards.report("queued-work-on-freed-memory",
                                f"a queued memset of {ptr:#x} ({count} bytes) ran after its "
                                "memory was freed")
            return
        if self.checker is not None:
            self._check_bounds(ptr, count, "queued aclrtMemsetAsync")
        ctypes.memset(target[0], value & 0xFF, count)

    def check_pending(self, start: int, size: int, *, access: str, what: str) -> None:
        """Report a hazard if queued work races with ``what`` on ``[start, start+size)``.

        ``access`` is "free" (races with any queued access: the free calls do not wait,
        spec §3.6-§3.7), "write" (races with queued reads and writes) or "read" (races
        with queued writes).
        """
        end = start + size
        for op in self.streams.pending_ops():
            if op.writes_into(start, end) if access == "read" else op.touches(start, end):
                kind = "free-while-queued" if access == "free" else "access-before-synchronize"
                self.hazards.report(kind, f"{what} while queued {op.describe} is pending; "
                                    "synchronise the stream first")
                return


def _where(located: tuple[int, int | None, bool]) -> str:
    _, device, pinned = located
    if device is not None:
        return "device"
    return "host" if pinned else "unreg"
