"""Events of the fake backend (docs/runtime-model.md §3.15).

An event is recorded into a stream's queue as a :class:`~.streams.Marker`; the record
completes when the stream's work reaches it. aclrtStreamWaitEvent queues a marker that
waits for the event's latest record point, so a synchronisation that reaches the wait
first runs the recording stream up to that point: cross-stream order holds as on the
device. Checks run in the order of the runtime model: NULL arguments (100000), handles
(107017), flags, the current context (107002), the stream's context (107003).

The host polls with aclrtQueryEventStatus: a record that has queued work before it
reports NOT_READY once and the device runs that work meanwhile, so the next query
reports COMPLETE (a polling loop ends; code that assumes a record completes at once
sees NOT_READY, as on the device).
"""

from __future__ import annotations

import struct

from . import codes
from .state import EngineState
from .stream_calls import StreamCalls
from .streams import Marker, Stream

__all__ = ["Event", "EventCalls"]

#: Where the fake's event handles start: apart from streams, contexts and memory.
_EVENT_BASE = 0x5B00_0000_0000
_EVENT_STEP = 0x40

SYNC, STREAM_MARK, DDSYNC, TIME_LINE = 0x1, 0x2, 0x4, 0x8
DEVICE_USE_ONLY, EXTERNAL, IPC = 0x10, 0x20, 0x40
#: aclrtCreateEvent's flags: DDSYNC | TIME_LINE | STREAM_MARK.
DEFAULT_FLAGS = DDSYNC | TIME_LINE | STREAM_MARK
#: A stream can wait for (or reset) an event only with one of these bits.
_WAITABLE = SYNC | DDSYNC | EXTERNAL | IPC
#: aclrtQueryEventStatus values (aclrtEventRecordedStatus).
NOT_READY, COMPLETE = 0, 1


class Event:
    """One event. ``record`` is the latest record point (None: never recorded, or reset
    since); ``new_mode`` marks aclrtCreateEventExWithFlag events."""

    __slots__ = ("device", "flags", "handle", "new_mode", "polled", "record")

    def __init__(self, handle: int, flags: int, device: int, new_mode: bool) -> None:
        self.handle = handle
        self.flags = flags
        self.device = device
        self.new_mode = new_mode
        self.record: Marker | None = None
        #: The record point a query already reported NOT_READY for.
        self.polled: Marker | None = None


class EventCalls:
    """aclrtCreateEvent ... aclrtEventElapsedTime for the fake."""

    def __init__(self, state: EngineState, streams: StreamCalls) -> None:
        self._state = state
        self._streams = streams
        self._next = _EVENT_BASE
        #: Live events by handle; a destroyed handle is gone (107017, never reused).
        self.events: dict[int, Event] = {}

    def after_fork(self) -> None:
        self.events = {}

    # -- creation and destruction ------------------------------------------------------------------
    def aclrtCreateEvent(self, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        return self._create(DEFAULT_FLAGS, new_mode=False)

    def aclrtCreateEventWithFlag(self, flag: int, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        if flag & 0x3F == 0 or flag > 0x3F:
            return codes.RT_PARAM_INVALID, 0  # 0 and ACL_EVENT_IPC included
        if _combined(flag, DEVICE_USE_ONLY | EXTERNAL):
            return codes.RT_PARAM_INVALID, 0
        return self._create(flag, new_mode=False)

    def aclrtCreateEventExWithFlag(self, flag: int, null_outputs: int = 0) -> tuple[int, int]:
        if null_outputs & 1:
            return codes.INVALID_PARAM, 0
        if _combined(flag, DEVICE_USE_ONLY | EXTERNAL | IPC):
            return codes.RT_PARAM_INVALID, 0
        if flag & 0x4F == 0 or flag > 0x4F:
            return codes.RT_PARAM_INVALID, 0
        return self._create(flag, new_mode=True)

    def _create(self, flags: int, *, new_mode: bool) -> tuple[int, int]:
        with self._state.lock:
            context = self._state.runtime.current_context()
            if context is None:
                return codes.CONTEXT_NULL, 0
            self._next += _EVENT_STEP
            event = Event(self._next, flags, context.device, new_mode)
            self.events[event.handle] = event
            return codes.SUCCESS, event.handle

    def aclrtDestroyEvent(self, event: int) -> int:
        if event == 0:
            return codes.INVALID_PARAM
        with self._state.lock:
            # Queued work that names the event keeps its own reference: it still runs.
            if self.events.pop(event, None) is None:
                return codes.INVALID_HANDLE
            return codes.SUCCESS

    # -- queued: record, wait, reset ---------------------------------------------------------------
    def aclrtRecordEvent(self, event: int, stream: int) -> int:
        if event == 0:
            return codes.INVALID_PARAM
        with self._state.lock:
            found, target, rc = self._event_on_stream(event, stream)
            if rc:
                return rc
            assert found is not None and target is not None
            found.record = self._queue(target, Marker("record", target))
            return codes.SUCCESS

    def aclrtStreamWaitEvent(self, stream: int, event: int) -> int:
        if event == 0:
            return codes.INVALID_PARAM
        with self._state.lock:
            found, target, rc = self._event_on_stream(event, stream, waitable=True)
            if rc:
                return rc
            assert found is not None and target is not None
            record = found.record
            if record is None:
                # Never recorded: aclrtCreateEvent's events refuse; the others do not wait
                # (an ACL_EVENT_SYNC event waits on the device for a later record; the fake
                # does not, docs/fidelity.md).
                old_default = not found.new_mode and found.flags == DEFAULT_FLAGS
                return codes.RT_PARAM_INVALID if old_default else codes.SUCCESS
            if not record.ran:
                self._queue(target, Marker("wait", target, waits_for=record))
            return codes.SUCCESS

    def aclrtResetEvent(self, event: int, stream: int) -> int:
        if event == 0:
            return codes.INVALID_PARAM
        with self._state.lock:
            found, target, rc = self._event_on_stream(event, stream, waitable=True,
                                                      refused=IPC)
            if rc:
                return rc
            assert found is not None and target is not None
            if found.new_mode:
                return codes.FEATURE_NOT_SUPPORT
            record = found.record

            def forget_record(_: Marker) -> None:
                if found.record is record:
                    found.record = None

            self._queue(target, Marker("reset", target, on_run=forget_record))
            return codes.SUCCESS

    # -- host side: synchronise, query, time -------------------------------------------------------
    def aclrtSynchronizeEvent(self, event: int) -> int:
        if event == 0:
            return codes.INVALID_PARAM
        with self._state.lock:
            found = self.events.get(event)
            if found is None:
                return codes.INVALID_HANDLE
            if found.flags & EXTERNAL:
                return codes.FEATURE_NOT_SUPPORT
            if found.record is not None:
                with self._state.hazards.held(), self._streams.checker_held():
                    self._streams.reach(found.record)
            return codes.SUCCESS

    def aclrtQueryEventStatus(self, event: int, null_outputs: int = 0) -> tuple[int, int]:
        if event == 0 or null_outputs & 1:
            return codes.INVALID_PARAM, 0
        with self._state.lock:
            found = self.events.get(event)
            if found is None:
                return codes.INVALID_HANDLE, 0
            if found.flags & EXTERNAL:
                return codes.FEATURE_NOT_SUPPORT, 0
            if found.record is None:
                return codes.SUCCESS, COMPLETE if found.new_mode else NOT_READY
            return codes.SUCCESS, COMPLETE if self._poll(found) else NOT_READY

    def aclrtQueryEvent(self, event: int, null_outputs: int = 0) -> tuple[int, int]:
        """The deprecated query: aclrtEventStatus values, COMPLETE = 0, NOT_READY = 1."""
        if event == 0 or null_outputs & 1:
            return codes.INVALID_PARAM, 0
        with self._state.lock:
            found = self.events.get(event)
            if found is None:
                return codes.INVALID_HANDLE, 0
            if found.new_mode or found.flags & (EXTERNAL | IPC):
                return codes.FEATURE_NOT_SUPPORT, 0
            complete = found.record is None or self._poll(found)
            return codes.SUCCESS, 0 if complete else 1

    def aclrtEventElapsedTime(self, startEvent: int, endEvent: int,
                              null_outputs: int = 0) -> tuple[int, float]:
        if null_outputs & 1 or startEvent == 0 or endEvent == 0:
            return codes.INVALID_PARAM, 0.0
        with self._state.lock:
            start, end = self.events.get(startEvent), self.events.get(endEvent)
            if start is None or end is None:
                return codes.INVALID_HANDLE, 0.0
            if (start.flags | end.flags) & (EXTERNAL | IPC):
                return codes.FEATURE_NOT_SUPPORT, 0.0
            if start.record is None or end.record is None:
                return codes.RT_INTERNAL_ERROR, 0.0
            if not start.record.ran or not end.record.ran:
                return codes.EVENT_TIMESTAMP_INVALID, 0.0
            if not start.flags & TIME_LINE or not end.flags & TIME_LINE:
                return codes.SUCCESS, 0.0  # no timestamps taken (docs/fidelity.md)
            ms = (end.record.time - start.record.time) * 1000.0
            # The C API returns a float: the value both backends agree on.
            return codes.SUCCESS, struct.unpack("f", struct.pack("f", ms))[0]

    # -- helpers -----------------------------------------------------------------------------------
    def _event_on_stream(self, event: int, stream: int, *, waitable: bool = False,
                         refused: int = 0) -> tuple[Event | None, Stream | None, int]:
        """The checks record, wait and reset share, in the runtime's order: the handles
        (event first, then stream; 107017), DEVICE_USE_ONLY (107000), an event the call
        cannot take (207000: one with a ``refused`` flag, or with none of the waitable bits
        when ``waitable``), then the context and the stream's context (107002, 107003)."""
        found = self.events.get(event)
        if found is None:
            return None, None, codes.INVALID_HANDLE
        if self._state.cann.stream_handle_checked and stream != 0 and \
                not self._streams.handle_valid(stream):
            return None, None, codes.INVALID_HANDLE
        if found.flags == DEVICE_USE_ONLY:
            return None, None, codes.RT_PARAM_INVALID
        if found.flags & refused or (waitable and not found.flags & _WAITABLE):
            return None, None, codes.FEATURE_NOT_SUPPORT
        target, rc = self._streams.resolve_stream(stream)
        return found, target, rc

    def _queue(self, stream: Stream, marker: Marker) -> Marker:
        stream.pending.append(marker)
        return marker

    def _poll(self, event: Event) -> bool:
        """Whether the latest record completed; the first poll of a pending record says
        no and lets the device run up to it."""
        record = event.record
        assert record is not None
        if record.ran:
            return True
        if event.polled is not record:
            event.polled = record
            with self._state.hazards.held(), self._streams.checker_held():
                self._streams.reach(record)
            return False
        return True


def _combined(flag: int, alone: int) -> bool:
    """Whether ``flag`` holds one of the ``alone`` bits together with any other bit (each
    of those must be the whole flag)."""
    return any(flag & bit and flag != bit for bit in (1 << n for n in range(7)) if bit & alone)
