"""Owning buffers: device, DVPP and page-locked host memory.

A buffer frees its memory exactly once: :meth:`Buffer.free` swaps the pointer out
before calling the runtime, so a second call does nothing. Memory the user forgot is
freed when the buffer is collected, except in a forked child and after the runtime
already released it (device reset to zero references, aclFinalize). Using a freed
buffer raises :class:`~acl_mem.FreedBufferError`.

Because a buffer owns its memory, it cannot be copied (``copy.copy``, ``deepcopy``)
or pickled: a second owner would free the memory twice, and an address means nothing
in another process. Memory allocated elsewhere is wrapped without taking it over by
:meth:`DeviceBuffer.from_ptr` / :meth:`HostBuffer.from_ptr` ("borrowed" buffers).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias, overload

from typing_extensions import Buffer as BufferProtocol
from typing_extensions import Self

from . import _backend, raw
from ._args import c_uint
from ._context import as_device, ensure_context
from ._hostbuf import (
    _CHAR_ARRAY,
    _UINTPTR,
    BufferSlots,
    _cast,
    _from_buffer,
    dlpack_capsule,
    ffi,
    freed_variant,
    host_bytes,
)
from ._lifecycle import HOST, Epoch, close_on_exit, state
from ._runtime_facts import padding_of, release_of
from .enums import MemcpyKind, MemLocationType
from .errors import AclError, FreedBufferError, FunctionNotAvailableError
from .sizes import AllocApi, _release_before, allocation_size
from .stream import Stream

if TYPE_CHECKING:
    # Types only: numpy stays optional at run time (HostBuffer.numpy imports it on call).
    import numpy as _np
    from numpy.typing import DTypeLike, NDArray

    from .device import Device

__all__ = ["Buffer", "BufferLike", "DeviceBuffer", "HostBuffer"]

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
# Plain ints, read once: ``MemcpyKind.HOST_TO_DEVICE`` is a slow class attribute lookup,
# and a recording ships a batch of plain values with marshal, where one IntEnum in it
# makes the whole batch take the slower pickle.
_D2D, _H2D, _D2H, _H2H = (int(MemcpyKind.DEVICE_TO_DEVICE), int(MemcpyKind.HOST_TO_DEVICE),
                          int(MemcpyKind.DEVICE_TO_HOST), int(MemcpyKind.HOST_TO_HOST))

def _release_later(
    backend: _backend.Backend, call: str, ptr: int, token: Epoch,
) -> Callable[[Any], None]:
    """The destructor of a forgotten buffer: holds values only, never module globals."""

    def release(_: Any) -> None:
        if not token.live:
            return
        # A destructor must never raise; the memory is lost to this process anyway.
        with contextlib.suppress(Exception):
            getattr(backend, call)(ptr)

    return release


class Buffer:
    """Memory from one allocation call. Use :class:`DeviceBuffer` or :class:`HostBuffer`."""

    __slots__ = ("__weakref__", "_address", "_api", "_backend", "_device", "_owned",
                 "_policy", "_ptr", "_raw_free", "_size", "_token")
    is_device: bool = True

    def __init__(
        self, ptr: int, size: int, api: AllocApi, device: Device, policy: int = 0, *,
        owned: bool = True,
    ) -> None:
        """Wrap ``ptr``, which ``api`` allocated, and take ownership of it.

        The buffer frees ``ptr`` with ``api``'s free call when :meth:`free` is called or
        when it is collected. :class:`~acl_mem.Device` allocates and wraps in one step;
        to wrap memory that other code allocated, use :meth:`DeviceBuffer.from_ptr` or
        :meth:`HostBuffer.from_ptr`, which check their arguments and borrow by default.
        ``owned=False`` (what ``from_ptr`` passes) makes a borrowed wrapper that never
        frees.
        """
        self._size = size
        self._api = api
        self._policy = policy
        self._device = device
        # Pinned host memory outlives device resets and aclFinalize (HOST, §3.7).
        self._token = state.token(device._id if self.is_device else HOST)  # (.id, no call)
        #: raw's free call; its __name__ is the backend's (what a finalizer calls).
        self._raw_free: Callable[[int], None] = _RAW_FREE[_FREE_CALL[api]]
        self._backend = _backend._active or _backend.get()
        self._owned = owned
        self._address = ptr
        # Last: a constructor interrupted before this owns nothing (its creator frees).
        self._ptr = ptr

    def __del__(self) -> None:
        # The memory of a forgotten buffer goes back, unless the runtime already took it
        # (device reset, aclFinalize) or this is a forked child (its tokens are stale),
        # or it was borrowed.
        ptr = getattr(self, "_ptr", 0)
        # getattr throughout: an interrupted constructor may have stopped before these.
        token = getattr(self, "_token", None)
        if ptr and token is not None and getattr(self, "_owned", False) and \
                token.live:
            # contextlib.suppress would need a module global; a finalizer must never raise.
            try:  # noqa: SIM105
                getattr(self._backend, self._raw_free.__name__)(ptr)
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
                               padding=padding_of(self._backend))

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
        return self._ptr == 0 or not self._token.live

    @property
    def owned(self) -> bool:
        """True when this buffer frees its memory; False for a borrowed wrapper
        (:meth:`DeviceBuffer.from_ptr` / :meth:`HostBuffer.from_ptr`)."""
        return self._owned

    def __bool__(self) -> bool:
        """False once freed (or released by the runtime), True while usable."""
        return not self.freed

    def __repr__(self) -> str:
        # Never raises: it is what a debugger or a traceback shows, in any state.
        name = type(self).__name__
        if not hasattr(self, "_ptr"):  # set last: the constructor raised (or never ran)
            return f"<{name} not created>"
        kind = self._api.value if self._owned else "borrowed"
        address = getattr(self, "_address", 0)
        if self._ptr == 0:
            where = f"{'freed' if self._owned else 'dropped'} (was {address:#x})"
        elif not self._token.live:
            where = f"released by the runtime (was {address:#x})"
        elif self.freed:
            where = f"freed (was {address:#x})"
        else:
            where = f"ptr={address:#x}"
        extra = ""
        if self._owned and not self.freed:
            with contextlib.suppress(Exception):
                extra = f" allocated_size={self.allocated_size}"
        return f"<{name} {kind} {where} size={self._size}{extra} device={self._device.id}>"

    # -- copies are refused ------------------------------------------------------------------------
    def _what(self) -> str:
        return "device memory" if self.is_device else "page-locked host memory"

    def _no_copy(self, call: str) -> NoReturn:
        name = type(self).__name__
        if self._owned:
            why = (f"a {name} owns its {self._what()} and frees it once; a copy would be a "
                   "second owner that frees it again")
        else:
            why = (f"a borrowed {name} wraps {self._what()} owned elsewhere; copying the "
                   f"wrapper copies no bytes (wrap the address again with "
                   f"{name}.from_ptr(buf.ptr, buf.size))")
        alloc = "dev.malloc_host(buf.size)" if not self.is_device else "dev.malloc(buf.size)"
        raise TypeError(f"{call}({name}): {why}. To copy the bytes, allocate and copy: "
                        f"new = {alloc}; new.copy_from(buf)")

    def __copy__(self) -> NoReturn:
        self._no_copy("copy.copy")

    def __deepcopy__(self, memo: object) -> NoReturn:
        self._no_copy("copy.deepcopy")

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        name = type(self).__name__
        data = "bytes(buf) or buf.read()" if not self.is_device else "buf.read()"
        raise TypeError(
            f"cannot pickle {name}: it holds the address of {self._what()}, which means "
            f"nothing in another process (and a second owner would free it twice). Pickle "
            f"the bytes instead ({data}; DeviceArray.copy_to_host() for typed arrays) and "
            "copy them into new memory there"
        )

    def __reduce__(self) -> NoReturn:
        self.__reduce_ex__(2)

    # -- lifetime ----------------------------------------------------------------------------------
    def free(self) -> None:
        """Free now; a second call does nothing. Raises the runtime's AclError if it fails.

        A borrowed buffer (``owned`` False) only lets go of the address: the memory stays
        allocated for its owner.
        """
        ptr, self._ptr = self._ptr, 0
        if ptr:
            self._release(ptr)

    def _release(self, ptr: int) -> None:
        if self._owned and self._token.live:
            self._raw_free(ptr)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        close_on_exit(self.free, exc)

    def _check_live(self, what: str) -> None:
        if self._ptr == 0:
            raise FreedBufferError(f"{type(self).__name__}.{what}: the buffer was freed")
        if not self._token.live:
            raise FreedBufferError(
                f"{type(self).__name__}.{what}: the runtime released this memory "
                f"(device {self._device.id} reset, aclFinalize, fork or fake reconfigured)"
            )

    # -- data --------------------------------------------------------------------------------------
    def copy_from(
        self, src: BufferLike, count: int | None = None, *, offset: int = 0,
        src_offset: int = 0,
    ) -> None:
        """Copy ``count`` bytes (default: all of ``src`` after ``src_offset``) to ``offset``.

        ``src`` is another acl_mem buffer or any buffer-protocol object (a numpy array
        of Python objects is a TypeError, as for ``to_device``); the memcpy kind follows
        from where the two sides live. Both ranges are bounds-checked
        against the *requested* sizes, so the runtime's padding is never written.
        """
        # `is _ZERO`: true only for the int 0 itself (defaults included), never for False.
        if count is None and offset is _ZERO and src_offset is _ZERO and \
                _whole_host_copy(self, src, True):
            return
        _copy(self, offset, src, src_offset, count, "copy_from")

    def copy_to(
        self, dst: BufferLike, count: int | None = None, *, offset: int = 0,
        dst_offset: int = 0,
    ) -> None:
        """Copy ``count`` bytes from ``offset`` of this buffer into ``dst`` at ``dst_offset``."""
        if count is None and offset is _ZERO and dst_offset is _ZERO and \
                _whole_host_copy(self, dst, False):
            return
        _copy(dst, dst_offset, self, offset, count, "copy_to")

    def copy_from_async(
        self, src: BufferLike, count: int | None = None, *, offset: int = 0, src_offset: int = 0,
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
        self, dst: BufferLike, count: int | None = None, *, offset: int = 0, dst_offset: int = 0,
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
        """Set ``count`` bytes from ``offset`` (default: the rest) to ``value`` (0-255).
        Setting 0 bytes does nothing, on every CANN release (as copies of 0 bytes)."""
        start, n, byte = self._memset_args("memset", value, count, offset)
        if n:
            raw.aclrtMemset(self._ptr + start, self._size - start, byte, n)

    def memset_async(self, value: int, count: int | None = None, *, offset: int = 0,
                     stream: Stream | None = None) -> None:
        """:meth:`memset` queued on ``stream`` (default: the default stream), docs/runtime-model.md
        §3.11."""
        start, n, byte = self._memset_args("memset_async", value, count, offset)
        handle = self._stream(stream).handle
        if n:
            raw.aclrtMemsetAsync(self._ptr + start, self._size - start, byte, n, handle)

    def _memset_args(self, what: str, value: int, count: int | None,
                     offset: int) -> tuple[int, int, int]:
        call = f"{type(self).__name__}.{what}"
        self._check_live(what)
        ensure_context(self._device._id)
        byte = c_uint(value, call, "value", 8, "a byte 0-255")
        start = c_uint(offset, call, "offset")
        _check_range(call, "offset", start, 0, self._size)
        n = self._size - start if count is None else c_uint(count, call, "count")
        _check_range(call, "offset + count", start, n, self._size)
        return start, n, byte

    def address_range(self) -> tuple[int, int]:
        """``(base, size)`` the runtime reports for this block (docs/runtime-model.md §4.8).
        CANN 8.5.0 has no such call: :class:`~acl_mem.FunctionNotAvailableError` there."""
        ptr = self.ptr
        ensure_context(self._device._id)
        return raw.aclrtMemGetAddressRange(ptr)

    def attributes(self) -> raw.PtrAttributes:
        """Location type, device id and page size (docs/runtime-model.md §4.9)."""
        ptr = self.ptr
        ensure_context(self._device._id)
        return raw.aclrtPointerGetAttributes(ptr)


#: What a copy takes at either end: an acl_mem buffer or any buffer-protocol object (bytes,
#: bytearray, memoryview, numpy arrays); ``copy_to(5)`` is a type error. numpy arrays are
#: named: their stubs declare the buffer protocol only for Python 3.12 and later.
BufferLike: TypeAlias = "Buffer | BufferProtocol | NDArray[Any]"

_DEVICE_APIS = (AllocApi.MALLOC, AllocApi.MALLOC_ALIGN32, AllocApi.MALLOC_CACHED,
                AllocApi.DVPP_MALLOC, AllocApi.HI_MPI_DVPP_MALLOC)


def _wrap_args(call: str, ptr: object, size: object, owned: object) -> tuple[int, int]:
    """``from_ptr``'s checks: an address and a size as C integers, neither 0."""
    address = c_uint(ptr, call, "ptr", 64, "an address (uintptr_t)")
    if address == 0:
        raise ValueError(f"{call}: ptr is 0 (NULL): there is no memory to wrap")
    nbytes = c_uint(size, call, "size")
    if nbytes == 0:
        raise ValueError(f"{call}: size must be > 0, got 0")
    if not isinstance(owned, bool):
        raise TypeError(f"{call}: owned must be True or False, got {type(owned).__name__}")
    return address, nbytes


class DeviceBuffer(Buffer):
    """Device memory from aclrtMalloc, aclrtMallocAlign32, aclrtMallocCached or DVPP."""

    __slots__ = ()

    is_device = True

    def free(self) -> None:
        """Free now; a second call does nothing. Raises the runtime's AclError if it fails.

        A borrowed buffer (``owned`` False) only lets go of the address: the memory stays
        allocated for its owner.
        """
        # Buffer.free with _release spelled out: every device buffer's free runs this.
        ptr, self._ptr = self._ptr, 0
        if ptr and self._owned and self._token.live:
            self._raw_free(ptr)

    @classmethod
    def from_ptr(
        cls, ptr: int, size: int, *, device: Device | int | None = None, owned: bool = False,
        api: AllocApi | str = AllocApi.MALLOC, policy: int = 0,
    ) -> Self:
        """Wrap ``size`` bytes of device memory at ``ptr`` that other code allocated.

        By default the buffer is *borrowed*: :meth:`free` and collection only drop the
        wrapper and never free the memory, whose owner stays responsible for it. With
        ``owned=True`` the buffer takes ownership and frees it with ``api``'s free call
        (aclrtFree; acldvppFree or hi_mpi_dvpp_free for DVPP memory). ``device`` is the
        device the memory belongs to (default: the calling thread's current device);
        ``api`` and ``policy`` are the allocation's, for :attr:`allocated_size`.
        """
        call = f"{cls.__name__}.from_ptr"
        address, nbytes = _wrap_args(call, ptr, size, owned)
        try:
            chosen = AllocApi(api)
        except ValueError:
            raise ValueError(f"{call}: api must be one of "
                             f"{', '.join(a.value for a in _DEVICE_APIS)}, got {api!r}") from None
        if chosen not in _DEVICE_APIS:
            raise ValueError(f"{call}: api must be a device allocation call, got {chosen.value}")
        return cls(address, nbytes, chosen, as_device(call, device),
                   c_uint(policy, call, "policy", 32, "aclrtMemMallocPolicy"), owned=owned)


class HostBuffer(Buffer, BufferSlots):
    """Page-locked host memory from aclrtMallocHost, readable and writable in place.

    It exports its bytes without copying: ``memoryview(buf)`` is a writable view,
    ``numpy.frombuffer(buf, dtype)`` and ``numpy.asarray(buf)`` (uint8) are arrays over
    the memory, ``numpy.from_dlpack(buf)`` works through DLPack (a 1-D uint8 CPU
    tensor), and :meth:`view` / :meth:`numpy` do the same explicitly. :meth:`free`
    refuses while any of these is alive (freeing under a view would crash the
    interpreter); memory is released after the last one dies if the buffer is simply
    dropped.

    ``memoryview()`` of a freed buffer raises :class:`~acl_mem.FreedBufferError` on every
    Python (on 3.10 / 3.11, where the buffer protocol comes from a base class, a freed
    buffer becomes an instance of a subclass for that; only one whose memory the runtime
    released without free(), after a fork or a new fake, still gives SystemError there).
    """

    __slots__ = ("_handle",)
    is_device = False

    def __init__(self, ptr: int, size: int, api: AllocApi, device: Device, *,
                 owned: bool = True) -> None:
        """Wrap and own ``ptr`` from aclrtMallocHost (see :class:`Buffer`); to wrap memory
        allocated elsewhere, prefer :meth:`from_ptr`."""
        super().__init__(ptr, size, api, device, owned=owned)
        if owned:
            # Views hold this handle; the memory is released when the buffer and every
            # view are gone, never under a live view.
            release = _release_later(self._backend, self._raw_free.__name__, ptr, self._token)
            self._handle: Any = ffi.gc(ffi.cast("char *", ptr), release)
        else:
            self._handle = ffi.cast("char *", ptr)

    @classmethod
    def from_ptr(cls, ptr: int, size: int, *, owned: bool = False,
                 device: Device | int | None = None) -> Self:
        """Wrap ``size`` bytes of page-locked host memory at ``ptr`` that other code
        allocated (aclrtMallocHost).

        By default the buffer is *borrowed*: :meth:`free` and collection only drop the
        wrapper, never call aclrtFreeHost, and views of a borrowed buffer stay valid as
        long as the owner keeps the memory. With ``owned=True`` it takes ownership and
        frees with aclrtFreeHost. ``device`` (default: the current device) gives the
        default stream for asynchronous copies.
        """
        call = f"{cls.__name__}.from_ptr"
        address, nbytes = _wrap_args(call, ptr, size, owned)
        _check_host_range(call, address, nbytes)
        return cls(address, nbytes, AllocApi.MALLOC_HOST, as_device(call, device),
                   owned=owned)

    def __del__(self) -> None:
        return None

    def free(self) -> None:
        super().free()
        _mark_freed(self)

    def view(self) -> memoryview:
        """A writable memoryview of the requested bytes (no copy)."""
        return self._view("view")

    def _view(self, what: str) -> memoryview:
        self._check_live(what)
        # The fake reports a view taken while queued work will still write here.
        self._backend.check_pending(self._ptr, self._size, access="read",
                                    what=f"{type(self).__name__}.{what}()")
        view = memoryview(ffi.buffer(self._handle, self._size))
        # A free() on another thread between the check above and the view would not
        # have seen it; it is seen now, and the view is taken back before any use.
        if self._ptr == 0:
            view.release()
            self._check_live(what)
        return view

    @overload
    def numpy(self) -> NDArray[_np.uint8]: ...
    @overload
    def numpy(self, dtype: DTypeLike) -> NDArray[Any]: ...
    def numpy(self, dtype: DTypeLike = "uint8") -> NDArray[Any]:
        """A numpy array over the memory (needs numpy; no copy): uint8 unless ``dtype``
        says otherwise."""
        import numpy

        return numpy.frombuffer(self.view(), dtype=dtype)

    # -- exports -----------------------------------------------------------------------------------
    def __buffer__(self, flags: int, /) -> memoryview:
        """The buffer protocol (PEP 688): ``memoryview(buf)``, ``bytes(buf)``,
        ``numpy.frombuffer(buf)``; the same view as :meth:`view`."""
        return self._view("__buffer__")

    def __release_buffer__(self, view: memoryview, /) -> None:
        """Nothing to do: the view from :meth:`__buffer__` holds the memory until released.

        Defined so that consumers such as numpy keep the export (and with it the
        refusal to free) for as long as they use the memory.
        """

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Any:
        """``numpy.asarray(buf)``: the bytes as a 1-D uint8 array (no copy unless asked).

        numpy takes the buffer protocol first; this also answers where that cannot
        raise (a freed buffer on Python < 3.12 gives FreedBufferError here).
        """
        import numpy

        array = numpy.frombuffer(self._view("__array__"), dtype=numpy.uint8)
        if dtype is not None and numpy.dtype(dtype) != array.dtype:
            if copy is False:
                raise ValueError(f"{type(self).__name__}.__array__: dtype {dtype} needs a "
                                 "converting copy of the uint8 bytes, but copy=False")
            return array.astype(dtype)
        return array.copy() if copy else array

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None,
                   copy: bool | None = None) -> Any:
        """DLPack export: a 1-D uint8 tensor on the CPU (``numpy.from_dlpack(buf)``).

        No copy unless ``copy=True``. The memory stays valid, and :meth:`free` refuses,
        until the consumer calls the tensor's deleter (numpy: when the array dies).
        ``stream`` must be None (a CPU tensor has none); synchronise queued copies into
        this memory first. ``max_version`` of (1, x) or more gives a DLPack 1.0
        ``dltensor_versioned`` capsule (writable, as the memory is), older consumers
        get a legacy ``dltensor`` capsule.
        """
        name = f"{type(self).__name__}.__dlpack__"
        if stream is not None:
            raise ValueError(f"{name}: stream must be None for a CPU tensor, got {stream!r}; "
                             "synchronise the acl_mem stream before exporting")
        if dl_device is not None:
            if not _int_pair(dl_device):
                raise TypeError(f"{name}: dl_device must be None or a (device_type, "
                                f"device_id) pair of ints, got {dl_device!r}")
            if tuple(dl_device) != self.__dlpack_device__():
                raise BufferError(f"{name}: the memory is on the CPU "
                                  f"{self.__dlpack_device__()}, dl_device={dl_device!r} "
                                  "would need a copy to another device")
        if max_version is not None and not (isinstance(max_version, tuple)
                                            and _int_pair(max_version)):
            raise TypeError(f"{name}: max_version must be None or a (major, minor) tuple of "
                            f"ints, got {max_version!r}")
        versioned = max_version is not None and max_version[0] >= 1
        view = self._view("__dlpack__")
        if copy:
            keep: Any = ffi.new("char[]", self._size)
            ffi.memmove(keep, view, self._size)
            view.release()
            address = int(ffi.cast("uintptr_t", keep))
        else:
            keep, address = view, self._ptr
        return dlpack_capsule(address, self._size, keep, versioned=versioned,
                              copied=bool(copy))

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(kDLCPU, 0)``: page-locked memory is host memory to DLPack consumers."""
        return (1, 0)  # kDLCPU, device 0

    def _release(self, ptr: int) -> None:
        if not self._owned:
            return
        views = sys.getrefcount(self._handle) - 2
        if views > 0:
            self._ptr = ptr
            raise BufferError(
                f"HostBuffer.free: {views} view(s) of this memory are still alive; "
                "delete them (or call memoryview.release()) before freeing"
            )
        ffi.gc(self._handle, None)
        super()._release(ptr)


def _refuse_freed(buffer: HostBuffer) -> None:
    buffer._check_live("__buffer__")


#: Python 3.10 / 3.11: the freed variant of each host buffer class (None: not needed or
#: not possible), made when an instance is first freed; and the variants themselves.
_FREED_VARIANTS: dict[type, type | None] = {}
_VARIANTS: set[type] = set()


def _mark_freed(buffer: HostBuffer) -> None:
    """Once ``buffer`` is freed, ``memoryview(buffer)`` raises FreedBufferError, not
    SystemError (acl_mem/_hostbuf.py, freed_variant): its class becomes its freed
    variant (same layout, so the swap is safe)."""
    cls = type(buffer)
    if buffer._ptr != 0 or cls in _VARIANTS:
        return
    if cls not in _FREED_VARIANTS:
        variant = freed_variant(cls, _refuse_freed)
        if variant is not None:
            _VARIANTS.add(variant)
        _FREED_VARIANTS[cls] = variant
    freed = _FREED_VARIANTS[cls]
    if freed is not None:
        buffer.__class__ = freed


def _check_host_range(call: str, address: int, nbytes: int) -> None:
    """Refuse to wrap as host memory what views would crash on: an address the runtime
    reports as device memory or cannot classify (docs/runtime-model.md §4.9), or more
    bytes than the runtime's block holds from ``address`` (§4.8, where the call exists).
    Pageable memory the runtime does not track is taken at the caller's word."""
    try:
        where = raw.aclrtPointerGetAttributes(address)
    except AclError as exc:
        raise ValueError(f"{call}: the runtime does not know {address:#x} as host memory "
                         f"({exc.name}); wrap memory from aclrtMallocHost") from None
    if where.type == MemLocationType.DEVICE:
        raise ValueError(f"{call}: {address:#x} is device memory (device {where.id}), which "
                         "the host cannot view; wrap it with DeviceBuffer.from_ptr")
    if where.type != MemLocationType.HOST:
        return
    if _release_before(release_of(_backend.get()), (9, 0, 1)):
        return  # CANN 8.5.0 has no aclrtMemGetAddressRange: not even asked
    try:
        base, length = raw.aclrtMemGetAddressRange(address)
    except (AclError, FunctionNotAvailableError):
        return  # no block to check against (CANN 8.5.0, registered memory)
    if address + nbytes > base + length:
        raise ValueError(f"{call}: size {nbytes} runs past the end of the host block at "
                         f"{base:#x}, which has {base + length - address} bytes from "
                         f"{address:#x}")


def _int_pair(value: object) -> bool:
    """Whether ``value`` is a tuple or list of two ints (bool is not an int here)."""
    return isinstance(value, (tuple, list)) and len(value) == 2 and all(
        isinstance(item, int) and not isinstance(item, bool) for item in value)


def _refuse_objects(obj: object, call: str, name: str) -> None:
    """TypeError for memory of Python object pointers (a numpy object array), as
    ``to_device`` refuses it: copied bytes would be addresses that mean nothing on the
    other side, and written ones would corrupt the objects."""
    dtype = getattr(obj, "dtype", None)
    objects = bool(getattr(dtype, "hasobject", False)) if dtype is not None else \
        isinstance(obj, memoryview) and "O" in obj.format
    if objects:
        raise TypeError(f"{call}: {name} holds Python objects ({dtype or 'format O'}); their "
                        "addresses mean nothing in device memory")


def _check_range(call: str, what: str, start: int, count: int, limit: int) -> None:
    if start + count > limit:
        raise ValueError(f"{call}: {what} = {start + count} exceeds the buffer size {limit}")


_ZERO = 0
#: Host objects whose whole memory _whole_host_copy takes: type -> whether its dtype must
#: be checked for Python objects. numpy's ndarray joins on its first copy (numpy is
#: optional: nothing here imports it).
_PLAIN_HOST: dict[type, bool] = {bytes: False, bytearray: False}


def _learn_ndarray(host: object) -> bool:
    numpy = sys.modules.get("numpy")
    if numpy is None or type(host) is not numpy.ndarray:
        return False
    _PLAIN_HOST[numpy.ndarray] = True
    return True


def _whole_host_copy(buf: Buffer, host: Any, to_buffer: bool) -> bool:
    """The commonest copy, without :func:`_copy`'s generality: all of ``host`` (bytes,
    bytearray, a numpy array) into the start of the live ``buf``, or all of ``buf`` into
    ``host``. False when that is not the case, having done nothing: :func:`_copy` then
    takes the copy and raises what is wrong with it."""
    objects = _PLAIN_HOST.get(type(host))
    if objects is None:
        if not _learn_ndarray(host):
            return False
        objects = True
    ptr = buf._ptr
    if not ptr or not buf._token.live or (objects and host.dtype.hasobject):
        return False
    try:
        keep = _from_buffer(_CHAR_ARRAY, host, not to_buffer)  # type: ignore[call-overload]
    except (TypeError, ValueError, BufferError):  # not contiguous, read-only
        return False
    address, length, size = int(_cast(_UINTPTR, keep)), len(keep), buf._size
    if to_buffer:
        if length > size:
            return False
        dst, dst_max, src, count = ptr, size, address, length
        kind = _H2D if buf.is_device else _H2H
    else:
        if size > length:
            return False
        dst, dst_max, src, count = address, length, ptr, size
        kind = _D2H if buf.is_device else _H2H
    if count:
        if state.current_device() is None:
            ensure_context(buf._device._id)
        raw.aclrtMemcpy(dst, dst_max, src, count, kind)
    del keep  # the host object's memory stays exported until the copy is done
    return True


def _copy(dst: object, dst_offset: int, src: object, src_offset: int, count: int | None,
          call: str, stream: Stream | None = None) -> None:
    # Both ends, dst first (every copy runs this): a live buffer is read as it is,
    # anything else is host memory (host_bytes, kept alive until the copy is done).
    dst_buf: Buffer | None
    src_buf: Buffer | None
    dst_keep: Any
    src_keep: Any
    if isinstance(dst, Buffer):
        if not dst._ptr or not dst._token.live:
            dst._check_live(call)  # raises the error that says which
        dst_addr, dst_size, dst_buf, dst_keep = dst._ptr, dst._size, dst, None
    else:
        if type(dst) is not bytearray:
            _refuse_objects(dst, call, "dst")
        dst_addr, dst_size, dst_keep = host_bytes(dst, True, call, "dst")
        dst_buf = None
    if isinstance(src, Buffer):
        if not src._ptr or not src._token.live:
            src._check_live(call)
        src_addr, src_size, src_buf, src_keep = src._ptr, src._size, src, None
    else:
        if type(src) is not bytes:
            _refuse_objects(src, call, "src")
        src_addr, src_size, src_keep = host_bytes(src, False, call, "src")
        src_buf = None
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
    # The kind follows from where the two sides live.
    dst_dev = dst_buf is not None and dst_buf.is_device
    src_dev = src_buf is not None and src_buf.is_device
    kind = (_D2D if src_dev else _H2D) if dst_dev else _D2H if src_dev else _H2H
    if state.current_device() is None:
        # A worker thread that only copies gets the context of the device involved.
        owner = dst_buf if dst_dev or src_buf is None else src_buf
        if owner is not None:
            ensure_context(owner._device._id)
    # The host objects (dst_keep, src_keep) stay alive until the call returns.
    if stream is None:
        raw.aclrtMemcpy(dst_addr + d_off, dst_size - d_off, src_addr + s_off, n, kind)
    else:
        raw.aclrtMemcpyAsync(dst_addr + d_off, dst_size - d_off, src_addr + s_off, n,
                             kind, stream.handle)
    del dst_keep, src_keep


