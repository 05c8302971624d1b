"""Streams and asynchronous copies of the fake backend (docs/runtime-model.md §3.4, §3.10, §3.11).

The streams part of :class:`~acl_mem._fake.backend.FakeBackend`: stream lifetime,
synchronisation, aclrtMemcpyAsync and aclrtMemsetAsync over the state's stream table
(``streams.py``). It resolves addresses through the address map, reports hazards and
bound crossings through the diagnostics part, and hands pageable copies to the copies
part. Checks run in the order of the runtime model; queued work is executed only by a
synchronisation (or by destroying its stream, which waits). Memory of the pinned host
pool and of the device is touched when the work runs, so data read before
synchronising is stale, as on hardware.
"""

from __future__ import annotations

import contextlib
import ctypes

from ..enums import MemcpyKind
from . import codes
from .addresses import AddressMap, Located
from .copies import Copies, acl_copy_checks
from .diagnostics import Diagnostics
from .state import EngineState
from .streams import Marker, Op, Stream

__all__ = ["StreamCalls", "corrected_kind"]

_H2H, _H2D, _D2H, _D2D, _DEFAULT, _BUF = 0, 1, 2, 3, 4, 5
# What the runtime accepts per (src, dst) location and what DEFAULT becomes (docs/runtime-model.md
# §3.10). Locations: "host" (pinned), "device", "unreg" (pageable host memory).
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

    def __init__(self, state: EngineState, addresses: AddressMap, diagnostics: Diagnostics,
                 copies: Copies) -> None:
        self._state = state
        self._addresses = addresses
        self._diagnostics = diagnostics
        self._copies = copies

    # -- stream lifetime (§3.4) --------------------------------------------------------------------
    def aclrtCreateStream(self, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        with self._state.lock:
            context = self._state.runtime.current_context()
            if context is None:
                return codes.CONTEXT_NULL, 0
            if self._state.streams.count_on(context) >= self._state.profile.max_streams:
                return codes.NO_STREAM_RESOURCE, 0
            return codes.SUCCESS, self._state.streams.create(context).handle

    def aclrtDestroyStream(self, stream: int) -> int:
        return self._destroy(stream, force=False)

    def aclrtDestroyStreamForce(self, stream: int) -> int:
        """Like aclrtDestroyStream, but queued work is recycled instead of waited for: it
        never runs, and events recorded behind it complete (docs/runtime-model.md §3.4)."""
        return self._destroy(stream, force=True)

    def _destroy(self, stream: int, force: bool) -> int:
        if stream == 0:
            return codes.INVALID_PARAM
        with self._state.lock:
            found = self._state.streams.streams.get(stream)
            if found is None or not self._stream_alive(found):
                return codes.INVALID_HANDLE
            context = self._state.runtime.current_context()
            if context is not None and context is not found.context:
                return codes.STREAM_CONTEXT
            if force:
                # Forgotten first: an interrupt after it leaves no stream holding work
                # that is no longer indexed.
                self._state.streams.forget(found)
                self._state.streams.discard(found)
                return codes.SUCCESS
            with self._state.hazards.held(), self.checker_held():
                work = sum(isinstance(op, Op) for op in found.pending)
                if work:
                    self._state.hazards.report("destroy-with-pending-work",
                                               f"stream {stream:#x} destroyed with "
                                               f"{work} queued operation(s); "
                                               "the runtime waits for them")
                self._drain(found)
                self._state.streams.forget(found)
            return codes.SUCCESS

    def aclrtSynchronizeStream(self, stream: int) -> int:
        with self._state.lock:
            found, rc = self.resolve_stream(stream)
            if found is None:
                return rc
            with self._state.hazards.held(), self.checker_held():
                self._drain(found)
            self._after_synchronize()
            return codes.SUCCESS

    def _after_synchronize(self) -> None:
        if self._state.checker is not None:
            self._diagnostics.checker_verify("synchronize")

    def aclrtSynchronizeDevice(self) -> int:
        with self._state.lock:
            context = self._state.runtime.current_context()
            if context is None:
                return codes.CONTEXT_NULL
            with self._state.hazards.held(), self.checker_held():
                for stream in self._state.streams.of_context(context):
                    self._drain(stream)
            self._after_synchronize()
            return codes.SUCCESS

    # -- asynchronous copies (§3.10, §3.11) --------------------------------------------------------
    def aclrtMemcpyAsync(self, dst: int, destMax: int, src: int, count: int,
                         kind: int, stream: int) -> int:
        cann = self._state.cann
        rc = acl_copy_checks(cann.count_checked_first, dst, src, count, kind)
        if rc is not None:
            return rc
        with self._state.lock:
            if cann.stream_handle_checked and stream != 0 and not self.handle_valid(stream):
                return codes.INVALID_HANDLE
            if count == 0 or count > destMax:
                return codes.RT_PARAM_INVALID
            if cann.async_context_first and self._state.runtime.current_context() is None:
                return codes.CONTEXT_NULL
            resolve = self._addresses.resolve
            source, target = resolve(src, count), resolve(dst, count)
            if source is None or target is None:
                return codes.RT_PARAM_INVALID
            if source[1] is not None and target[1] is not None and source[1] != target[1]:
                return codes.RT_PARAM_INVALID  # two devices: as the synchronous copy
            real_kind = corrected_kind(_where(source), _where(target), kind)
            if real_kind is None:
                return codes.RT_PARAM_INVALID
            if not cann.async_context_first and self._state.runtime.current_context() is None:
                return codes.CONTEXT_NULL
            if real_kind == _H2H and self._state.profile.run_mode == 1:
                return codes.FEATURE_NOT_SUPPORT  # RC mode runs host kinds as D2D
            if dst == src:
                return codes.SUCCESS
            found, rc = self.resolve_stream(stream)
            if found is None:
                return rc
            if "unreg" in (_where(source), _where(target)):
                # Pageable memory: the runtime synchronises the stream and copies now.
                self._drain(found)
                return self._copies.aclrtMemcpy(dst, destMax, src, count, MemcpyKind.DEFAULT)
            self._enqueue(found, Op(dst, target[0], src, source[0], count, None,
                                    target[3] + source[3]))
            return codes.SUCCESS

    def aclrtMemsetAsync(self, devPtr: int, maxCount: int, value: int,
                         count: int, stream: int) -> int:
        cann = self._state.cann
        if count == 0 and cann.zero_count_succeeds:
            return codes.SUCCESS
        if devPtr == 0:
            return codes.INVALID_PARAM
        with self._state.lock:
            if cann.stream_handle_checked and stream != 0 and not self.handle_valid(stream):
                return codes.INVALID_HANDLE
            if count == 0 or count > maxCount:
                return codes.RT_PARAM_INVALID
            found, rc = self.resolve_stream(stream)
            if found is None:
                return rc
            target = self._addresses.resolve(devPtr, count)
            if target is None or _where(target) == "unreg":
                return codes.RT_PARAM_INVALID
            self._enqueue(found, Op(devPtr, target[0], 0, 0, count, value & 0xFF, target[3]))
            return codes.SUCCESS

    # -- helpers -----------------------------------------------------------------------------------
    def checker_held(self) -> contextlib.AbstractContextManager[None]:
        """Checker findings of queued work raise after every op of the drain ran."""
        checker = self._state.checker
        return checker.held() if checker is not None else contextlib.nullcontext()

    def _stream_alive(self, stream: Stream) -> bool:
        return stream.context.alive

    def handle_valid(self, handle: int) -> bool:
        found = self._state.streams.streams.get(handle)
        return found is not None and self._stream_alive(found)

    def resolve_stream(self, handle: int) -> tuple[Stream | None, int]:
        """The stream for ``handle`` (0 = default of the current context), or an error code.

        From 9.1.0 the C API validates the handle before anything else (107017); older
        releases look the context up first (107002) and only then use the handle, which the
        fake still checks (docs/fidelity.md row 66)."""
        checked_first = self._state.cann.stream_handle_checked
        if checked_first and handle != 0 and not self.handle_valid(handle):
            return None, codes.INVALID_HANDLE
        context = self._state.runtime.current_context()
        if context is None:
            return None, codes.CONTEXT_NULL
        if not checked_first and handle != 0 and not self.handle_valid(handle):
            return None, codes.INVALID_HANDLE
        if handle == 0:
            return self._state.streams.default(context), codes.SUCCESS
        found = self._state.streams.streams[handle]
        if found.context is not context:
            return None, codes.STREAM_CONTEXT
        return found, codes.SUCCESS

    def _enqueue(self, stream: Stream, op: Op) -> None:
        # Index first: an op the index knows but no stream holds is dropped by remove().
        self._state.streams.pending.add(op)
        try:
            stream.pending.append(op)
        except BaseException:
            self._state.streams.pending.remove(op)
            raise

    def _drain(self, stream: Stream, until: Marker | None = None) -> None:
        """Run the stream's queued work in order, all of it or up to ``until``. A wait runs
        the other stream's work up to the record point first (docs/runtime-model.md §3.15);
        waits only name record points queued before them, so this always ends."""
        pending = stream.pending
        index = self._state.streams.pending
        while pending:
            op = pending[0]
            if isinstance(op, Marker):
                if op.waits_for is not None:
                    self.reach(op.waits_for)
                # Finished before it leaves the queue: finishing is idempotent.
                op.finish()
                pending.popleft()
                if op is until:
                    return
                continue
            # Unindexed before it leaves the queue: an interrupt in between leaves it at
            # the head, and the next drain removes it again (idempotent) and runs it.
            index.remove(op)
            pending.popleft()
            self._run(op)

    def reach(self, marker: Marker) -> None:
        """Run ``marker``'s stream up to it, unless it ran or its stream is gone."""
        if not marker.ran and marker.stream.alive:
            self._drain(marker.stream, until=marker)
        marker.finish()  # its stream ended without it: nothing waits for ever

    def _run(self, op: Op) -> None:
        """Run one queued op, unless memory it touches was freed since it was queued."""
        for target in op.targets:
            if not self._addresses.still_live(target):
                self._state.hazards.report(
                    "queued-work-on-freed-memory",
                    f"a queued {op.describe()} ran after its memory was freed; on hardware "
                    "it corrupts whatever lives there now, here it was skipped")
                return
        checking = self._state.checker is not None
        if op.value is None:
            if checking:
                self._diagnostics.check_bounds(op.dst, op.count, "queued aclrtMemcpyAsync write")
                self._diagnostics.check_bounds(op.src, op.count, "queued aclrtMemcpyAsync read")
            ctypes.memmove(op.dst_host, op.src_host, op.count)
        else:
            if checking:
                self._diagnostics.check_bounds(op.dst, op.count, "queued aclrtMemsetAsync")
            ctypes.memset(op.dst_host, op.value, op.count)


def _where(located: Located) -> str:
    device, pinned = located[1], located[2]
    if device is not None:
        return "device"
    return "host" if pinned else "unreg"
