"""Virtual memory without leaks: ranges, physical memory and mappings as owning objects.

Every multi-step helper here is transactional: when a step fails, what the earlier
steps did is undone (unmap, free, release) and the original AclError is raised, so an
address range is never left half mapped (the failure users of cuda.core and
vllm-ascend's camem hit). When a KeyboardInterrupt arrives between two steps of a
construction, each object records a resource in the same statement that obtains it,
and ``try/except BaseException`` undoes what the construction did.

Teardown (``close()``, ``shrink()``, ``offload()``) is a sequence of steps, each one
runtime call whose effect is recorded only after the call returned, so an interrupt
anywhere leaves the object where a second call continues: it unmaps what is still
mapped, frees what is still held and releases the reservation (see ``_Owned._step``
for the one step whose outcome an interrupt can leave undecided). A closed object
refuses every use with FreedBufferError rather than touching whatever the runtime put
at its old address since (docs/runtime-model.md §4).
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import ClassVar

from typing_extensions import Self

from . import raw
from ._args import c_uint
from ._context import device_id, ensure_context
from ._hostbuf import ffi, host_span
from ._lifecycle import Epoch, close_on_exit, state
from ._structs import aclrtMemLocation, aclrtPhysicalMemProp
from ._vmm_io import MappedIO
from ._vmm_locks import Locked, locked
from .buffers import _refuse_objects
from .device import Device
from .enums import MemAttr, MemcpyKind, MemLocationType
from .errors import AclError, FreedBufferError, HazardError, MemoryCheckError, RtParamInvalidError

__all__ = ["ExpandableSegment", "MappedMemory", "Mapping", "PhysicalMemory", "VirtualRange",
           "granularity", "reserve_and_map"]


def _prop(device: int, attr: int, location: int) -> aclrtPhysicalMemProp:
    return aclrtPhysicalMemProp(memAttr=attr, location=aclrtMemLocation(
        id=device if location == MemLocationType.DEVICE else 0, type=location))


def granularity(device: Device | int = 0, attr: int = MemAttr.HBM_MEM_HUGE,
                location: int = MemLocationType.DEVICE) -> int:
    """aclrtMemGetAllocationGranularity for this kind of memory (docs/runtime-model.md §4.5)."""
    return raw.aclrtMemGetAllocationGranularity(
        _prop(device_id(device, "granularity"), attr, location))


def _size_text(n: int) -> str:
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


#: Release calls an interrupt may have cut off after the runtime did them, by (kind, value):
#: the object whose step it is. An acquisition that gets the same value back proves the
#: release happened (the runtime handed the value out again) and removes the entry.
_undecided: weakref.WeakValueDictionary[tuple[str, int], _Owned] = \
    weakref.WeakValueDictionary()
#: Held by a release step (:meth:`_Owned._step`) and by an acquisition with its
#: :func:`_given_again`: a retried release never runs between another thread's runtime
#: call handing the same value out again and the proof that it did. Taken last (after
#: the objects' own locks) and nothing is taken under it.
_steps_lock = threading.RLock()


def _fresh_steps_lock_in_child() -> None:
    # Another thread of the parent may have held it at the fork: that thread does not
    # exist in the child, which would wait for it for ever.
    global _steps_lock
    _steps_lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_steps_lock_in_child)


def _given_again(kind: str, value: int) -> None:
    """The runtime handed out ``value`` (a base, handle or mapped address) again: any
    release of it an interrupt left undecided did happen."""
    owner = _undecided.pop((kind, value), None)
    if owner is not None:
        owner._step_done = True


class _Owned(Locked):
    """Release-once ownership shared by the objects below.

    An object dropped without ``close()`` is released when collected, unless the runtime
    already took everything (aclFinalize, fake reconfigured) or this is a forked child.
    """

    _released: bool = False
    #: close() began and did not finish: use is refused, close() continues it.
    _closing: bool = False
    #: The release call of :meth:`_step` may have run (an interrupt can land after the
    #: runtime did it and before ``_released`` records it).
    _step_started: bool = False
    #: Proven done although the call's return was lost (see :func:`_given_again`).
    _step_done: bool = False
    _token: Epoch | None = None
    #: What to do instead of using a closed object (ends the FreedBufferError message).
    _renew: ClassVar[str] = "create a new one"
    #: What the release call takes back, for :data:`_undecided` ("" for composites).
    _kind: ClassVar[str] = ""

    def _release(self) -> None:
        """Every step of the teardown; each one re-runnable (for one call: :meth:`_step`)."""
        raise NotImplementedError

    def _release_call(self) -> None:
        """The one runtime call that releases a single resource."""
        raise NotImplementedError

    def _value(self) -> int:
        raise NotImplementedError

    def _step(self) -> None:
        """The release call, re-runnable from wherever an interrupt stopped it.

        The first attempt is registered in :data:`_undecided` before the call. If a
        retry finds it there, nothing else was handed the same value since, so the call
        is made again and 107000 (not a live reservation, handle or mapping) means the
        first one had done it. A call that fails with an AclError had no effect: the
        next close() starts afresh.
        """
        with _steps_lock:
            key = (self._kind, self._value())
            if not self._step_started:
                _undecided[key] = self
                self._step_started = True
                try:
                    self._release_call()
                except AclError:
                    self._step_started = False
                    _undecided.pop(key, None)
                    raise
                except (HazardError, MemoryCheckError):
                    # The fake's strict mode reports once the call took effect.
                    self._step_done = True
                    _undecided.pop(key, None)
                    raise
            elif not self._step_done:
                # 107000: the interrupted attempt had released it.
                with contextlib.suppress(RtParamInvalidError):
                    self._release_call()
            self._step_done = True
            if _undecided.get(key) is self:
                del _undecided[key]

    def _open(self, what: str) -> None:
        """Raise FreedBufferError if closed: the runtime may have given the address, handle
        or memory to someone else since, and using it would touch their data."""
        if self._released:
            raise FreedBufferError(f"{type(self).__name__}.{what}: used after close(), which "
                                   f"released it; {self._renew}")
        if self._token is not None and not self._token.live:
            raise FreedBufferError(f"{type(self).__name__}.{what}: the runtime released it "
                                   f"(aclFinalize, fork or fake reconfigured); {self._renew}")
        if self._closing:
            raise FreedBufferError(f"{type(self).__name__}.{what}: close() was interrupted "
                                   "part-way; call close() again to finish releasing it")

    @property
    def closed(self) -> bool:
        """True once ``close()`` released the resource (or the finalizer did), or the
        runtime did (aclFinalize, fork, fake reconfigured)."""
        return self._released or (self._token is not None and
                                  not self._token.live)

    def close(self) -> None:
        """Release now; a second call does nothing.

        If the runtime refuses (an AclError), the object stays open and usable. If an
        interrupt stops it part-way, the object refuses use and ``close()`` called again
        continues from where it stopped.
        """
        with self._lock:
            if self._released:
                return
            if self._token is not None and not self._token.live:
                # The runtime already took it (aclFinalize, reset, fork): nothing to call.
                self._released = True
                return
            self._closing = True
            report: HazardError | MemoryCheckError | None = None
            while True:
                try:
                    self._release()
                    break
                except AclError:
                    # Refused with nothing released that this object still needs (each
                    # step records its own progress): usable again, as the runtime left it.
                    self._closing = False
                    raise
                except (HazardError, MemoryCheckError) as found:
                    # Strict mode reports after the step took effect (recorded done, so
                    # each round gets further): finish the teardown, then raise the first.
                    report = report or found
            self._released = True
            if report is not None:
                raise report

    def __del__(self) -> None:
        if self._released or self._token is None or \
                not self._token.live:
            return
        # A finalizer must never raise; what cannot be released is lost to this process
        # (and listed by acl_mem.fake.leaks()).
        try:
            self._release()
            self._released = True
        except Exception:
            pass

    def __enter__(self) -> Self:
        self._open("__enter__")
        return self

    def _describe(self) -> str:
        """What the repr shows of an open object (address, size, device ...)."""
        return ""

    def __repr__(self) -> str:
        if self._released:
            status = "closed"
        elif self._token is not None and not self._token.live:
            status = "released by the runtime"
        elif self._token is None:
            status = "not created"
        elif self._closing:
            status = "closing (interrupted: call close() again)"
        else:
            status = self._describe()
        return f"<{type(self).__name__} {status}>"

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        close_on_exit(self.close, exc)


class VirtualRange(_Owned, MappedIO):
    """A reservation from aclrtReserveMemAddress (docs/runtime-model.md §4.2); ``close()`` releases
    it once every mapping in it is closed.

    ``read``, ``write``, ``copy_from`` and ``copy_to`` work as DeviceBuffer's on the parts
    mapped through :meth:`map`, offsets counted from :attr:`address`; one call stays
    within one mapping (ValueError otherwise, as for an unmapped offset).
    """

    _renew = "reserve a new VirtualRange"
    _kind = "range"
    #: Collected while still mapped (see :meth:`_finalize`): a mapping releases it later.
    _orphaned = False

    def __init__(self, size: int, *, expect: int = 0, flags: int = 0) -> None:
        self._size = size
        #: Mappings made through map() that are not closed yet (close() refuses while any is).
        self._mappings: weakref.WeakSet[Mapping] = weakref.WeakSet()
        token = state.token(None)
        # One statement on one line: the address is owned (and released when collected)
        # exactly when it was obtained, whatever line an interrupt lands on.
        with _steps_lock:
            self._base, self._token = raw.aclrtReserveMemAddress(size, 0, expect, flags), token
            _given_again(self._kind, self._base)

    @property
    def size(self) -> int:
        """Bytes reserved."""
        self._open("size")
        return self._size

    @property
    def address(self) -> int:
        """The first reserved address."""
        self._open("address")
        return self._base

    @property
    def base(self) -> int:
        """Alias of :attr:`address` (the name earlier releases used)."""
        self._open("base")
        return self._base

    def _describe(self) -> str:
        live = sum(1 for mapping in self._mappings if not mapping.closed)
        return f"{self._base:#x}, {_size_text(self._size)}, {live} mapping(s)"

    def _release(self) -> None:
        live = [mapping for mapping in self._mappings if not mapping.closed]
        if live:
            # The runtime refuses too (107000); this says which mappings and what to do.
            where = ", ".join(f"{mapping._address:#x}" for mapping in live[:4])
            raise RtParamInvalidError(
                107000, f"VirtualRange.close() at {self._base:#x}",
                hint=f"{len(live)} mapping(s) in the range are still live (at {where}): "
                "close() them first (or use MappedMemory / ExpandableSegment, which close "
                "their parts in order)")
        self._step()

    def _value(self) -> int:
        return self._base

    def _release_call(self) -> None:
        raw.aclrtReleaseMemAddress(self._base)

    def __del__(self) -> None:
        self._finalize()

    def _finalize(self) -> None:
        """What the finalizer does: release, unless the runtime still refuses."""
        if self._released or self._token is None or \
                not self._token.live:
            return
        try:
            self._release()
            self._released = True
        except Exception:
            # Still mapped: collected together with a mapping (a reference cycle), the
            # range can be finalized first. The mapping releases it once unmapped.
            self._orphaned = True

    def _mapping_at(self, what: str, offset: int) -> tuple[int, int, int, int, object]:
        where = self._base + offset
        for mapping in list(self._mappings):
            if not mapping.closed and mapping._address <= where < mapping._address + mapping._size:
                return (mapping._address, mapping._size, mapping._physical._device,
                        where - mapping._address, mapping)
        raise ValueError(f"VirtualRange.{what}: offset {offset} is not mapped (the range has "
                         f"{self._size} bytes); map physical memory there first with "
                         "VirtualRange.map")

    @locked
    def map(self, physical: PhysicalMemory, offset: int = 0) -> Mapping:
        """Map ``physical`` whole at ``address + offset`` (docs/runtime-model.md §4.4)."""
        self._open("map")
        if not isinstance(physical, PhysicalMemory):
            raise TypeError(f"VirtualRange.map: physical must be a PhysicalMemory, got "
                            f"{type(physical).__name__}")
        offset = c_uint(offset, "VirtualRange.map", "offset")
        ensure_context(physical.device)
        size = physical.size
        if offset + size > self._size:
            raise ValueError(f"VirtualRange.map: [{offset}, {offset + size}) is "
                             f"outside the {self._size}-byte range")
        return Mapping(self._base + offset, physical, self)


class PhysicalMemory(_Owned):
    """A handle from aclrtMallocPhysical (docs/runtime-model.md §4.3); ``close()`` frees it.

    Freeing while mapped is allowed: the runtime releases the memory at the last unmap.
    """

    _renew = "allocate a new PhysicalMemory"
    _kind = "physical"

    def __init__(self, size: int, *, device: Device | int = 0,
                 attr: int = MemAttr.HBM_MEM_HUGE,
                 location: int = MemLocationType.DEVICE) -> None:
        self._size = size
        self._device = device = device_id(device, "PhysicalMemory")
        self._prop = _prop(device, attr, location)
        token = state.token(None)
        # One statement, as in VirtualRange: owned exactly when allocated.
        with _steps_lock:
            self._handle, self._token = raw.aclrtMallocPhysical(size, self._prop), token
            _given_again(self._kind, self._handle)

    @property
    def size(self) -> int:
        """Bytes of physical memory."""
        self._open("size")
        return self._size

    @property
    def device(self) -> int:
        """Id of the device the memory is on (0 for host memory)."""
        self._open("device")
        return self._device

    @property
    def prop(self) -> aclrtPhysicalMemProp:
        """The properties it was allocated with (page attribute, location)."""
        self._open("prop")
        return self._prop

    @property
    def handle(self) -> int:
        """The aclrtDrvMemHandle, as an int."""
        self._open("handle")
        return self._handle

    def _describe(self) -> str:
        return f"handle {self._handle:#x}, {_size_text(self._size)}, device {self._device}"

    def _release(self) -> None:
        self._step()

    def _value(self) -> int:
        return self._handle

    def _release_call(self) -> None:
        raw.aclrtFreePhysical(self._handle)


class Mapping(_Owned, MappedIO):
    """``physical`` mapped at ``address`` (aclrtMapMem); ``close()`` unmaps (docs/runtime-model.md
    §4.4).

    ``read``, ``write``, ``copy_from`` and ``copy_to`` work as DeviceBuffer's on the mapped
    bytes, offsets counted from :attr:`address`.
    """

    _renew = "map the memory again with VirtualRange.map"
    _kind = "mapping"

    def __init__(self, address: int | VirtualRange, physical: PhysicalMemory,
                 within: VirtualRange | None = None) -> None:
        if isinstance(address, VirtualRange):  # Mapping(range, physical): at its start
            within = address
            address = within.address
        elif not isinstance(address, int) or isinstance(address, bool):
            raise TypeError(f"Mapping: address must be an int or a VirtualRange, "
                            f"got {type(address).__name__}")
        if not isinstance(physical, PhysicalMemory):
            raise TypeError(f"Mapping: physical must be a PhysicalMemory, "
                            f"got {type(physical).__name__}")
        if within is not None and not isinstance(within, VirtualRange):
            raise TypeError(f"Mapping: within must be a VirtualRange or None, "
                            f"got {type(within).__name__}")
        # Held so that a forgotten range is released only after its mappings are gone.
        self._range = within
        self._address = address
        self._size = size = physical.size
        self._physical = physical
        handle = physical.handle
        # aclrtMapMem returns nothing to record, so ownership is taken first and dropped
        # again if the call did not happen (it raised, or an interrupt came before it).
        with _steps_lock:
            try:
                self._token = state.token(None)
                raw.aclrtMapMem(address, size, 0, handle)
            except BaseException:
                self._token = None
                raise
            _given_again(self._kind, address)
        if within is not None:
            within._mappings.add(self)

    @property
    def range(self) -> VirtualRange | None:
        """The VirtualRange it was mapped into, if it was made through one."""
        self._open("range")
        return self._range

    @property
    def address(self) -> int:
        """The first mapped address."""
        self._open("address")
        return self._address

    @property
    def size(self) -> int:
        """Bytes mapped (the physical memory's size)."""
        self._open("size")
        return self._size

    @property
    def physical(self) -> PhysicalMemory:
        """The physical memory mapped here."""
        self._open("physical")
        return self._physical

    def _mapping_at(self, what: str, offset: int) -> tuple[int, int, int, int, object]:
        if offset > self._size:
            raise ValueError(f"Mapping.{what}: offset {offset} is outside the {self._size} "
                             "mapped bytes")
        return self._address, self._size, self._physical._device, offset, self

    def _describe(self) -> str:
        return (f"{self._address:#x}, {_size_text(self._size)} of handle "
                f"{self._physical._handle:#x}")

    def _release(self) -> None:
        self._step()

    def _value(self) -> int:
        return self._address

    def _release_call(self) -> None:
        raw.aclrtUnmapMem(self._address)

    def close(self) -> None:
        # The range first: its copies find their mapping under its lock (lock order).
        within = self._range
        with within._lock if within is not None else contextlib.nullcontext():
            super().close()
            self._release_orphaned_range()

    def __del__(self) -> None:
        super().__del__()
        self._release_orphaned_range()

    def _release_orphaned_range(self) -> None:
        """Once unmapped, release the range if it was collected while this was mapped."""
        within = getattr(self, "_range", None)
        if within is not None and within._orphaned and self._released:
            within._orphaned = False
            within._finalize()


class _Contents(_Owned):
    """``read`` / ``write`` of mapped bytes, bounds-checked against what is mapped now."""

    def __del__(self) -> None:
        # Collected without close(): its parts release themselves as they go with it,
        # each by its own finalizer and in an order the runtime takes (a mapping holds its
        # range and physical memory, so it is unmapped first). Closing them from here
        # would take their locks, and a collection can run where a lock is held.
        return

    @property
    def device(self) -> int:
        """Id of the device the memory is on (its context is made current for copies)."""
        raise NotImplementedError

    def _base_address(self) -> int:
        raise NotImplementedError

    def _mapped(self) -> int:
        raise NotImplementedError

    @locked
    def write(self, data: object, offset: int = 0) -> None:
        """Copy a buffer-protocol object to ``address + offset`` (H2D)."""
        self._open("write")
        _refuse_objects(data, f"{type(self).__name__}.write", "data")
        span = host_span(data, writable=False, call="write", name="data")
        self._check("write", offset, span.nbytes)
        ensure_context(self.device)
        raw.aclrtMemcpy(self._base_address() + offset, self._mapped() - offset, span.address,
                        span.nbytes, MemcpyKind.HOST_TO_DEVICE)

    @locked
    def read(self, count: int, offset: int = 0) -> bytes:
        """A bytes copy of ``count`` bytes from ``address + offset`` (D2H)."""
        self._open("read")
        self._check("read", offset, count)
        out = bytearray(count)
        if count:
            ensure_context(self.device)
            raw.aclrtMemcpy(_address(out), count, self._base_address() + offset, count,
                            MemcpyKind.DEVICE_TO_HOST)
        return bytes(out)

    def _unmapped_advice(self) -> str:
        """Why nothing (or less) is mapped now and the call that maps more."""
        return ""

    def _check(self, what: str, offset: int, count: int) -> None:
        call = f"{type(self).__name__}.{what}"
        c_uint(offset, call, "offset")
        c_uint(count, call, "count")
        if offset < 0 or count < 0 or offset + count > self._mapped():
            raise ValueError(f"{call}: [{offset}, {offset + count}) is outside the "
                             f"{self._mapped()} mapped bytes{self._unmapped_advice()}")


def _undo(steps: list[Callable[[], None]]) -> None:
    """Run cleanup steps newest first; failures here must not hide the original error."""
    for step in reversed(steps):
        # The caller re-raises the first error; a failing cleanup must not replace it.
        with contextlib.suppress(Exception):
            step()


class MappedMemory(_Contents):
    """A range, its physical memory and the mapping, made in one call (reserve_and_map).

    ``offload()`` copies the contents to host memory and gives the physical memory back
    while keeping the addresses; ``restore()`` maps fresh physical memory at the same
    addresses and copies the contents back (the sleep / wake pattern).
    """

    _renew = "call reserve_and_map again for new memory"
    _range: VirtualRange
    _physical: PhysicalMemory | None
    _mapping: Mapping | None

    def __init__(self, size: int, *, device: Device | int = 0,
                 attr: int = MemAttr.HBM_MEM_HUGE) -> None:
        nbytes = c_uint(size, "reserve_and_map", "size")
        self._device = device = device_id(device, "MappedMemory")
        self._attr = attr
        chunk = granularity(device, attr)
        self._size = -(-nbytes // chunk) * chunk
        self._saved: bytearray | None = None
        #: The contents while an offload() tears the memory down (kept if interrupted).
        self._saving: bytearray | None = None
        rng: VirtualRange | None = None
        physical: PhysicalMemory | None = None
        mapping: Mapping | None = None
        token = state.token(None)
        try:
            rng = VirtualRange(self._size)
            physical = PhysicalMemory(self._size, device=device, attr=attr)
            mapping = rng.map(physical)
            # All three or none, on one line: the finalizer releases what this records.
            self._range, self._physical, self._mapping, self._token = rng, physical, mapping, token
        except BaseException:
            _undo([part.close for part in (rng, physical, mapping) if part is not None])
            raise

    @property
    def device(self) -> int:
        """Id of the device the physical memory is on."""
        self._open("device")
        return self._device

    @property
    def attr(self) -> int:
        """The page attribute (MemAttr) of the physical memory."""
        self._open("attr")
        return self._attr

    @property
    def size(self) -> int:
        """Bytes reserved and (unless offloaded) mapped: the request rounded up to the
        granularity."""
        self._open("size")
        return self._size

    @property
    def range(self) -> VirtualRange:
        """The reservation the memory is mapped into."""
        self._open("range")
        return self._range

    @property
    def address(self) -> int:
        """The first address; it stays the same across offload() and restore()."""
        self._open("address")
        return self._range._base

    @property
    def offloaded(self) -> bool:
        """True between offload() and restore(): the contents are in host memory."""
        self._open("offloaded")
        return self._mapping is None

    def _describe(self) -> str:
        where = "offloaded to host" if self._mapping is None else "mapped"
        return (f"{self._range._base:#x}, {_size_text(self._size)}, device {self._device}, "
                f"{where}")

    def _unmapped_advice(self) -> str:
        return ("; it is offloaded (its contents are in host memory): call restore() first"
                if self._mapping is None else "")

    def _base_address(self) -> int:
        return self._range._base

    def _mapped(self) -> int:
        # Nothing while an interrupted offload() may have unmapped part of it.
        return 0 if self._mapping is None or self._saving is not None else self._size

    @locked
    def offload(self) -> None:
        """Copy to host, unmap and free the physical memory; addresses stay reserved.

        Interrupted, it is continued (never undone) by the next offload(), restore() or
        close(): the copy is kept from the first attempt.
        """
        self._open("offload")
        ensure_context(self.device)
        mapping, physical = self._mapping, self._physical
        if mapping is None or physical is None:
            return
        if self._saving is None:
            saved = bytearray(self._size)
            raw.aclrtMemcpy(_address(saved), self._size, self._range._base, self._size,
                            MemcpyKind.DEVICE_TO_HOST)
            self._saving = saved
        # Freed first, while still mapped: a retry of the free cannot hit a handle the
        # runtime gave someone else, as the mapping keeps this one alive.
        physical.close()
        mapping.close()
        # The commit: one statement, so the object is either offloading or offloaded.
        self._mapping, self._physical, self._saved, self._saving = None, None, self._saving, None

    @locked
    def restore(self) -> None:
        """Map fresh physical memory at the same addresses and copy the contents back."""
        self._open("restore")
        ensure_context(self.device)
        if self._saving is not None:
            self.offload()  # finish the interrupted offload first
        if self._mapping is not None:
            return
        physical: PhysicalMemory | None = None
        mapping: Mapping | None = None
        try:
            physical = PhysicalMemory(self._size, device=self._device, attr=self._attr)
            mapping = self._range.map(physical)
            if self._saved is not None:
                raw.aclrtMemcpy(self._range._base, self._size, _address(self._saved),
                                self._size, MemcpyKind.HOST_TO_DEVICE)
            # The commit: one statement, so the object is either offloaded or restored.
            self._physical, self._mapping, self._saved = physical, mapping, None
        except BaseException:
            if self._mapping is None:
                _undo([part.close for part in (physical, mapping) if part is not None])
            raise

    def _release(self) -> None:
        # Each part's close() records its own progress, so a retry continues here. The
        # physical memory is freed while still mapped (see offload()).
        if self._physical is not None:
            self._physical.close()
        if self._mapping is not None:
            self._mapping.close()
        self._range.close()


def reserve_and_map(size: int, *, device: Device | int = 0,
                    attr: int = MemAttr.HBM_MEM_HUGE) -> MappedMemory:
    """Reserve, allocate and map ``size`` bytes (rounded up to the granularity) at once.

    If any step fails, the earlier ones are undone and the original error is raised.
    """
    return MappedMemory(size, device=device, attr=attr)


class ExpandableSegment(_Contents):
    """One contiguous address range that grows and shrinks by granularity-sized chunks.

    The whole ``max_size`` is reserved up front; ``grow`` maps new chunks at the end,
    ``shrink`` unmaps and frees chunks from the end (torch_npu's expandable segments).
    A failed (or interrupted) grow leaves the segment as it was.
    """

    _renew = "create a new ExpandableSegment"

    def __init__(self, max_size: int, *, device: Device | int = 0,
                 attr: int = MemAttr.HBM_MEM_HUGE) -> None:
        limit = c_uint(max_size, "ExpandableSegment", "max_size")
        self._device = device = device_id(device, "ExpandableSegment")
        self._attr = attr
        self._chunk = granularity(device, attr)
        self._max_size = -(-limit // self._chunk) * self._chunk
        self._chunks: list[tuple[PhysicalMemory, Mapping]] = []
        token = state.token(None)
        # The range owns the reservation (its finalizer releases it) until this object
        # owns the range, in one statement.
        self._range, self._token = VirtualRange(self._max_size), token

    @property
    def device(self) -> int:
        """Id of the device the chunks are allocated on."""
        self._open("device")
        return self._device

    @property
    def attr(self) -> int:
        """The page attribute (MemAttr) of the chunks."""
        self._open("attr")
        return self._attr

    @property
    def chunk(self) -> int:
        """Bytes per chunk: the allocation granularity."""
        self._open("chunk")
        return self._chunk

    @property
    def max_size(self) -> int:
        """Bytes reserved up front: the most it can grow to."""
        self._open("max_size")
        return self._max_size

    @property
    def range(self) -> VirtualRange:
        """The reservation the chunks are mapped into."""
        self._open("range")
        return self._range

    @property
    def address(self) -> int:
        """The first address; chunks are mapped contiguously from here."""
        self._open("address")
        return self._range._base

    def _describe(self) -> str:
        return (f"{self._range._base:#x}, {_size_text(len(self._chunks) * self._chunk)} of "
                f"{_size_text(self._max_size)} mapped, device {self._device}")

    def _unmapped_advice(self) -> str:
        return "; call grow() to map more"

    @property
    def size(self) -> int:
        """Bytes mapped now (from ``address``); a chunk an interrupted shrink() began to
        release is not counted (the next shrink(), grow() or close() finishes it)."""
        self._open("size")
        return self._mapped()

    def _base_address(self) -> int:
        return self._range._base

    def _mapped(self) -> int:
        return self._whole() * self._chunk

    def _whole(self) -> int:
        """Chunks mapped and untouched: not the last one if a shrink() began on it."""
        count = len(self._chunks)
        return count - 1 if count and self._chunks[-1][0]._closing else count

    @locked
    def grow(self, size: int) -> None:
        """Map chunks until at least ``size`` bytes are mapped; all or nothing."""
        self._open("grow")
        ensure_context(self.device)
        self._shrink(self._whole())  # first finish a chunk an interrupted shrink() left
        wanted = -(-c_uint(size, "ExpandableSegment.grow", "size") // self._chunk)
        if wanted * self._chunk > self._max_size:
            raise ValueError(f"ExpandableSegment.grow: {size} exceeds max_size {self._max_size}")
        added: list[tuple[PhysicalMemory, Mapping]] = []
        physical: PhysicalMemory | None = None
        try:
            while len(self._chunks) + len(added) < wanted:
                physical = PhysicalMemory(self._chunk, device=self._device, attr=self._attr)
                offset = (len(self._chunks) + len(added)) * self._chunk
                added.append((physical, self._range.map(physical, offset)))
                physical = None
            self._chunks += added  # the commit, last: nothing after it can fail
        except BaseException:
            steps = [step for chunk, mapping in added for step in (chunk.close, mapping.close)]
            _undo([physical.close, *steps] if physical is not None else steps)
            raise

    @locked
    def shrink(self, size: int) -> None:
        """Unmap and free chunks from the end until at most ``size`` bytes stay mapped."""
        self._open("shrink")
        self._shrink(-(-c_uint(size, "ExpandableSegment.shrink", "size") // self._chunk))

    def _shrink(self, keep: int) -> None:
        # Steps from the end, each recorded by the part that did it: free the physical
        # memory (while mapped, see MappedMemory.offload), unmap, then drop the chunk.
        # An interrupt leaves the chunk listed, so the next call continues it.
        keep = min(keep, self._whole())
        while len(self._chunks) > keep:
            physical, mapping = self._chunks[-1]
            physical.close()
            mapping.close()
            self._chunks.pop()

    def _release(self) -> None:
        self._shrink(0)
        self._range.close()


def _address(buffer: bytearray) -> int:
    return int(ffi.cast("uintptr_t", ffi.from_buffer(buffer)))
