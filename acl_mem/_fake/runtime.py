"""The fake runtime's process state: aclInit/aclFinalize, devices and contexts.

Contexts follow docs/runtime-model.md §3.1-§3.3. aclrtSetDevice adds a process-wide
reference to the device's default context and makes it current for the calling thread;
the default context dies when aclrtResetDevice drops the last reference. A context from
aclrtCreateContext holds the device open by itself until aclrtDestroyContext. A device's
memory lives as long as the device is open: while its default context has references or
a created context is alive. A thread whose context died, or that never set one, gets
107002.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import codes
from .config_file import check_config, read_config
from .device import MAX_DEVICES, FakeDevice
from .profiles import Profile

__all__ = ["Context", "FakeRuntime"]

#: Where the fake's context handles start: apart from streams, events and memory.
_CONTEXT_BASE = 0x5C00_0000_0000
_CONTEXT_STEP = 0x40


class Context:
    """One context: the default context of a device (``primary``) or a created one.

    Handles are never reused, so a destroyed context stays recognisable."""

    __slots__ = ("alive", "device", "handle", "primary")

    def __init__(self, handle: int, device: int, primary: bool) -> None:
        self.handle = handle
        self.device = device
        self.primary = primary
        self.alive = True

    def __repr__(self) -> str:
        kind = "default" if self.primary else "created"
        return f"<fake {kind} context {self.handle:#x} of device {self.device}>"


class FakeRuntime:
    def __init__(self, profile: Profile, on_release: Callable[[FakeDevice], None],
                 on_context_end: Callable[[Context], None] | None = None) -> None:
        if not 1 <= profile.device_count <= MAX_DEVICES:
            raise ValueError(
                f"fake: device_count must be in [1, {MAX_DEVICES}], got {profile.device_count}"
            )
        self.profile = profile
        self.devices = [FakeDevice(i, profile) for i in range(profile.device_count)]
        self.lock = threading.RLock()
        self._on_release = on_release
        self._on_context_end = on_context_end or (lambda context: None)
        self._local = threading.local()
        self._references = [0] * profile.device_count
        self._created = [0] * profile.device_count
        self._primary: list[Context | None] = [None] * profile.device_count
        #: Every live context by handle (the runtime's set of valid contexts).
        self.contexts: dict[int, Context] = {}
        self._next_handle = _CONTEXT_BASE
        self._init_count = 0
        self._finalized = False
        self._first_config: str | None = None

    # -- aclInit / aclFinalize (§3.1) --------------------------------------------------------------
    def init(self, config_path: str | None) -> int:
        with self.lock:
            if self._init_count > 0:
                self._init_count += 1
                return codes.REPEAT_INITIALIZE
            config = read_config(config_path)
            if isinstance(config, int):
                return config
            if self._first_config is not None and config.digest != self._first_config:
                return codes.INVALID_PARAM
            checked = check_config(config)
            if checked != codes.SUCCESS:
                return checked
            if self._first_config is None:
                self._first_config = config.digest
            self._init_count = 1
            self._finalized = False
            return codes.SUCCESS

    def finalize(self) -> int:
        with self.lock:
            if self._finalized:
                return codes.REPEAT_FINALIZE
            for device in self.devices:
                self._release_device(device.id)
            self._init_count = 0
            self._finalized = True
            return codes.SUCCESS

    # -- devices and default contexts (§3.2) -------------------------------------------------------
    def valid_device(self, device_id: int) -> bool:
        return 0 <= device_id < len(self.devices)

    def set_device(self, device_id: int) -> int:
        if not self.valid_device(device_id):
            return codes.INVALID_DEVICEID
        with self.lock:
            primary = self._primary[device_id]
            if primary is None and not self._backing_ready(device_id):
                return codes.MEMORY_ALLOCATION
            if primary is None:
                primary = self._new_context(device_id, primary=True)
                self._primary[device_id] = primary
            self._references[device_id] += 1
            # The default context becomes current, replacing a context set explicitly.
            self._local.ref = primary
            self._local.ctx = None
            self._local.cur = primary
        return codes.SUCCESS

    def reset_device(self, device_id: int, force: bool = False) -> int:
        """aclrtResetDevice drops one reference; ``force`` (aclrtResetDeviceForce) drops them
        all. Created contexts keep the device open either way."""
        if not self.valid_device(device_id):
            return codes.INVALID_DEVICEID
        with self.lock:
            if self._references[device_id] == 0:
                return codes.CONTEXT_RELEASE_ERROR
            if force:
                self._references[device_id] = 1
            self._references[device_id] -= 1
            if self._references[device_id] == 0:
                primary = self._primary[device_id]
                self._primary[device_id] = None
                current: Context | None = getattr(self._local, "ref", None)
                if current is primary:
                    self._local.ref = None
                    self._local.cur = getattr(self._local, "ctx", None)
                if primary is not None:
                    self._end_context(primary)
                if self._created[device_id] == 0:
                    self._on_release(self.devices[device_id])
        return codes.SUCCESS

    # -- created contexts (§3.3) -------------------------------------------------------------------
    def create_context(self, device_id: int) -> tuple[int, int]:
        if not self.valid_device(device_id):
            return codes.INVALID_DEVICEID, 0
        with self.lock:
            if not self._backing_ready(device_id):
                return codes.MEMORY_ALLOCATION, 0
            context = self._new_context(device_id, primary=False)
            self._created[device_id] += 1
            self._local.ctx = context
            self._local.ref = None
            self._local.cur = context
            return codes.SUCCESS, context.handle

    def destroy_context(self, handle: int) -> int:
        with self.lock:
            context = self.contexts.get(handle)
            if context is None or context.primary:
                return codes.CONTEXT_NULL
            current: Context | None = getattr(self._local, "ctx", None)
            if current is context:
                self._local.ctx = None
                self._local.cur = getattr(self._local, "ref", None)
            self._end_context(context)
            self._created[context.device] -= 1
            device = context.device
            if self._created[device] == 0 and self._references[device] == 0:
                self._on_release(self.devices[device])
            return codes.SUCCESS

    def set_current_context(self, handle: int, *, validated: bool) -> int:
        """``validated``: the release rejects a context that is not alive (107000); 8.5.0
        takes it, and later calls find no context."""
        with self.lock:
            context = self.contexts.get(handle)
            if context is None:
                if validated:
                    return codes.RT_PARAM_INVALID
                context = Context(handle, -1, primary=False)
                context.alive = False
            self._local.ctx = context
            self._local.ref = None
            self._local.cur = context
            return codes.SUCCESS

    def forget_thread(self) -> None:
        """The calling thread starts over with no current context, as a new thread would
        (a trace replay reuses one thread for many recorded ones)."""
        self._local.__dict__.clear()

    def current_handle(self) -> int | None:
        """The handle aclrtGetCurrentContext reports: the thread's context, alive or not
        (the runtime does not check), or None when it has none."""
        context: Context | None = getattr(self._local, "ctx", None) or \
            getattr(self._local, "ref", None)
        return None if context is None else context.handle

    def current(self) -> FakeDevice | None:
        """The calling thread's device, or None (107002) if its context is gone or unset."""
        # One thread-local lookup: this runs on every allocation and copy.
        context: Context | None = getattr(self._local, "cur", None)
        if context is None or not context.alive:
            return None
        return self.devices[context.device]

    def current_context(self) -> Context | None:
        """The calling thread's live context, or None."""
        context: Context | None = getattr(self._local, "cur", None)
        if context is None or not context.alive:
            return None
        return context

    def after_fork(self) -> None:
        """In a forked child: fresh lock, no contexts, no device references."""
        self.lock = threading.RLock()
        self._local = threading.local()
        for context in self.contexts.values():
            context.alive = False
        self.contexts = {}
        self._references = [0] * len(self.devices)
        self._created = [0] * len(self.devices)
        self._primary = [None] * len(self.devices)

    def references(self, device_id: int) -> int:
        return self._references[device_id]

    def device_open(self, device_id: int) -> bool:
        return self._references[device_id] > 0 or self._created[device_id] > 0

    # -- helpers -----------------------------------------------------------------------------------
    def _backing_ready(self, device_id: int) -> bool:
        """Whether the device's memory has host address space behind it. Mapped when the
        device is first opened so that a tight ``ulimit -v`` fails here, with a hint, rather
        than in the first copy (docs/fidelity.md row 76)."""
        device = self.devices[device_id]
        return device.heap.make_backing() and device.dvpp.make_backing()

    def _new_context(self, device_id: int, *, primary: bool) -> Context:
        self._next_handle += _CONTEXT_STEP
        context = Context(self._next_handle, device_id, primary)
        self.contexts[context.handle] = context
        return context

    def _end_context(self, context: Context) -> None:
        context.alive = False
        self.contexts.pop(context.handle, None)
        self._on_context_end(context)

    def _release_device(self, device_id: int) -> None:
        """aclFinalize: every context of the device ends and its memory is released."""
        self._references[device_id] = 0
        self._created[device_id] = 0
        self._primary[device_id] = None
        for context in [c for c in self.contexts.values() if c.device == device_id]:
            self._end_context(context)
        self._on_release(self.devices[device_id])

