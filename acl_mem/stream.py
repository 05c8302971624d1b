"""``Stream``: an ordered queue of device work (docs/runtime-model.md §3.4).

Work queued on one stream runs in order; streams are unordered with respect to each
other unless one waits for an event another recorded (:meth:`Stream.wait`); nothing
queued is guaranteed done before :meth:`Stream.synchronize`. On the
fake this is literal: queued copies run only at synchronisation, so a missing
synchronise shows up as stale data (and as a hazard warning).
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from . import raw
from ._context import ensure_context
from ._lifecycle import close_on_exit, state
from .errors import DestroyedStreamError
from .events import Event

if TYPE_CHECKING:
    from .device import Device

__all__ = ["Stream"]


class Stream:
    """A stream of one device's context; ``Device.stream()`` creates one.

    ``with dev.stream() as s:`` destroys it at exit (after its queued work ran, as
    aclrtDestroyStream waits). The default stream (``Device.default_stream``, handle 0)
    is never destroyed.
    """

    __slots__ = ("_device", "_handle", "_token")

    def __init__(self, handle: int, device: Device) -> None:
        self._handle = handle
        self._device = device
        # A created context's streams go with it (aclrtDestroyContext), as with a reset.
        self._token = state.context_token(device.id)

    @property
    def handle(self) -> int:
        """The aclrtStream value (0 is the default stream)."""
        self._check_live("handle")
        return self._handle

    @property
    def device(self) -> Device:
        """The device whose context the stream belongs to."""
        return self._device

    @property
    def destroyed(self) -> bool:
        """True after destroy(), or once a reset released the device's streams (or the
        created context it belongs to was destroyed)."""
        return self._handle == -1 or not self._token.live

    def __repr__(self) -> str:
        where = "destroyed" if self.destroyed else f"handle={self._handle:#x}"
        return f"<Stream {where} device={self._device.id}>"

    def synchronize(self) -> None:
        """Wait until everything queued on this stream ran (docs/runtime-model.md §3.4)."""
        handle = self.handle
        ensure_context(self._device.id)
        raw.aclrtSynchronizeStream(handle)

    def record(self, event: Event | None = None) -> Event:
        """aclrtRecordEvent: mark this point of the queue; returns the event (a new one
        unless given). Other streams :meth:`wait` for it; the host synchronises on it."""
        handle = self.handle
        ensure_context(self._device.id)
        event = Event() if event is None else event
        raw.aclrtRecordEvent(event.handle, handle)
        return event

    def wait(self, event: Event) -> None:
        """aclrtStreamWaitEvent: work queued here from now on waits until ``event``'s
        latest record point completed (docs/runtime-model.md §3.15)."""
        handle = self.handle
        ensure_context(self._device.id)
        raw.aclrtStreamWaitEvent(handle, event.handle)

    def destroy(self) -> None:
        """aclrtDestroyStream; a second call (or the default stream) does nothing."""
        handle, self._handle = self._handle, -1
        if handle in (-1, 0):
            self._handle = handle if handle == 0 else -1
            return
        if self._token.live:
            try:
                ensure_context(self._device.id)
                raw.aclrtDestroyStream(handle)
            except BaseException:
                # Refused (another thread's context, say): the runtime still holds the
                # stream, so this object keeps it and may destroy it later.
                self._handle = handle
                raise

    def __enter__(self) -> Stream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        close_on_exit(self.destroy, exc)

    def _check_live(self, what: str) -> None:
        if self._handle == -1:
            raise DestroyedStreamError(f"Stream.{what}: the stream was destroyed")
        if not self._token.live:
            raise DestroyedStreamError(
                f"Stream.{what}: the stream's context ended (device {self._device.id} reset, "
                "its created context destroyed, aclFinalize or a fork), which destroyed it")
