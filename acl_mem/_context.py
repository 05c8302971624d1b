"""A thread that uses an existing object gets that object's device context.

The runtime keeps the current context per thread, and a new thread has none: a worker
copying into a buffer the main thread allocated would get ContextNullError (107002).
Every Pythonic call on an existing object (buffer, array, stream, event, pool, VMM
object) therefore calls :func:`ensure_context` with the object's device first.

What it does, in a thread with no context, in order of preference:

* the device's default context, when acl_mem knows its handle: aclrtSetCurrentContext.
  That adds no reference, so a worker never keeps a device open after the block or
  reset that was meant to release it (docs/runtime-model.md §3.2, §3.3);
* otherwise, while the device is held by aclrtSetDevice, the handle is learnt once per
  device lifetime (aclrtSetDevice, aclrtGetCurrentContext, aclrtResetDevice, all under
  the lock every set and reset takes, so the reset cannot drop the last reference);
* a device held only by a context from aclrtCreateContext: that context;
* a device acl_mem does not know to be open (set outside acl_mem): ``Device.use()``,
  one reference kept, as the implicit allocation path does.

A thread that already has a context keeps it, whichever device it is on: acl_mem never
switches a context away (a different device stays DeviceNotCurrentError territory or the
runtime's answer, as before).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _backend, raw
from ._args import c_int
from ._lifecycle import state
from ._raw_events import aclrtGetCurrentContext, aclrtSetCurrentContext

if TYPE_CHECKING:
    from .device import Device

__all__ = ["as_device", "device_id", "ensure_context", "is_device", "keep_device",
           "register_device_type"]

#: acl_mem.device.Device, registered by that module as it loads. The modules below it
#: (streams, events, buffers, arrays) never import it: they make a Device from a user's
#: device id, or tell one apart, through the functions here, so the Pythonic layer's
#: imports run one way (the README's "How acl_mem is built").
_device_type: type[Device] | None = None


def register_device_type(cls: type[Device]) -> None:
    global _device_type
    _device_type = cls


def _device_class() -> type[Device]:
    if _device_type is None:  # acl_mem/__init__ imports acl_mem.device first
        raise RuntimeError("acl_mem.device was not imported")
    return _device_type


def is_device(value: object) -> bool:
    return isinstance(value, _device_class())


def as_device(call: str, device: object) -> Device:
    """``device`` as a Device: a Device, an int id, or None for the calling thread's
    current device (ContextNullError, 107002, when there is none)."""
    cls = _device_class()
    if device is None:
        return cls.current()
    if isinstance(device, cls):
        return device
    if isinstance(device, int) and not isinstance(device, bool):
        return cls(device)
    raise TypeError(f"{call}: device must be an acl_mem.Device, a device id or None, got "
                    f"{type(device).__name__}")


def device_id(device: Device | int, call: str, name: str = "device") -> int:
    """The id of ``device``: a :class:`Device` or its int id, as every Pythonic call takes."""
    if isinstance(device, _device_class()):
        return device.id
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"{call}: {name} must be a Device or an int device id, "
                        f"got {type(device).__name__}")
    return c_int(device, call, name)


def keep_device(device: int) -> None:
    """aclrtSetDevice once for this process's acl_mem objects: ``Device.use()``."""
    with state.lock:
        if not state.kept(device):
            raw.aclrtSetDevice(device)
            state.keep(device)


def ensure_context(device: int) -> None:
    """Make ``device``'s context current in this thread if the thread has none."""
    # The common case (the thread has a device) is one thread-local lookup.
    if state.current_device() is None:
        _adopt(device)


def _adopt(device: int) -> None:
    with state.lock:
        if state.current_device() is not None or _has_foreign_context():
            return
        handle = state.default_context(device)
        if handle is None and state.default_refs(device) > 0:
            handle = _learn_default(device)
        if handle is None:
            handle = state.created_context(device)
        if handle is None:
            keep_device(device)
            return
        aclrtSetCurrentContext(handle)


def _has_foreign_context() -> bool:
    """Whether this thread has a context the mirror cannot place (set by C code or a
    library outside acl_mem): it is left alone."""
    seen, foreign = state.thread_context()
    if seen:
        # The mirror followed this thread: a context it cannot place was set through the
        # raw layer with another handle; otherwise the thread's context is gone.
        return foreign
    rc, handle = _backend.get().aclrtGetCurrentContext()
    return rc == 0 and handle != 0  # CANN 8.5.0 answers 0 and NULL for none


def _learn_default(device: int) -> int:
    raw.aclrtSetDevice(device)
    try:
        handle = aclrtGetCurrentContext()
    finally:
        # Never the last reference: the mirror counted at least one before the set.
        raw.aclrtResetDevice(device)
    state.default_context_learnt(device, handle)
    return handle
