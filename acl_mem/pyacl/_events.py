"""pyACL's contexts and events, part of ``acl.rt`` (docs/pyacl.md; behaviour:
docs/runtime-model.md §3.3, §3.15).

Shapes and argument units are those of pyACL's ``rt/rt_context.cpp`` and
``rt/rt_synchronize.cpp``: handles are ``k``, device ids ``i``, flags ``I``; outputs first,
``ret`` last; on failure the outputs are what pyACL's C variables hold then (0, 0.0).
"""

from __future__ import annotations

import ctypes

from .. import raw as _raw
from . import _common

__all__ = [
    "create_context",
    "create_event",
    "create_event_ex_with_flag",
    "create_event_with_flag",
    "destroy_context",
    "destroy_event",
    "event_elapsed_time",
    "get_context",
    "query_event",
    "query_event_status",
    "record_event",
    "reset_event",
    "set_context",
    "stream_wait_event",
    "synchronize_event",
]


# -- contexts (§3.3) -------------------------------------------------------------------------------


def create_context(device_id: int, /) -> tuple[int, int]:
    """``context, ret = acl.rt.create_context(device_id)``: aclrtCreateContext; the new
    context is the thread's current one (0 and the code on failure)."""
    dev = _common.as_int(device_id, "acl.rt.create_context", "device_id")
    return _common.with_code(lambda: _raw.aclrtCreateContext(dev), 0)


def destroy_context(context: int, /) -> int:
    """``ret = acl.rt.destroy_context(context)``: aclrtDestroyContext (its streams go
    with it; a default context or a dead one: 107002)."""
    handle = _common.as_ulong(context, "acl.rt.destroy_context", "context")
    return _common.code_of(lambda: _raw.aclrtDestroyContext(handle))


def set_context(context: int, /) -> int:
    """``ret = acl.rt.set_context(context)``: aclrtSetCurrentContext (the thread's device
    follows the context)."""
    handle = _common.as_ulong(context, "acl.rt.set_context", "context")
    return _common.code_of(lambda: _raw.aclrtSetCurrentContext(handle))


def get_context(*_ignored: object) -> tuple[int, int]:
    """``context, ret = acl.rt.get_context()``: aclrtGetCurrentContext (``(0, 107002)``
    in a thread without a context)."""
    return _common.with_code(_raw.aclrtGetCurrentContext, 0)


# -- events (§3.15) --------------------------------------------------------------------------------


def create_event(*_ignored: object) -> tuple[int, int]:
    """``event, ret = acl.rt.create_event()``: aclrtCreateEvent."""
    return _common.with_code(_raw.aclrtCreateEvent, 0)


def create_event_with_flag(flag: int, /) -> tuple[int, int]:
    """``event, ret = acl.rt.create_event_with_flag(flag)``: aclrtCreateEventWithFlag
    (``flag`` is unit ``I``: an integer wrapped to 32 bits)."""
    bits = _common.as_uint32(flag, "acl.rt.create_event_with_flag", "flag")
    return _common.with_code(lambda: _raw.aclrtCreateEventWithFlag(bits), 0)


def create_event_ex_with_flag(flag: int, /) -> tuple[int, int]:
    """``event, ret = acl.rt.create_event_ex_with_flag(flag)``: aclrtCreateEventExWithFlag."""
    bits = _common.as_uint32(flag, "acl.rt.create_event_ex_with_flag", "flag")
    return _common.with_code(lambda: _raw.aclrtCreateEventExWithFlag(bits), 0)


def destroy_event(event: int, /) -> int:
    """``ret = acl.rt.destroy_event(event)``: aclrtDestroyEvent."""
    handle = _common.as_ulong(event, "acl.rt.destroy_event", "event")
    return _common.code_of(lambda: _raw.aclrtDestroyEvent(handle))


def record_event(event: int, stream: int, /) -> int:
    """``ret = acl.rt.record_event(event, stream)``: aclrtRecordEvent (stream 0: the
    default stream)."""
    call = "acl.rt.record_event"
    e, s = _common.as_ulong(event, call, "event"), _common.as_ulong(stream, call, "stream")
    return _common.code_of(lambda: _raw.aclrtRecordEvent(e, s))


def reset_event(event: int, stream: int, /) -> int:
    """``ret = acl.rt.reset_event(event, stream)``: aclrtResetEvent."""
    call = "acl.rt.reset_event"
    e, s = _common.as_ulong(event, call, "event"), _common.as_ulong(stream, call, "stream")
    return _common.code_of(lambda: _raw.aclrtResetEvent(e, s))


def stream_wait_event(stream: int, event: int, /) -> int:
    """``ret = acl.rt.stream_wait_event(stream, event)``: aclrtStreamWaitEvent (the
    stream comes first)."""
    call = "acl.rt.stream_wait_event"
    s, e = _common.as_ulong(stream, call, "stream"), _common.as_ulong(event, call, "event")
    return _common.code_of(lambda: _raw.aclrtStreamWaitEvent(s, e))


def synchronize_event(event: int, /) -> int:
    """``ret = acl.rt.synchronize_event(event)``: aclrtSynchronizeEvent."""
    handle = _common.as_ulong(event, "acl.rt.synchronize_event", "event")
    return _common.code_of(lambda: _raw.aclrtSynchronizeEvent(handle))


def query_event_status(event: int, /) -> tuple[int, int]:
    """``status, ret = acl.rt.query_event_status(event)``: aclrtQueryEventStatus;
    aclrtEventRecordedStatus: 0 NOT_READY, 1 COMPLETE (0 and the code on failure)."""
    handle = _common.as_ulong(event, "acl.rt.query_event_status", "event")
    return _common.with_code(lambda: _raw.aclrtQueryEventStatus(handle), 0)


def query_event(event: int, /) -> tuple[int, int]:
    """``status, ret = acl.rt.query_event(event)``: aclrtQueryEvent, deprecated;
    aclrtEventStatus: 0 COMPLETE, 1 NOT_READY (0 and the code on failure)."""
    handle = _common.as_ulong(event, "acl.rt.query_event", "event")
    return _common.with_code(lambda: _raw.aclrtQueryEvent(handle), 0)


def event_elapsed_time(start: int, end: int, /) -> tuple[float, int]:
    """``ms, ret = acl.rt.event_elapsed_time(start, end)``: aclrtEventElapsedTime, the
    milliseconds as the C float pyACL returns (``(0.0, code)`` on failure)."""
    call = "acl.rt.event_elapsed_time"
    a, b = _common.as_ulong(start, call, "start"), _common.as_ulong(end, call, "end")
    ms, ret = _common.with_code(lambda: _raw.aclrtEventElapsedTime(a, b), 0.0)
    return ctypes.c_float(ms).value, ret
