"""Owning buffers: device, DVPP and page-locked host memory.

A buffer frees its memory exactly once: :meth:`Buffer.free` swaps the pointer out
before calling the runtime, so a second call does nothing. Memory the user forgot is
freed when the buffer is collected, except in a forked child and after the runtime
already released it (device reset to zero references, aclFinalize). Using a freed
buffer raises :class:`~acl_mem.FreedBufferError`.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import _backend, raw
from ._args import c_uint
from ._hostbuf import HostSpan, ffi, host_span, vouching
from ._lifecycle import State, state
from .enums import MemcpyKind
from .errors import FreedBufferError
from .sizes import AllocApi, allocation_size, soc_padding
from .stream import Stream

if TYPE_CHECKING:
    from .device import Device

__all__ = ["Buffer", "DeviceBuffer", "HostBuffer"]

_FREE_CALL = {
    AllocApi.MALLOC: "aclrtFree",
    AllocApi.MALLOC_ALIGN32: "aclrtFree",
    AllocApi.MALLOC_CACHED: "aclrtFree",
    AllocApi.MALLOC_HOST: "aclrtFreeHost",
    AllocApi.DVPP_MALLOC: "acldvppFree",
    AllocApi.HI_MPI_DVPP_MALLOC: "hi_mpi_dvpp_free",
}


_RAW_FREE: dict[str, Callable[[int], None]] = {
    name: getattr(raw, name) for name in set(_FREE_CALL.values())
}
#: Weak: a cached padding must not keep a replaced backend (and its memory) alive.
_PADDING: weakref.WeakKeyDictionary[_backend.Backend, int] = weakref.WeakKeyDictionary()


def _padding(backend: _backend.Backend) -> int:
    """The SoC's padding size, asked once per backend object (once the SoC is known)."""
    padding = _PADDING.get(backend)
    if padding is None:
        soc = backend.soc_name()
        padding = soc_padding(soc)
        if soc:
            _PADDING[backend] = padding
    return padding


def _release_later(
    backend: _backend.Backend, call: str, ptr: int, device_id: int | None,
    token: tuple[int, int], lifecycle: State = state,
) -> Callable[[Any], None]:
    """The destructor of a forgotten buffer: holds values only, never module globals."""

    def release(_: Any) -> None:
        if not lifecycle.is_live(device_id, token):
            return
        # A destructor must never raise; the memory is lost to this process anyway.
        with contextlib.suppress(Exception):
            getattr(backend, call)(ptr)

    return release


class Buffer:
    """Memory from one allocation call. Use :class:`DeviceBuffer` or :class:`HostBuffer`."""

    __slots__ = ("__weakref__", "_api", "_backend", "_device", "_free_name", "_owner",
                 "_policy", "_ptr", "_raw_free", "_size", "_token")
    is_device: bool = True
    #: Kept on the class so that ``__del__`` needs no module global at interpreter exit.
    _lifecycle: State = state

    def __init__(
        self, ptr: int, size: int, api: AllocApi, device: Device, policy: int = 0
    ) -> None:
        self._size = size
        self._api = api
        self._policy = policy
        self._device = device
        self._owner = owner = device.id if self.is_device else None
        self._token = state.token(owner)
        self._free_name = call = _FREE_CALL[api]
        self._raw_free: Callable[[int], None] = _RAW_FREE[call]
        self._backend = _backend.get()
        # Last: a constructor interrupted before this owns nothing (its creator frees).
        self._ptr = ptr

    def __del__(self) -> None:
        # The memory of a forgotten buffer goes back, unless the runtime already took it
        # (device reset, aclFinalize) or this is a forked child (its tokens are stale).
        ptr = getattr(self, "_ptr", 0)
        # getattr throughout: an interrupted constructor may have stopped before these.
        token = getattr(self, "_token", None)
        if ptr and token is not None and \
                self._lifecycle.is_live(getattr(self, "_owner", None), token):
            # contextlib.suppress would need a module global; a finalizer must never raise.
            try:  # noqa: SIM105
                getattr(self._backend, self._free_name)(ptr)
            except Exception:
                pass

    # -- identity ----------------------------------------------------------------------------------
    @property
    def ptr(self) -> int:
        """The address; raises FreedBufferError once freed."""
        self._check_live("ptr")
        return self._ptr

    @property
    def size(self) -> int:
        """Bytes requested."""
        return self._size

    @property
    def allocated_size(self) -> int:
        """Bytes the runtime reserved: padding and 32-byte rounding included (docs/runtime-model.md
        §3.5, §7)."""
        # Computed on demand: allocation stays as cheap as possible.
        return allocation_size(self._api, self._size, self._policy,
                               padding=_padding(self._backend))

    @property
    def api(self) -> AllocApi:
        """The C call that allocated this buffer."""
        return self._api

    @property
    def device(self) -> Device:
        """The device whose context allocated this buffer."""
        return self._device

    @property
    def freed(self) -> bool:
        """True once freed, or once the runtime released the memory (device reset)."""
        return self._ptr == 0 or not state.is_live(self._owner, self._token)

    def __repr__(self) -> str:
        where = "freed" if self.freed else f"ptr={self._ptr:#x}"
        return (f"<{type(self).__name__} {self._api.value} {where} size={self._size} "
                f"allocated_size={self.allocated_size} device={self._device.id}>")

    # -- lifetime ----------------------------------------------------------------------------------
    def free(self) -> None:
        """Free now; a second call does nothing. Raises the runtime's AclError if it fails."""
        ptr, self._ptr = self._ptr, 0
        if ptr:
            self._release(ptr)

    def _release(self, ptr: int) -> None:
        if state.is_live(self._owner, self._token):
            self._raw_free(ptr)

    def __enter__(self) -> Buffer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.free()

    def _check_live(self, what: str) -> None:
        if self._ptr == 0:
            raise FreedBufferError(f"{type(self).__name__}.{what}: the buffer was freed")
        if not state.is_live(self._owner, self._token):
            raise FreedBufferError(
                f"{type(self).__name__}.{what}: the runtime released this memory "
                f"(device {self._device.id} reset, aclFinalize, fork or fake reconfigured)"
            )

    # -- data --------------------------------------------------------------------------------------
    def copy_from(
        self, src: object, count: int | None = None, *, offset: int = 0, src_offset: int = 0
    ) -> None:
        """Copy ``count`` bytes (default: all of ``src`` after ``src_offset``) to ``offset``.

        ``src`` is another acl_mem buffer or any buffer-protocol object; the memcpy
        kind follows from where the two sides live. Both ranges are bounds-checked
        against the *requested* sizes, so the runtime's padding is never written.
        """
        _copy(self, offset, src, src_offset, count, "copy_from")

    def copy_to(
        self, dst: object, count: int | None = None, *, offset: int = 0, dst_offset: int = 0
    ) -> None:
        """Copy ``count`` bytes from ``offset`` of this buffer into ``dst`` at ``dst_offset``."""
        _copy(dst, dst_offset, self, offset, count, "copy_to")

    def copy_from_async(
        self, src: object, count: int | None = None, *, offset: int = 0, src_offset: int = 0,
        stream: Stream | None = None,
    ) -> None:
        """:meth:`copy_from` queued on ``stream`` (default: the default stream),
        docs/runtime-model.md §3.10.

        The copy is done only after ``stream.synchronize()``. With pageable host memory
        (bytes, numpy) the runtime copies at once instead; with :class:`HostBuffer`
        memory it really is queued, so keep that buffer alive until then.
        """
        _copy(self, offset, src, src_offset, count, "copy_from_async",
              self._stream(stream))

    def copy_to_async(
        self, dst: object, count: int | None = None, *, offset: int = 0, dst_offset: int = 0,
        stream: Stream | None = None,
    ) -> None:
        """:meth:`copy_to` queued on ``stream`` (default: the default stream), docs/runtime-model.md
        §3.10."""
        _copy(dst, dst_offset, self, offset, count, "copy_to_async", self._stream(stream))

    def _stream(self, stream: Stream | None) -> Stream:
        if stream is None:
            return self._device.default_stream
        if not isinstance(stream, Stream):
            raise TypeError(f"stream must be an acl_mem.Stream or None, got "
                            f"{type(stream).__name__}")
        return stream

    def read(self, count: int | None = None, offset: int = 0) -> bytes:
        """A bytes copy of ``count`` bytes from ``offset`` (default: to the end)."""
        self._check_live("read")
        start = c_uint(offset, "Buffer.read", "offset")
        _check_range("Buffer.read", "offset", start, 0, self._size)
        n = self._size - start if count is None else c_uint(count, "Buffer.read", "count")
        _check_range("Buffer.read", "offset + count", start, n, self._size)
        out = bytearray(n)
        _copy(out, 0, self, start, n, "read")
        return bytes(out)

    def memset(self, value: int, count: int | None = None, *, offset: int = 0) -> None:
        """Set ``count`` bytes from ``offset`` (default: the rest) to ``value`` (0-255)."""
        start, n, byte = self._memset_args("memset", value, count, offset)
        raw.aclrtMemset(self._ptr + start, self._size - start, byte, n)

    def memset_async(self, value: int, count: int | None = None, *, offset: int = 0,
                     stream: Stream | None = None) -> None:
        """:meth:`memset` queued on ``stream`` (default: the default stream), docs/runtime-model.md
        §3.11."""
        start, n, byte = self._memset_args("memset_async", value, count, offset)
        handle = self._stream(stream).handle
        raw.aclrtMemsetAsync(self._ptr + start, self._size - start, byte, n, handle)

    def _memset_args(self, what: str, value: int, count: int | None,
                     offset: int) -> tuple[int, int, int]:
        call = f"{type(self).__name__}.{what}"
        self._check_live(what)
        byte = c_uint(value, call, "value", 8, "a byte 0-255")
        start = c_uint(offset, call, "offset")
        _check_range(call, "offset", start, 0, self._size)
        n = self._size - start if count is None else c_uint(count, call, "count")
        _check_range(call, "offset + count", start, n, self._size)
        return start, n, byte

    def address_range(self) -> tuple[int, int]:
        """``(base, size)`` the runtime reports for this block (docs/runtime-model.md §4.8)."""
        return raw.aclrtMemGetAddressRange(self.ptr)

    def attributes(self) -> raw.PtrAttributes:
        """Location type, device id and page size (docs/runtime-model.md §4.9)."""
        return raw.aclrtPointerGetAttributes(self.ptr)


class DeviceBuffer(Buffer):
    """Device memory from aclrtMalloc, aclrtMallocAlign32, aclrtMallocCached or DVPP."""

    __slots__ = ()

    is_device = True


class HostBuffer(Buffer):
    """Page-locked host memory from aclrtMallocHost, readable and writable in place.

    :meth:`view` gives a memoryview without copying; ``numpy.frombuffer(buf.view(),
    dtype)`` gives an array. :meth:`free` refuses while views are alive (freeing
    under a view would crash the interpreter); memory is released after the last
    view dies if the buffer is simply dropped.
    """

    __slots__ = ("_handle",)
    is_device = False

    def __init__(self, ptr: int, size: int, api: AllocApi, device: Device) -> None:
        super().__init__(ptr, size, api, device)
        # Views hold this handle; the memory is released when the buffer and every view
        # are gone, never under a live view.
        release = _release_later(self._backend, self._free_name, ptr, None, self._token)
        self._handle: Any = ffi.gc(ffi.cast("char *", ptr), release)

    def __del__(self) -> None:
        return None

    def view(self) -> memoryview:
        """A writable memoryview of the requested bytes (no copy)."""
        self._check_live("view")
        # The fake reports a view taken while queued work will still write here.
        check_pending = getattr(self._backend, "check_pending", None)
        if check_pending is not None:
            check_pending(self._ptr, self._size, access="read", what="HostBuffer.view()")
        view = memoryview(ffi.buffer(self._handle, self._size))
        # A free() on another thread between the check above and the view would not
        # have seen it; it is seen now, and the view is taken back before any use.
        if self._ptr == 0:
            view.release()
            self._check_live("view")
        return view

    def numpy(self, dtype: Any = "uint8") -> Any:
        """A numpy array over the memory (needs numpy; no copy)."""
        import numpy

        return numpy.frombuffer(self.view(), dtype=dtype)

    def _release(self, ptr: int) -> None:
        views = sys.getrefcount(self._handle) - 2
        if views > 0:
            self._ptr = ptr
            raise BufferError(
                f"HostBuffer.free: {views} view(s) of this memory are still alive; "
                "delete them (or call memoryview.release()) before freeing"
            )
        ffi.gc(self._handle, None)
        super()._release(ptr)


def _check_range(call: str, what: str, start: int, count: int, limit: int) -> None:
    if start + count > limit:
        raise ValueError(f"{call}: {what} = {start + count} exceeds the buffer size {limit}")


def _endpoint(obj: object, writable: bool, call: str, name: str) -> tuple[int, int, Buffer | None,
                                                                        HostSpan | None]:
    if isinstance(obj, Buffer):
        obj._check_live(call)
        return obj._ptr, obj._size, obj, None
    span = host_span(obj, writable=writable, call=call, name=name)
    return span.address, span.nbytes, None, span


def _kind(dst: Buffer | None, src: Buffer | None) -> MemcpyKind:
    dst_dev = dst is not None and dst.is_device
    src_dev = src is not None and src.is_device
    if dst_dev and src_dev:
        return MemcpyKind.DEVICE_TO_DEVICE
    if dst_dev:
        return MemcpyKind.HOST_TO_DEVICE
    return MemcpyKind.DEVICE_TO_HOST if src_dev else MemcpyKind.HOST_TO_HOST


def _copy(dst: object, dst_offset: int, src: object, src_offset: int, count: int | None,
          call: str, stream: Stream | None = None) -> None:
    dst_addr, dst_size, dst_buf, dst_keep = _endpoint(dst, True, call, "dst")
    src_addr, src_size, src_buf, src_keep = _endpoint(src, False, call, "src")
    # Offsets are 0 and count None nearly always: no checking call for those.
    d_off = 0 if dst_offset == 0 and type(dst_offset) is int else \
        c_uint(dst_offset, call, "dst offset")
    s_off = 0 if src_offset == 0 and type(src_offset) is int else \
        c_uint(src_offset, call, "src offset")
    if s_off > src_size:
        raise ValueError(f"{call}: src offset {s_off} exceeds the source size {src_size}")
    n = src_size - s_off if count is None else c_uint(count, call, "count")
    if s_off + n > src_size:
        _check_range(call, "src offset + count", s_off, n, src_size)
    if d_off + n > dst_size:
        _check_range(call, "dst offset + count", d_off, n, dst_size)
    if (dst_buf is not None and src_buf is not None and dst_buf.is_device and src_buf.is_device
            and dst_buf.device.id != src_buf.device.id):
        raise ValueError(
            f"{call}: device {src_buf.device.id} to device {dst_buf.device.id} copies need "
            "peer access, which acl_mem does not enable; stage through host memory"
        )
    if n == 0:
        return
    if dst_keep is None:
        spans: tuple[tuple[int, int], ...] = () if src_keep is None else \
            ((src_keep.address, src_keep.nbytes),)
    else:
        spans = ((dst_keep.address, dst_keep.nbytes),) if src_keep is None else \
            ((dst_keep.address, dst_keep.nbytes), (src_keep.address, src_keep.nbytes))
    try:
        vouching(spans)
        if stream is None:
            raw.aclrtMemcpy(dst_addr + d_off, dst_size - d_off, src_addr + s_off, n,
                            _kind(dst_buf, src_buf))
        else:
            raw.aclrtMemcpyAsync(dst_addr + d_off, dst_size - d_off, src_addr + s_off, n,
                                 _kind(dst_buf, src_buf), stream.handle)
    finally:
        vouching(())
        del dst_keep, src_keep


