"""``Event`` and ``Context``: order between streams, and contexts besides a device's
default one (docs/runtime-model.md §3.3, §3.15).

``stream_a.record()`` marks a point in stream A's queue; ``stream_b.wait(event)`` makes
stream B's later work wait until A reached it. On the fake this is literal: queued work
runs at synchronisation, and a wait runs A up to the record point first, so a missing
wait shows up as stale data.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any

from typing_extensions import Self

from . import _backend, raw
from ._context import as_device, device_id, ensure_context
from ._lifecycle import Epoch, close_on_exit, state

if TYPE_CHECKING:
    from .device import Device
    from .stream import Stream

__all__ = ["Context", "Event"]

#: ``aclrtEventRecordedStatus`` COMPLETE.
_COMPLETE = 1


def _destroy_later(backend: _backend.Backend, call: str, handle: int, pid: int,
                   token: Epoch) -> Any:
    def destroy() -> None:
        # A forked child owns none of its parent's handles, and a reset or aclFinalize
        # already destroyed it; a finalizer must not raise (the runtime reclaims the
        # handle at exit anyway).
        if os.getpid() == pid and token.live:
            with contextlib.suppress(Exception):
                getattr(backend, call)(handle)
    return destroy


class Event:
    """An event of the calling thread's current context (aclrtCreateEvent: with timing).

    Usually made by :meth:`Stream.record`. ``with Event() as e:`` destroys it at exit; an
    event forgotten without :meth:`destroy` is destroyed when collected.
    """

    __slots__ = ("__weakref__", "_device", "_finalizer", "_handle", "_token")

    def __init__(self) -> None:
        self._handle = raw.aclrtCreateEvent()
        #: The device of the context it belongs to, as far as acl_mem followed the thread
        #: (None: set outside acl_mem); other threads get that context to use it.
        self._device = state.current_device()
        # A reset of its device (when known), aclFinalize or a fork ends the event: after
        # that, destroy() has nothing left to destroy.
        self._token = state.token(self._device)
        self._finalizer = weakref.finalize(
            self, _destroy_later(_backend.get(), "aclrtDestroyEvent", self._handle,
                                 os.getpid(), self._token))

    @property
    def handle(self) -> int:
        """The aclrtEvent value."""
        self._check_live("handle")
        return self._handle

    @property
    def destroyed(self) -> bool:
        """True after destroy(), or once a reset of its device, aclFinalize or a fork ended
        it."""
        return self._handle == 0 or not self._token.live

    def record(self, stream: Stream | None = None) -> Self:
        """aclrtRecordEvent on ``stream`` (default: the current context's default stream)."""
        handle = self._in_context("record")
        if stream is not None:
            ensure_context(stream.device.id)
        raw.aclrtRecordEvent(handle, 0 if stream is None else stream.handle)
        return self

    def synchronize(self) -> None:
        """Block until the latest record completed (at once if never recorded)."""
        raw.aclrtSynchronizeEvent(self._in_context("synchronize"))

    def query(self) -> bool:
        """True once the latest record completed. False while it is pending, and also
        for an event never recorded (unlike CUDA, docs/runtime-model.md §3.15)."""
        return raw.aclrtQueryEventStatus(self._in_context("query")) == _COMPLETE

    def elapsed(self, end: Event) -> float:
        """Milliseconds from this event's record to ``end``'s; both must be complete
        (synchronise first: EventTimestampInvalidError 107006 otherwise)."""
        return raw.aclrtEventElapsedTime(self._in_context("elapsed"), end.handle)

    def destroy(self) -> None:
        """aclrtDestroyEvent; a second call does nothing. Queued work naming the event
        still runs."""
        handle, self._handle = self._handle, 0
        if handle:
            self._finalizer.detach()
            if self._token.live:
                if self._device is not None:
                    ensure_context(self._device)
                raw.aclrtDestroyEvent(handle)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        close_on_exit(self.destroy, exc)

    def __repr__(self) -> str:
        return "<Event destroyed>" if self.destroyed else f"<Event handle={self._handle:#x}>"

    def _in_context(self, what: str) -> int:
        """The handle, with the event's context made current in a thread that has none."""
        self._check_live(what)
        if self._device is not None:
            ensure_context(self._device)
        return self._handle

    def _check_live(self, what: str) -> None:
        if self._handle == 0:
            raise ValueError(f"Event.{what}: the event was destroyed; create a new one "
                             "(Stream.record() returns a fresh event)")
        if not self._token.live:
            raise ValueError(f"Event.{what}: the runtime ended the event (its device reset, "
                             "aclFinalize or a fork); create a new one")


class Context:
    """A context made by aclrtCreateContext (``Device.context()``): current for the creating
    thread, it holds the device (and its memory) open until :meth:`destroy`, whatever
    resets the default context sees (docs/runtime-model.md §3.3).

    ``with dev.context() as ctx:`` destroys it at exit; :meth:`use` makes it current in
    another thread. A thread whose current context is destroyed has none afterwards:
    call ``Device(n).use()`` or another context's :meth:`use`.
    """

    __slots__ = ("_device", "_handle", "_token")

    def __init__(self, device: Device | int) -> None:
        self._device = as_device("Context", device_id(device, "Context"))
        self._handle = raw.aclrtCreateContext(self._device.id)
        self._token = state.token(self._device.id)

    @property
    def handle(self) -> int:
        """The aclrtContext value."""
        if self._handle == 0:
            raise ValueError("Context.handle: the context was destroyed")
        if not self._token.live:
            raise ValueError("Context.handle: the runtime ended the context (aclFinalize, "
                             "a fork or a reconfigured fake)")
        return self._handle

    @property
    def device(self) -> Device:
        """The device the context was created on."""
        return self._device

    @property
    def destroyed(self) -> bool:
        """True after destroy(), or once aclFinalize ended every context."""
        return self._handle == 0 or not self._token.live

    def use(self) -> Self:
        """aclrtSetCurrentContext: make this context (and its device) current here."""
        raw.aclrtSetCurrentContext(self.handle)
        return self

    def destroy(self) -> None:
        """aclrtDestroyContext with its streams; a second call does nothing."""
        handle, self._handle = self._handle, 0
        if handle and self._token.live:
            try:
                raw.aclrtDestroyContext(handle)
            except BaseException:
                self._handle = handle
                raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        close_on_exit(self.destroy, exc)

    def __repr__(self) -> str:
        where = "destroyed" if self._handle == 0 else f"handle={self._handle:#x}"
        return f"<Context {where} device={self._device.id}>"
