"""Segments: buffers whose free() and finalizer give the range back to their pool."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .._hostbuf import ffi
from ..buffers import Buffer, DeviceBuffer, HostBuffer, _mark_freed
from ..errors import FreedBufferError

if TYPE_CHECKING:
    from ._base import _PoolBase


class _SegmentBase(Buffer):
    """What a segment changes in a buffer: its memory goes back to its pool."""

    __slots__ = ()
    _pool: _PoolBase[Any]
    _extent: int
    _serial: int

    def free(self) -> None:
        """Give the range back to the pool now; a second call does nothing."""
        ptr = 0
        try:
            ptr, self._ptr = self._ptr, 0
            if ptr:
                self._release(ptr)
        except BaseException:
            if ptr and not self._ptr:
                # Stopped after the segment let go of its range: finish the return now
                # (a second return of the same allocation does nothing, see _free), or
                # queue it for the next pool call.
                try:
                    self._release(ptr)
                except Exception:
                    self._pool.segment_dropped(ptr, self._serial)
            raise
        finally:
            if isinstance(self, HostBuffer):
                _mark_freed(self)  # a freed host segment's export raises FreedBufferError

    @property
    def pool(self) -> _PoolBase[Any]:
        """The pool this segment came from."""
        return self._pool

    @property
    def allocated_size(self) -> int:
        """The §3.14 segment size: ``ALIGN_UP(size, 32) + 32`` (no +32 on Ascend950)."""
        return self._extent

    @property
    def freed(self) -> bool:
        """True once freed, once the pool is closed, or once the runtime released it."""
        return (self._pool.closed or self._ptr == 0
                or not self._token.live)

    def _check_live(self, what: str) -> None:
        if self._pool.closed:
            raise FreedBufferError(f"{type(self).__name__}.{what}: its pool was closed")
        super()._check_live(what)

    def _release(self, ptr: int) -> None:
        self._pool.segment_freed(ptr, self._serial)

    def __del__(self) -> None:
        # Never take the pool's lock here: queue the address for the next pool call.
        ptr = getattr(self, "_ptr", 0)
        pool = getattr(self, "_pool", None)  # None: the constructor was interrupted
        if ptr and pool is not None:
            pool.segment_dropped(ptr, self._serial)


class Segment(_SegmentBase, DeviceBuffer):
    """A device-memory segment of a pool: a :class:`~acl_mem.DeviceBuffer` whose ``free()``
    and finalizer return the range to the pool.

    ``ptr`` and ``size`` are the segment's; :meth:`address_range` still reports the
    runtime's parent block (the runtime knows nothing of segments).
    """

    __slots__ = ("_extent", "_pool", "_serial")

    def __init__(self, pool: _PoolBase[Any], ptr: int, size: int, extent: int, serial: int) -> None:
        # The pool first: the finalizer needs it as soon as there is a pointer to return.
        self._pool = pool
        self._extent = extent
        self._serial = serial
        Buffer.__init__(self, ptr, size, pool._api, pool._device, pool._policy)
        self._token = pool._segments_epoch


class _GiveBack:
    """Destructor of a host segment's memory handle: runs after the segment and its last
    view are gone, and keeps the parent block's own handle alive until then."""

    __slots__ = ("parent", "pool", "ptr", "serial")

    def __init__(self, pool: _PoolBase[Any], ptr: int, serial: int, parent: Any) -> None:
        self.pool, self.ptr, self.serial, self.parent = pool, ptr, serial, parent

    def __call__(self, _: Any) -> None:
        self.pool.segment_dropped(self.ptr, self.serial)


class HostSegment(_SegmentBase, HostBuffer):
    """A page-locked host segment of an aclrtMallocHost pool: :meth:`view` and
    :meth:`numpy` work as on :class:`~acl_mem.HostBuffer`; ``free()`` refuses while views
    are alive, and the parent block stays allocated until the last view is gone."""

    __slots__ = ("_extent", "_pool", "_serial")

    def __init__(self, pool: _PoolBase[Any], ptr: int, size: int, extent: int, serial: int) -> None:
        self._pool = pool
        self._extent = extent
        self._serial = serial
        Buffer.__init__(self, ptr, size, pool._api, pool._device)
        self._token = pool._segments_epoch
        release = _GiveBack(pool, ptr, serial, pool.segment_keepalive(ptr))
        self._handle = ffi.gc(ffi.cast("char *", ptr), release)

    def __del__(self) -> None:
        # The handle's destructor gives the memory back once every view is gone too.
        return None

    def _release(self, ptr: int) -> None:
        views = sys.getrefcount(self._handle) - 2
        if views > 0:
            self._ptr = ptr
            raise BufferError(
                f"HostSegment.free: {views} view(s) of this memory are still alive; "
                "delete them (or call memoryview.release()) before freeing")
        ffi.gc(self._handle, None)
        self._pool.segment_freed(ptr, self._serial)
