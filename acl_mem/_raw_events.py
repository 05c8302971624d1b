"""Contexts and events in the raw layer (docs/runtime-model.md §3.3, §3.15): the C calls one
to one, handles as ints (0 is NULL), a non-zero aclError raised as its AclError."""

from __future__ import annotations

from . import _backend
from ._args import c_int, c_uint
from ._hints import check
from ._lifecycle import state

__all__ = [
    "aclrtCreateContext",
    "aclrtCreateEvent",
    "aclrtCreateEventExWithFlag",
    "aclrtCreateEventWithFlag",
    "aclrtDestroyContext",
    "aclrtDestroyEvent",
    "aclrtEventElapsedTime",
    "aclrtGetCurrentContext",
    "aclrtQueryEvent",
    "aclrtQueryEventStatus",
    "aclrtRecordEvent",
    "aclrtResetEvent",
    "aclrtSetCurrentContext",
    "aclrtStreamWaitEvent",
    "aclrtSynchronizeEvent",
]


def _handle(value: object, call: str, arg: str, ctype: str) -> int:
    return c_uint(value, call, arg, 64, ctype)


# -- contexts (§3.3) -------------------------------------------------------------------------------
def aclrtCreateContext(deviceId: int) -> int:
    """A new context on ``deviceId``, current for this thread; it holds the device open
    until aclrtDestroyContext (docs/runtime-model.md §3.3)."""
    dev = c_int(deviceId, "aclrtCreateContext", "deviceId")
    with state.lock:
        rc, context = _backend.get().aclrtCreateContext(dev)
        check(rc, "aclrtCreateContext", deviceId=dev)
        state.context_created(context, dev)
    return context


def aclrtDestroyContext(context: int) -> None:
    """Destroy a context from aclrtCreateContext with its streams; the default context of
    aclrtSetDevice is refused with 107002 (docs/runtime-model.md §3.3)."""
    handle = _handle(context, "aclrtDestroyContext", "context", "aclrtContext")
    with state.lock:
        rc = _backend.get().aclrtDestroyContext(handle)
        check(rc, "aclrtDestroyContext", context=handle)
        state.context_destroyed(handle)


def aclrtSetCurrentContext(context: int) -> None:
    """Make ``context`` this thread's context (and its device this thread's device)."""
    handle = _handle(context, "aclrtSetCurrentContext", "context", "aclrtContext")
    with state.lock:
        rc = _backend.get().aclrtSetCurrentContext(handle)
        check(rc, "aclrtSetCurrentContext", context=handle)
        state.context_set(handle)


def aclrtGetCurrentContext() -> int:
    """This thread's context; 107002 when it has none (CANN 8.5.0 returns 0 instead)."""
    rc, context = _backend.get().aclrtGetCurrentContext()
    check(rc, "aclrtGetCurrentContext")
    return context


# -- events (§3.15) --------------------------------------------------------------------------------
def aclrtCreateEvent() -> int:
    """A new event of the current context, with timing (docs/runtime-model.md §3.15)."""
    rc, event = _backend.get().aclrtCreateEvent()
    check(rc, "aclrtCreateEvent")
    return event


def aclrtCreateEventWithFlag(flag: int) -> int:
    """A new event with ``flag`` (``ACL_EVENT_*`` bits; 0 and ACL_EVENT_IPC -> 107000)."""
    f = c_uint(flag, "aclrtCreateEventWithFlag", "flag", 32, "uint32_t")
    rc, event = _backend.get().aclrtCreateEventWithFlag(f)
    check(rc, "aclrtCreateEventWithFlag", flag=f)
    return event


def aclrtCreateEventExWithFlag(flag: int) -> int:
    """A new reusable event (waits on it before any record do not wait)."""
    f = c_uint(flag, "aclrtCreateEventExWithFlag", "flag", 32, "uint32_t")
    rc, event = _backend.get().aclrtCreateEventExWithFlag(f)
    check(rc, "aclrtCreateEventExWithFlag", flag=f)
    return event


def aclrtDestroyEvent(event: int) -> None:
    """Destroy ``event``; queued work that names it still runs."""
    handle = _handle(event, "aclrtDestroyEvent", "event", "aclrtEvent")
    check(_backend.get().aclrtDestroyEvent(handle), "aclrtDestroyEvent", event=handle)


def aclrtRecordEvent(event: int, stream: int = 0) -> None:
    """Queue a record of ``event`` on ``stream`` (0: the default stream)."""
    call = "aclrtRecordEvent"
    e = _handle(event, call, "event", "aclrtEvent")
    s = _handle(stream, call, "stream", "aclrtStream")
    check(_backend.get().aclrtRecordEvent(e, s), call, event=e, stream=s)


def aclrtResetEvent(event: int, stream: int = 0) -> None:
    """Queue a reset of ``event`` on ``stream`` (events with ACL_EVENT_SYNC)."""
    call = "aclrtResetEvent"
    e = _handle(event, call, "event", "aclrtEvent")
    s = _handle(stream, call, "stream", "aclrtStream")
    check(_backend.get().aclrtResetEvent(e, s), call, event=e, stream=s)


def aclrtStreamWaitEvent(stream: int, event: int) -> None:
    """Make ``stream``'s later work wait for ``event``'s latest record point."""
    call = "aclrtStreamWaitEvent"
    s = _handle(stream, call, "stream", "aclrtStream")
    e = _handle(event, call, "event", "aclrtEvent")
    check(_backend.get().aclrtStreamWaitEvent(s, e), call, stream=s, event=e)


def aclrtSynchronizeEvent(event: int) -> None:
    """Block until ``event``'s latest record completed (at once if never recorded)."""
    handle = _handle(event, "aclrtSynchronizeEvent", "event", "aclrtEvent")
    check(_backend.get().aclrtSynchronizeEvent(handle), "aclrtSynchronizeEvent", event=handle)


def aclrtQueryEventStatus(event: int) -> int:
    """``ACL_EVENT_RECORDED_STATUS_COMPLETE`` (1) or ``..._NOT_READY`` (0)."""
    handle = _handle(event, "aclrtQueryEventStatus", "event", "aclrtEvent")
    rc, status = _backend.get().aclrtQueryEventStatus(handle)
    check(rc, "aclrtQueryEventStatus", event=handle)
    return status


def aclrtQueryEvent(event: int) -> int:
    """The deprecated query: ``ACL_EVENT_STATUS_COMPLETE`` (0) or ``..._NOT_READY`` (1)."""
    handle = _handle(event, "aclrtQueryEvent", "event", "aclrtEvent")
    rc, status = _backend.get().aclrtQueryEvent(handle)
    check(rc, "aclrtQueryEvent", event=handle)
    return status


def aclrtEventElapsedTime(startEvent: int, endEvent: int) -> float:
    """Milliseconds from ``startEvent``'s record to ``endEvent``'s (both completed)."""
    call = "aclrtEventElapsedTime"
    a = _handle(startEvent, call, "startEvent", "aclrtEvent")
    b = _handle(endEvent, call, "endEvent", "aclrtEvent")
    rc, ms = _backend.get().aclrtEventElapsedTime(a, b)
    check(rc, call, startEvent=a, endEvent=b)
    return ms
