"""The fake runtime's process state: aclInit/aclFinalize, devices and contexts.

Contexts follow docs/runtime-model.md §3.1-§3.2: aclrtSetDevice adds a process-wide reference to the
device's default context and makes it current for the calling thread; the context
dies when aclrtResetDevice drops the last reference, and with it every block on that
device. A thread whose context died, or that never set one, gets 107002.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable

from . import codes
from .device import MAX_DEVICES, FakeDevice
from .profiles import Profile

__all__ = ["FakeRuntime"]


class FakeRuntime:
    def __init__(self, profile: Profile, on_release: Callable[[FakeDevice], None]) -> None:
        if not 1 <= profile.device_count <= MAX_DEVICES:
            raise ValueError(
                f"fake: device_count must be in [1, {MAX_DEVICES}], got {profile.device_count}"
            )
        self.profile = profile
        self.devices = [FakeDevice(i, profile) for i in range(profile.device_count)]
        self.lock = threading.RLock()
        self._on_release = on_release
        self._local = threading.local()
        self._references = [0] * profile.device_count
        self._generation = [0] * profile.device_count
        self._init_count = 0
        self._finalized = False
        self._first_config: str | None = None

    # -- aclInit / aclFinalize (§3.1) --------------------------------------------------------------
    def init(self, config_path: str | None) -> int:
        with self.lock:
            if self._init_count > 0:
                self._init_count += 1
                return codes.REPEAT_INITIALIZE
            digest = _config_digest(config_path)
            if digest is None:
                return codes.INVALID_PARAM
            if self._first_config is None:
                self._first_config = digest
            elif digest != self._first_config:
                return codes.INVALID_PARAM
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

    # -- devices and contexts (§3.2) ---------------------------------------------------------------
    def valid_device(self, device_id: int) -> bool:
        return 0 <= device_id < len(self.devices)

    def set_device(self, device_id: int) -> int:
        if not self.valid_device(device_id):
            return codes.INVALID_DEVICEID
        with self.lock:
            if self._references[device_id] == 0:
                self._generation[device_id] += 1
            self._references[device_id] += 1
            self._local.context = (device_id, self._generation[device_id])
        return codes.SUCCESS

    def reset_device(self, device_id: int) -> int:
        if not self.valid_device(device_id):
            return codes.INVALID_DEVICEID
        with self.lock:
            if self._references[device_id] == 0:
                return codes.CONTEXT_RELEASE_ERROR
            self._references[device_id] -= 1
            if self._references[device_id] == 0:
                self._release_device(device_id)
        return codes.SUCCESS

    def current(self) -> FakeDevice | None:
        """The calling thread's device, or None (107002) if its context is gone or unset."""
        # current_context() spelled out: this runs on every allocation and copy.
        context: tuple[int, int] | None = getattr(self._local, "context", None)
        if context is None:
            return None
        device_id, generation = context
        if self._references[device_id] == 0 or self._generation[device_id] != generation:
            return None
        return self.devices[device_id]

    def current_context(self) -> tuple[int, int] | None:
        """``(device id, context generation)`` of the calling thread, or None."""
        context: tuple[int, int] | None = getattr(self._local, "context", None)
        if context is None:
            return None
        device_id, generation = context
        if self._references[device_id] == 0 or self._generation[device_id] != generation:
            return None
        return context

    def after_fork(self) -> None:
        """In a forked child: fresh lock, no current context, no device references."""
        self.lock = threading.RLock()
        self._local = threading.local()
        self._references = [0] * len(self.devices)
        self._generation = [g + 1 for g in self._generation]

    def generation(self, device_id: int) -> int:
        return self._generation[device_id]

    def references(self, device_id: int) -> int:
        return self._references[device_id]

    def _release_device(self, device_id: int) -> None:
        self._references[device_id] = 0
        self._generation[device_id] += 1
        self._on_release(self.devices[device_id])


def _config_digest(config_path: str | None) -> str | None:
    """Digest of the config file's JSON; None when it cannot be read or parsed."""
    if config_path is None:
        return ""
    try:
        with open(config_path, "rb") as handle:
            content = handle.read()
        json.loads(content or b"{}")
    except (OSError, ValueError):
        return None
    return hashlib.sha256(content).hexdigest()
