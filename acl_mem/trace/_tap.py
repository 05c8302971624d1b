"""Recording a backend's calls: the traced calls of a backend object are shadowed, in place,
by wrappers that call the original and hand a tuple to every active recorder.

In place rather than behind a proxy object: whatever holds the backend (buffers free
through the backend they were made on, pools keep their hooks, the fake's helpers check
``isinstance(backend, FakeBackend)``) keeps working and is recorded too, and the object
stays the one ``acl_mem._backend.get()`` returns. Wrappers stay installed while any
recorder is active and are removed when the last one stops; a wrapper with no recorder
only calls through.

A wrapper returns exactly what the call returned, and raises exactly what it raised;
a failure of the recording itself is counted (:func:`lost`) and never reaches the caller.

On acl_mem's fake library no wrapper is needed for most calls: the library captures
their records itself (``Backend.trace_capture``, :data:`_lines.LIBRARY_CAPTURED`) and
:func:`drain` hands them, as bytes no one reads here, to every recorder, where the
writer turns them into lines. Only the other calls (inputs that point to something, the
pools' notifications, methods replaced on the object) keep a wrapper, and whatever a
wrapper or a recorder adds drains the library first, so the recorders see every call in
the order the calls ended. Recording with stacks wraps every call: only Python knows
the Python caller.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from collections.abc import Callable
from time import perf_counter_ns
from types import FrameType
from typing import Any, Protocol

from .. import _backend
from .._lifecycle import state
from ._format import SNAPSHOT_ARGUMENTS, snapshot
from ._lines import (
    BOXED,
    CALL_ORDER,
    CALLS,
    LIBRARY_CAPTURED,
    RAISED,
    STACKED,
    CallSpec,
    Stack,
    count_captured,
)

__all__ = ["Sink", "attach", "detach", "drain", "lost", "original"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_get_ident = threading.get_ident


class Capture(Protocol):
    """A library's capture of traced calls (acl_mem._fake.trace_capture.TraceCapture)."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def waiting(self) -> int: ...
    def take(self) -> tuple[bytes, int]: ...
    def quiet(self) -> contextlib.AbstractContextManager[None]: ...
    @property
    def path(self) -> str: ...


class Sink(Protocol):
    """A recorder, as the tap sees it."""

    stack_depth: int

    def extend(self, values: tuple[Any, ...]) -> None: ...
    def backend_added(self, backend: _backend.Backend) -> None: ...


def _nothing(values: tuple[Any, ...]) -> None:
    return None


#: Whether any recorder is active, and what the wrappers hand each record to: the only
#: recorder's ``list.extend``, or a function giving it to all of them.
_recording = False
_extend: Callable[[tuple[Any, ...]], None] = _nothing
_sinks: list[Sink] = []
#: Deepest stack any active recorder wants (0: none captured).
_depth = 0
_lost = 0
_lock = threading.RLock()
#: Instrumented backends: id -> (weak reference, {name: (held before, wrapper)}), all weak
#: where it matters: a wrapper holds its backend's bound method, and a replaced backend
#: must be free to go.
_instrumented: dict[int, tuple[weakref.ref[Any],
                               dict[str, tuple[object, weakref.ref[Any]]]]] = {}
_MISSING = object()
_CODES = {name: code for code, name in enumerate(CALL_ORDER)}
#: Whether libraries that capture their calls are asked to (tests of the wrappers
#: themselves turn this off).
use_library_capture = True
#: The captures switched on for the recorders, by id; the records they hold go to
#: every recorder (:func:`drain`). Switched off when the last recorder stops.
_captures: dict[int, Capture] = {}
#: Whether the calls the libraries capture are wrapped too (a recorder wants stacks): the
#: wrapper then makes its call quietly, so that each call is recorded once. The
#: captures stay on across such a change, so no call goes unrecorded meanwhile.
_wrapping_captured = False
#: What receives a record once the libraries are drained: every recorder.
_deliver: Callable[[tuple[Any, ...]], None] = _nothing
#: One drain at a time: two would hand their records over in either order. Reentrant,
#: and a drain already under way in the thread is not started again: a collection inside
#: one may run a finalizer whose call (a wrapper) drains too.
_drain_lock = threading.RLock()
_draining = threading.local()


def lost() -> int:
    """Calls whose recording failed in this process (the calls themselves were not
    affected)."""
    return _lost


def _count_lost() -> None:
    global _lost
    _lost += 1


def _user_stack() -> Stack:
    """The caller's frames outside acl_mem, innermost first, at most ``_depth``."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    frames: list[tuple[str, int, str]] = []
    while frame is not None and len(frames) < _depth:
        code = frame.f_code
        frames.append((code.co_filename, frame.f_lineno, code.co_name))
        frame = frame.f_back
    return tuple(frames)


def _current() -> tuple[int] | None:
    """This thread's current device as a record shows it: ``(device,)``, or None when it
    has none (also when a reset released it since)."""
    current = state._local.__dict__.get("current")
    return (current[0],) if current is not None and current[1].live else None


def _raised(exc: BaseException) -> tuple[str, str, str]:
    try:
        message = str(exc)
    except Exception:
        message = "(the exception's text could not be made)"
    return (RAISED, type(exc).__name__, message)


def _boxed(name: str, device: bool, t: int, args: tuple[Any, ...],
           kwargs: dict[str, Any] | None, result: object) -> None:
    """Record a call in the general shape (a stack wanted, a raised exception, a result
    of another shape than the usual)."""
    try:
        if isinstance(result, BaseException):
            result = _raised(result)
        current = _current() if device else None
        _extend((BOXED, (t, _get_ident(), current, name, args, kwargs or None, result,
                         _user_stack() if _depth else None)))
    except Exception:
        _count_lost()


#: Arguments that are often IntEnum members: recorded as plain ints (marshal-friendly).
_ENUM_ARGUMENTS = frozenset({"policy", "attr"})

_TEMPLATE = """
def make(call, name, code):
    def recorded({params}):
        if not _recording:
            return call({args})
        {before}
        try:
            result = call({args})
        except BaseException as exc:
            _boxed(name, {device}, {t}, ({args_tuple}), None, exc)
            raise
        try:
            {check}_extend((code, {t}, _get_ident(), {current}{values}{result}))
        except Exception:
            _count_lost()
        return result
    return recorded
"""
Maker = Callable[[Callable[..., Any], str, int], Callable[..., Any]]
#: Names the template uses: no parameter may be called so.
_TEMPLATE_NAMES = frozenset({"call", "name", "code", "recorded", "t", "result", "exc", "state",
                             "perf_counter_ns", "make", "_current"})


def _maker(spec: CallSpec) -> Maker:
    """A wrapper maker with the call's own parameters (no ``*args``/``**kwargs``) that
    stores the usual shape flat: this is the path every recorded call takes."""
    names = [*spec.params, *(["null_outputs"] if spec.takes_null_outputs else [])]
    assert not set(names) & _TEMPLATE_NAMES and all(n.isidentifier() for n in names), names
    declared = [*spec.params, *(["null_outputs=0"] if spec.takes_null_outputs else [])]
    values = [f"{n} if {n}.__class__ is int else _plain({n})" if n in _ENUM_ARGUMENTS
              else n for n in names]
    if not spec.returns_code:
        unusual, result = "", ""
    elif spec.outputs:
        unusual = f"result.__class__ is not tuple or len(result) != {1 + len(spec.outputs)}"
        result = ", *result"
    else:
        unusual, result = "result.__class__ is not int", ", result"
    t = "t" if spec.release else "perf_counter_ns()"
    # A result of another shape than the usual one is recorded boxed.
    check = "" if not unusual else (
        f"if {unusual}:\n                _boxed(name, {spec.device}, {t}, ({{args_tuple}}), "
        "None, result)\n            else:\n                ")
    source = _TEMPLATE.replace("{check}", check).format(
        params=", ".join(declared), args=", ".join(names),
        args_tuple="".join(f"{n}, " for n in names),
        before="t = perf_counter_ns()" if spec.release else "", t=t, device=spec.device,
        current=", _current()" if spec.device else "",
        values="".join(f", {v}" for v in values), result=result)
    source = source.replace("_get_ident(), , ", "_get_ident(), ")
    namespace: dict[str, Any] = {}
    exec(compile(source, __file__, "exec"), globals(), namespace)
    maker: Maker = namespace["make"]
    return maker


def _plain(value: object) -> object:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else value


_MAKERS: dict[str, Maker] = {}


def _wrapper(spec: CallSpec, call: Callable[..., Any]) -> Callable[..., Any]:
    """The recording stand-in for one bound backend call."""
    name = spec.name
    if name in SNAPSHOT_ARGUMENTS:
        recorded = _general_wrapper(spec, call)
    else:
        maker = _MAKERS.get(name)
        if maker is None:
            maker = _MAKERS[name] = _maker(spec)
        recorded = maker(call, name, _CODES[name])
    recorded.__name__ = recorded.__qualname__ = name
    recorded.__doc__ = getattr(call, "__doc__", None)
    recorded.__wrapped__ = call  # type: ignore[attr-defined]
    return recorded


def _general_wrapper(spec: CallSpec, call: Callable[..., Any]) -> Callable[..., Any]:
    """Any arguments, copies of the mutable ones taken before the call; always boxed."""
    name = spec.name
    device = spec.device
    release = spec.release

    def recorded(*args: Any, **kwargs: Any) -> Any:
        if not _recording:
            return call(*args, **kwargs)
        t = perf_counter_ns()
        kept, kept_kwargs = snapshot(name, args, kwargs)
        try:
            result = call(*args, **kwargs)
        except BaseException as exc:
            _boxed(name, device, t, kept, kept_kwargs, exc)
            raise
        _boxed(name, device, t if release else perf_counter_ns(), kept, kept_kwargs, result)
        return result

    return recorded


def drain() -> None:
    """Hand what the capturing libraries hold to every recorder (cheap when they hold
    nothing: one read of a counter each)."""
    if not _captures or getattr(_draining, "on", False):
        return
    with _drain_lock:
        _draining.on = True
        try:
            for capture in list(_captures.values()):
                if capture.waiting():
                    data, dropped = capture.take()
                    if data or dropped:
                        _deliver((BOXED, ("#captured", dropped, data, capture.path)))
        finally:
            _draining.on = False


def _library_capture(backend: _backend.Backend) -> Capture | None:
    """The capture of ``backend``'s library, if it has one (acl_mem's fake)."""
    ask = getattr(backend, "trace_capture", None)
    capture: Capture | None = ask() if callable(ask) else None
    return capture


def _capture_of(backend: _backend.Backend) -> Capture | None:
    """The capture of ``backend``'s library, when it has one and captures are used."""
    return _library_capture(backend) if use_library_capture else None


def _quietly(capture: Capture, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` made so that its library does not capture it (its wrapper records it)."""
    def quiet(*args: Any, **kwargs: Any) -> Any:
        with capture.quiet():
            return call(*args, **kwargs)

    return quiet


def _instrument(backend: _backend.Backend) -> bool:
    """Shadow the traced calls of ``backend`` (those its library does not capture);
    False if the object takes no attributes."""
    key = id(backend)
    entry = _instrumented.get(key)
    if entry is not None and entry[0]() is backend:
        return True
    try:
        slots = vars(backend)
    except TypeError:
        return False
    capture = _capture_of(backend)
    if capture is not None:
        capture.start()
        _captures[id(capture)] = capture
    saved: dict[str, tuple[object, weakref.ref[Any]]] = {}
    for name, spec in CALLS.items():
        call = getattr(backend, name, None)
        if call is None:
            continue
        if capture is not None and name in LIBRARY_CAPTURED and name not in slots:
            # The library records it (a method replaced on the object may not), unless
            # a recorder wants its Python stack.
            if not _wrapping_captured:
                continue
            call = _quietly(capture, call)
        wrapper = _wrapper(spec, call)
        saved[name] = (slots.get(name, _MISSING), weakref.ref(wrapper))
        slots[name] = wrapper
    _instrumented[key] = (weakref.ref(backend), saved)
    return True


def _restore_all(*, stop_captures: bool = True) -> None:
    """Put back what each instrumented backend held (unless something replaced a
    wrapper since: then that stays); switch the captures off."""
    global _lost
    if stop_captures:
        for capture in _captures.values():
            with contextlib.suppress(Exception):
                # Calls that ended after the last recorder's final drain (its stop() was
                # running): in no file, so counted.
                data, dropped = capture.take()
                capture.stop()
                _lost += dropped + count_captured(data)
        _captures.clear()
    for ref, saved in _instrumented.values():
        backend = ref()
        if backend is None:
            continue
        slots = vars(backend)
        for name, (before, wrapper) in saved.items():
            if slots.get(name) is not wrapper():
                continue
            if before is _MISSING:
                del slots[name]
            else:
                slots[name] = before
    _instrumented.clear()


def original(backend: _backend.Backend, name: str) -> Callable[..., Any]:
    """``backend``'s own ``name`` call, bypassing any recording (for the recorder's queries)."""
    call = getattr(backend, name)
    call = getattr(call, "__wrapped__", call)
    capture = _library_capture(backend)
    if capture is None or id(capture) not in _captures:
        return call  # type: ignore[no-any-return]
    return _quietly(capture, call)


def _on_activation(backend: _backend.Backend) -> None:
    """A backend became the active one while recording: record it too."""
    with _lock:
        if not _sinks:
            return
        drain()  # (the calls before belong before its backend line)
        if not _instrument(backend):
            print(f"acl_mem.trace: the backend {backend!r} takes no attributes: its calls "
                  "are not recorded", file=sys.stderr)
            return
        _refresh()
        sinks = list(_sinks)
    for sink in sinks:
        sink.backend_added(backend)


def _refresh() -> None:
    global _extend, _depth, _recording, _deliver, _wrapping_captured
    _depth = max((s.stack_depth for s in _sinks), default=0)
    if _wrapping_captured != bool(_depth):
        _wrapping_captured = bool(_depth)
        if _instrumented:
            # Stacks wanted now, or no longer: the captured calls wrapped, or not. The
            # captures stay on: a call between the two steps is captured.
            backends = [b for b in (ref() for ref, _ in _instrumented.values())
                        if b is not None]
            _restore_all(stop_captures=False)
            for backend in backends:
                _instrument(backend)
    extends = tuple(s.extend for s in _sinks)
    target: Callable[[tuple[Any, ...]], None]
    if len(extends) == 1:
        target = extends[0]
    elif extends:
        def to_all(values: tuple[Any, ...]) -> None:
            for extend in extends:
                extend(values)

        target = to_all
    else:
        target = _nothing
    _deliver = target
    if _depth:
        def with_stack(values: tuple[Any, ...]) -> None:
            if _captures:
                drain()
            # (boxed calls carry their stack already)
            target((STACKED, _user_stack(), *values) if values[0] != BOXED else values)

        _extend = with_stack
    elif _captures:
        def after_captured(values: tuple[Any, ...]) -> None:
            drain()
            target(values)

        _extend = after_captured
    else:
        _extend = target
    _recording = bool(extends)


def attach(sink: Sink) -> _backend.Backend | None:
    """Start handing recorded calls to ``sink``; instruments the active backend (if one is
    chosen yet) and returns it. Raises TypeError if that backend cannot be instrumented."""
    with _lock:
        drain()  # what was captured before is the other recorders'
        if _on_activation not in _backend._activation_hooks:
            _backend._activation_hooks.append(_on_activation)
        # Read once the hook is in place: a backend another thread is choosing right now
        # is seen here, or by the hook (which waits for this lock), or by both.
        active = _backend._active
        _sinks.append(sink)
        _refresh()  # (the mode this recorder's stack depth asks for)
        if active is not None and not _instrument(active):
            _sinks.remove(sink)
            _refresh()
            if not _sinks:
                _restore_all()
                _backend._activation_hooks.remove(_on_activation)
            raise TypeError(f"acl_mem.trace: the active backend {active!r} takes no "
                            "attributes, so its calls cannot be recorded")
        _refresh()  # (a capture switched on: what wrappers add drains it first)
        return active


def detach(sink: Sink) -> None:
    """Stop handing calls to ``sink``; the last one out removes the wrappers."""
    with _lock:
        drain()  # the leaving recorder gets its last calls
        if sink in _sinks:
            _sinks.remove(sink)
        _refresh()
        if not _sinks:
            _restore_all()
            if _on_activation in _backend._activation_hooks:
                _backend._activation_hooks.remove(_on_activation)


def _after_fork_in_child() -> None:
    global _lock, _drain_lock, _draining
    _lock = threading.RLock()
    _drain_lock = threading.RLock()
    _draining = threading.local()  # (a fork from inside a drain: not one in the child)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
