"""What the process has done to the runtime, mirrored in Python.

Buffers remember an epoch token when they are created. A device reset to zero
references, an aclFinalize or a fake reconfiguration moves the epoch on: the runtime
has already released that memory, so finalizers and ``free()`` must not release it
again (docs/runtime-model.md §3.1, §3.2). The mirror also knows each thread's current device, so the
Pythonic layer can refuse to allocate on the wrong device without a runtime call.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable

from .errors import HazardError, MemoryCheckError

__all__ = ["HOST", "ClosableEpoch", "Epoch", "State", "close_on_exit", "state"]

#: The owner of page-locked host memory (aclrtMallocHost). The runtime keeps no record of
#: it per device or context, so neither a device reset nor aclFinalize releases it; only
#: a fork (the child does not own the parent's) or a new backend does
#: (docs/runtime-model.md §3.7).
HOST = -1


def close_on_exit(close: Callable[[], None], propagating: BaseException | None) -> None:
    """``close()`` at the end of a ``with`` block without masking the block's own exception.

    In the fake's raise mode a cleanup that finds queued work or a damaged canary raises
    after completing its effect. When the block is already propagating an exception
    (usually the first hazard, the one that matters), that later report must not replace
    it: it is attached as a note instead (the fake counts it in either case).
    """
    if propagating is None:
        close()
        return
    try:
        close()
    except (HazardError, MemoryCheckError) as later:
        if hasattr(propagating, "add_note"):  # Python 3.11+
            propagating.add_note(f"while leaving the block: {type(later).__name__}: {later}")


class Epoch:
    """One life of what the process holds on a device (or of its pinned host memory, or
    of everything process-wide): live until a reset to zero references, aclFinalize, a
    fork or a new backend ends it.

    An object, so that the hot paths (every free and copy of a buffer) test liveness
    with one attribute load, ``buffer._token.live``, instead of a call.
    """

    __slots__ = ("live",)

    def __init__(self) -> None:
        self.live = True

    def __repr__(self) -> str:
        return f"<Epoch {'live' if self.live else 'ended'}>"


class ClosableEpoch(Epoch):
    """An epoch inside another that can also end by itself: what a pool's segments hold,
    which end with the pool's close as well as with their device's epoch."""

    __slots__ = ("_open", "_parent")

    def __init__(self, parent: Epoch) -> None:
        # Not Epoch.__init__: ``live`` is derived here, never stored.
        self._parent = parent
        self._open = True

    @property
    def live(self) -> bool:
        return self._open and self._parent.live

    @live.setter
    def live(self, value: bool) -> None:
        if not value:
            self._open = False


class State:
    def __init__(self) -> None:
        #: Held by the raw layer around a device set/reset and its mirror update.
        self.lock = threading.RLock()
        self._lock = threading.Lock()
        self._local = threading.local()
        #: Counts teardowns (aclFinalize, fork, new backend).
        self.global_epoch = 0
        #: The current epoch per owner: a device id, HOST (pinned host memory: ended by a
        #: fork or a new backend, not by aclFinalize) or None (process-wide objects).
        self._epochs: dict[int | None, Epoch] = {}
        self._set_count: Counter[int] = Counter()
        #: Contexts created through the raw layer: handle -> device.
        self._contexts: dict[int, int] = {}
        #: Their epochs, which aclrtDestroyContext also ends (its streams go with it).
        self._context_epochs: dict[int, ClosableEpoch] = {}
        #: Default contexts the Pythonic layer learnt (acl_mem/_context.py):
        #: device -> (device epoch, handle); a reset to zero references makes it stale.
        self._defaults: dict[int, tuple[Epoch, int]] = {}
        # A forked child shares no runtime with its parent: nothing allocated before the
        # fork may be freed from the child, so every token goes stale there.
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork)

    def current_device(self) -> int | None:
        """This thread's current device, as far as this process's calls tell: None also
        when a reset to zero references (on any thread) released it since it was set."""
        current: tuple[int, Epoch] | None = getattr(self._local, "current", None)
        if current is None or not current[1].live:
            return None
        return current[0]

    def forget_thread(self) -> None:
        """The calling thread starts over with no current device, as a new thread would
        (a trace replay reuses one thread for many recorded ones)."""
        self._local.__dict__.clear()

    def token(self, device: int | None) -> Epoch:
        """The current epoch of ``device`` (HOST: pinned host memory; None: process-wide)."""
        epoch = self._epochs.get(device)
        if epoch is None:
            # setdefault is atomic: two threads asking at once get the same epoch.
            epoch = self._epochs.setdefault(device, Epoch())
        return epoch

    def context_token(self, device: int) -> Epoch:
        """The epoch of what this thread makes in its current context on ``device`` (a
        stream): a created context's own, which its destruction ends too, else the
        device's."""
        handle: int | None = getattr(self._local, "context", None)
        if handle:
            epoch = self._context_epochs.get(handle)
            if epoch is not None and self._contexts.get(handle) == device:
                return epoch
        return self.token(device)

    def _end(self, owner: int | None) -> None:
        epoch = self._epochs.pop(owner, None)
        if epoch is not None:
            epoch.live = False

    def device_set(self, device: int) -> None:
        with self._lock:
            self._set_count[device] += 1
        self._local.current = (device, self.token(device))
        self._local.context = None
        self._local.foreign = False

    def device_reset(self, device: int) -> None:
        with self._lock:
            self._set_count[device] -= 1
            released = self._set_count[device] <= 0
            if released:
                del self._set_count[device]
                # Every thread that had the device current has none now (current_device).
                self._end(device)

    def device_reset_force(self, device: int) -> None:
        """aclrtResetDeviceForce: only the device's created contexts still hold it."""
        with self._lock:
            held = sum(1 for owner in self._contexts.values() if owner == device)
            self._set_count[device] = held + 1  # device_reset takes the last of the sets
        self.device_reset(device)

    def context_created(self, handle: int, device: int) -> None:
        """aclrtCreateContext: the context holds ``device`` open and is now current."""
        with self._lock:
            self._set_count[device] += 1
            self._contexts[handle] = device
            self._context_epochs[handle] = ClosableEpoch(self.token(device))
        self._local.current = (device, self.token(device))
        self._local.context = handle
        self._local.foreign = False

    def context_destroyed(self, handle: int) -> None:
        """aclrtDestroyContext: its hold on the device ends; a thread whose current context
        it was has none."""
        with self._lock:
            device = self._contexts.pop(handle, None)
            epoch = self._context_epochs.pop(handle, None)
            if epoch is not None:
                epoch.live = False
        if getattr(self._local, "context", None) == handle:
            self._local.current = None
            self._local.context = None
            self._local.foreign = False
        if device is not None:
            self.device_reset(device)

    def context_set(self, handle: int) -> None:
        """aclrtSetCurrentContext: this thread's device is the context's (unknown for a
        context this process's raw layer did not create: then none is assumed)."""
        with self._lock:
            device = self._contexts.get(handle)
            if device is None:
                device = self._default_device(handle)
        self._local.current = None if device is None else (device, self.token(device))
        self._local.context = handle
        self._local.foreign = device is None

    # -- what acl_mem/_context.py needs to give a thread an object's context ------------------
    def thread_context(self) -> tuple[bool, bool]:
        """``(seen, foreign)``: whether this process's calls ever set a context in this
        thread, and whether its context is one this mirror cannot place (a handle acl_mem
        did not create or learn)."""
        return hasattr(self._local, "current"), getattr(self._local, "foreign", False)

    def default_context(self, device: int) -> int | None:
        """The handle of ``device``'s default context, if learnt since its last release."""
        known = self._defaults.get(device)
        if known is None or not known[0].live:
            return None
        return known[1]

    def default_context_learnt(self, device: int, handle: int) -> None:
        with self._lock:
            self._defaults[device] = (self.token(device), handle)

    def _default_device(self, handle: int) -> int | None:
        for device, (epoch, known) in self._defaults.items():
            if known == handle and epoch.live:
                return device
        return None

    def default_refs(self, device: int) -> int:
        """aclrtSetDevice references to ``device`` this process holds (not those of
        created contexts, which the set count includes)."""
        with self._lock:
            created = sum(1 for owner in self._contexts.values() if owner == device)
            return self._set_count.get(device, 0) - created

    def created_context(self, device: int) -> int | None:
        """The newest live context from aclrtCreateContext on ``device``, if any."""
        with self._lock:
            found = [handle for handle, owner in self._contexts.items() if owner == device]
        return found[-1] if found else None

    def kept(self, device: int) -> bool:
        """True when this thread holds the reference :meth:`keep` recorded for ``device``
        and no reset to zero has released the device since."""
        kept: dict[int, Epoch] | None = getattr(self._local, "kept", None)
        epoch = kept.get(device) if kept is not None else None
        return epoch is not None and epoch.live and self.current_device() == device

    def keep(self, device: int) -> None:
        """Record that this thread's current reference to ``device`` is held until a reset."""
        kept: dict[int, Epoch] | None = getattr(self._local, "kept", None)
        if kept is None:
            kept = self._local.kept = {}
        kept[device] = self.token(device)

    def set_count(self, device: int) -> int:
        return self._set_count[device]

    def _after_fork(self) -> None:
        # A thread of the parent may have held these at the fork; it does not exist here.
        self.lock = threading.RLock()
        self._lock = threading.Lock()
        self.teardown()

    def teardown(self, *, keeps_host: bool = False) -> None:
        """aclFinalize (``keeps_host``: pinned host memory stays the process's), a fork or
        a new backend: every device released at once."""
        with self._lock:
            self._set_count.clear()
            self._contexts.clear()
            self._context_epochs.clear()  # they end with their devices' epochs
            self._defaults.clear()
            self.global_epoch += 1
            for owner in [owner for owner in self._epochs if owner != HOST or not keeps_host]:
                self._end(owner)
        self._local = threading.local()


state = State()
