"""Typed device arrays: a numpy shape and dtype over device memory (no compute).

Like Numba's device arrays: :func:`to_device` copies a numpy array into new device
memory, :meth:`DeviceArray.copy_to_host` copies it back, :func:`empty` allocates
without copying. Arrays are C-contiguous; the memory is one aclrtMalloc block
(docs/runtime-model.md §3.5) that the array owns, and copies are aclrtMemcpy /
aclrtMemcpyAsync (§3.10).

numpy is not a dependency of acl_mem: it is imported when these functions run, and
its absence raises ImportError saying to ``pip install numpy``.

Zero-size arrays (a 0 in the shape) allocate nothing, since the runtime refuses size 0
(§3.5): they have no :attr:`~DeviceArray.buffer` and their copies move nothing.

With ``stream=`` a copy is queued on that stream (§3.4) and done only after
``stream.synchronize()``: until then, the host array must stay alive and unchanged,
and a copy's destination must not be read. The runtime copies pageable host memory
(ordinary numpy arrays) at once even then; page-locked memory (numpy over a
:class:`~acl_mem.HostBuffer`) is really read or written later.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

from typing_extensions import Self

from ._args import c_uint
from ._context import is_device
from ._lifecycle import close_on_exit
from .buffers import DeviceBuffer
from .errors import FreedBufferError
from .stream import Stream

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import DTypeLike, NDArray

    from .device import Device

__all__ = ["DeviceArray", "empty", "to_device"]


def _numpy(call: str) -> ModuleType:
    try:
        import numpy
    except ImportError:
        raise ImportError(f"{call} needs numpy, which acl_mem does not install: "
                          "pip install numpy") from None
    return numpy


def _shape(call: str, shape: int | Iterable[int]) -> tuple[int, ...]:
    dims = tuple(shape) if isinstance(shape, Iterable) else (shape,)
    return tuple(c_uint(dim, call, f"shape[{i}]", 63, "a dimension")
                 for i, dim in enumerate(dims))


def _dtype(numpy: ModuleType, call: str, dtype: DTypeLike) -> np.dtype[Any]:
    try:
        chosen: np.dtype[Any] = numpy.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{call}: dtype {dtype!r} is not a numpy dtype ({exc})") from None
    if chosen.hasobject:
        raise TypeError(f"{call}: dtype {chosen} holds Python objects; their addresses mean "
                        "nothing in device memory")
    if chosen.itemsize == 0:
        raise ValueError(f"{call}: dtype {chosen} has no size; give one (e.g. 'S8', 'U4')")
    return chosen


def _check_stream(call: str, stream: object) -> None:
    if stream is not None and not isinstance(stream, Stream):
        raise TypeError(f"{call}: stream must be an acl_mem.Stream or None, got "
                        f"{type(stream).__name__}")


class DeviceArray:
    """A C-contiguous array of ``shape`` and ``dtype`` in device memory.

    Made by :func:`to_device` or :func:`empty`. The constructor wraps a
    :class:`~acl_mem.DeviceBuffer` of at least :attr:`nbytes` bytes and takes it over:
    :meth:`free` (or the ``with`` block's end) frees it. A zero-size array needs no
    buffer, only its ``device``.
    """

    __slots__ = ("__weakref__", "_buffer", "_device", "_dtype", "_freed", "_nbytes", "_shape",
                 "_strides")

    def __init__(self, shape: int | Iterable[int], dtype: DTypeLike,
                 buffer: DeviceBuffer | None = None, *, device: Device | None = None) -> None:
        numpy = _numpy("DeviceArray")
        dims = _shape("DeviceArray", shape)
        chosen = _dtype(numpy, "DeviceArray", dtype)
        if chosen.subdtype is not None:  # as numpy: a subarray's dimensions join the shape
            dims, chosen = dims + chosen.shape, chosen.base
        self._shape, self._dtype = dims, chosen
        try:  # a view of one element: checks the shape without allocating
            numpy.broadcast_to(numpy.empty((), chosen), dims)
        except ValueError as exc:
            raise ValueError(f"DeviceArray: no numpy array has shape {dims} of {chosen} "
                             f"({exc})") from None
        self._nbytes = nbytes = math.prod(dims) * chosen.itemsize
        strides, step = [], chosen.itemsize
        for dim in reversed(dims):
            strides.append(step)
            step *= dim
        self._strides = tuple(reversed(strides))
        if device is not None and not is_device(device):
            raise TypeError(f"DeviceArray: device must be an acl_mem.Device or None, got "
                            f"{type(device).__name__}")
        if buffer is None:
            if nbytes:
                raise ValueError(f"DeviceArray: {nbytes} bytes of device memory are needed: "
                                 "pass buffer=, or allocate with acl_mem.arrays.empty(device, "
                                 "shape, dtype)")
            if device is None:
                raise TypeError("DeviceArray: a zero-size array without a buffer needs device=")
        else:
            if not isinstance(buffer, DeviceBuffer):
                raise TypeError(f"DeviceArray: buffer must be an acl_mem.DeviceBuffer, got "
                                f"{type(buffer).__name__}")
            if buffer.freed:
                raise FreedBufferError("DeviceArray: the buffer was freed")
            if buffer.size < nbytes:
                raise ValueError(f"DeviceArray: shape {dims} of {chosen} takes {nbytes} bytes, "
                                 f"the buffer has {buffer.size}")
            if device is not None and device != buffer.device:
                raise ValueError(f"DeviceArray: the buffer is on device {buffer.device.id}, "
                                 f"not {device.id}")
            device = buffer.device
        self._device: Device = device
        self._buffer = buffer
        self._freed = False

    # -- description -------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """Length of each dimension."""
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of the elements."""
        return self._dtype

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return int(self._dtype.itemsize)

    @property
    def size(self) -> int:
        """Number of elements (the product of the shape)."""
        return math.prod(self._shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the elements: ``size * itemsize`` (the buffer may be larger)."""
        return self._nbytes

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """Bytes between consecutive elements of each dimension (C order, as numpy)."""
        return self._strides

    @property
    def buffer(self) -> DeviceBuffer | None:
        """The device memory this array owns; None for a zero-size array."""
        return self._buffer

    @property
    def device(self) -> Device:
        """The device the memory is on."""
        return self._device

    @property
    def freed(self) -> bool:
        """True once freed, or once the runtime released the memory (device reset)."""
        return self._freed or (self._buffer is not None and self._buffer.freed)

    def __repr__(self) -> str:
        if not hasattr(self, "_freed"):  # set last: the constructor raised (or never ran)
            return "<DeviceArray not created>"
        head = (f"<DeviceArray shape={self._shape} dtype={self._dtype} "
                f"nbytes={self._nbytes}")
        buffer = self._buffer
        if buffer is None:
            where = "freed" if self._freed else "(zero-size: no device memory)"
        else:
            address = buffer._address
            if self._freed or buffer._ptr == 0:
                where = f"freed (was {address:#x})"
            elif not buffer._token.live:
                where = f"released by the runtime (was {address:#x})"
            elif buffer.freed:
                where = f"freed (was {address:#x})"
            else:
                where = f"ptr={address:#x}"
        return f"{head} {where} device={self._device.id}>"

    # -- lifetime ----------------------------------------------------------------------------------
    def free(self) -> None:
        """Free the device memory now; a second call does nothing."""
        self._freed = True
        if self._buffer is not None:
            self._buffer.free()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        close_on_exit(self.free, exc)

    def _check_live(self, call: str) -> None:
        if self._freed:
            raise FreedBufferError(f"DeviceArray.{call}: the array was freed")
        if self._buffer is not None and self._buffer.freed:
            raise FreedBufferError(f"DeviceArray.{call}: its device memory was freed or "
                                   "released by the runtime (device reset, aclFinalize)")

    def _no_copy(self, call: str) -> NoReturn:
        raise TypeError(
            f"{call}(DeviceArray): a DeviceArray owns its device memory and frees it once; a "
            "copy would share or free it twice. To copy the data on the device: new = "
            "acl_mem.arrays.empty(a.device, a.shape, a.dtype); "
            "new.buffer.copy_from(a.buffer, a.nbytes)"
        )

    def __copy__(self) -> NoReturn:
        self._no_copy("copy.copy")

    def __deepcopy__(self, memo: object) -> NoReturn:
        self._no_copy("copy.deepcopy")

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("cannot pickle DeviceArray: device memory cannot travel to another "
                        "process. Pickle a.copy_to_host() and to_device() it there")

    def __reduce__(self) -> NoReturn:
        self.__reduce_ex__(2)

    def __array__(self, dtype: object = None, copy: object = None) -> NoReturn:
        """Refused: numpy conversion would hide a device-to-host copy (and numpy would
        otherwise make an array of one object). Use :meth:`copy_to_host`."""
        raise TypeError("DeviceArray: implicit conversion to a numpy array is not allowed; "
                        "use a.copy_to_host()")

    # -- copies ------------------------------------------------------------------------------------
    def copy_to_host(self, out: NDArray[Any] | None = None,
                     stream: Stream | None = None) -> NDArray[Any]:
        """The array's data as a new numpy array, or written into ``out``.

        ``out`` must be a writable C-contiguous numpy array of the same shape and dtype.
        With ``stream`` the copy is queued: read the result only after
        ``stream.synchronize()``.
        """
        call = "DeviceArray.copy_to_host"
        numpy = _numpy(call)
        _check_stream(call, stream)
        self._check_live("copy_to_host")
        if out is None:
            out = numpy.empty(self._shape, self._dtype)
        else:
            if not isinstance(out, numpy.ndarray):
                raise TypeError(f"{call}: out must be a numpy array, got {type(out).__name__}")
            if out.dtype != self._dtype:
                raise TypeError(f"{call}: out has dtype {out.dtype}, the array {self._dtype}")
            if out.shape != self._shape:
                raise ValueError(f"{call}: out has shape {out.shape}, the array {self._shape}")
            if not out.flags.c_contiguous:
                raise ValueError(f"{call}: out must be C-contiguous")
            if not out.flags.writeable:
                raise ValueError(f"{call}: out is read-only")
        if self._buffer is not None and self._nbytes:
            if stream is None:
                self._buffer.copy_to(out, self._nbytes)
            else:
                self._buffer.copy_to_async(out, self._nbytes, stream=stream)
        return out

    def copy_from_host(self, array: Any, stream: Stream | None = None) -> None:
        """Copy a numpy array (or anything ``numpy.asarray`` takes) of the same shape and
        dtype into this array; a non-contiguous one is made contiguous first.

        No conversion: a different dtype is a TypeError. With ``stream`` the copy is
        queued: keep ``array`` alive and unchanged until ``stream.synchronize()``.
        """
        call = "DeviceArray.copy_from_host"
        numpy = _numpy(call)
        _check_stream(call, stream)
        self._check_live("copy_from_host")
        if isinstance(array, (DeviceArray, DeviceBuffer)):
            raise TypeError(f"{call}: the source is device memory; copy between buffers "
                            "with dst.buffer.copy_from(src.buffer)")
        source = numpy.asarray(array)
        if source.dtype != self._dtype:
            raise TypeError(f"{call}: the source has dtype {source.dtype}, the array "
                            f"{self._dtype} (convert it first: astype)")
        if source.shape != self._shape:
            raise ValueError(f"{call}: the source has shape {source.shape}, the array "
                             f"{self._shape}")
        if not source.flags.c_contiguous:
            source = numpy.ascontiguousarray(source)
        if self._buffer is not None and self._nbytes:
            if stream is None:
                self._buffer.copy_from(source, self._nbytes)
            else:
                self._buffer.copy_from_async(source, self._nbytes, stream=stream)


def empty(device: Device, shape: int | Iterable[int], dtype: DTypeLike) -> DeviceArray:
    """An uninitialised :class:`DeviceArray` on ``device`` (aclrtMalloc of its bytes,
    docs/runtime-model.md §3.5); a zero-size one allocates nothing."""
    call = "acl_mem.arrays.empty"
    numpy = _numpy(call)
    if not is_device(device):
        raise TypeError(f"{call}: device must be an acl_mem.Device, got "
                        f"{type(device).__name__}")
    dims = _shape(call, shape)
    chosen = _dtype(numpy, call, dtype)
    nbytes = math.prod(dims) * chosen.itemsize
    buffer = device.malloc(nbytes) if nbytes else None
    try:
        return DeviceArray(dims, chosen, buffer, device=device)
    except BaseException:
        if buffer is not None:
            with contextlib.suppress(Exception):
                buffer.free()
        raise


def to_device(device: Device, array: Any, stream: Stream | None = None) -> DeviceArray:
    """A new :class:`DeviceArray` on ``device`` holding a copy of ``array`` (a numpy array
    or anything ``numpy.asarray`` takes), same shape and dtype.

    With ``stream`` the copy is queued: keep ``array`` alive and unchanged until
    ``stream.synchronize()``. ``to_device(dev, x).copy_to_host()`` equals ``x``.
    """
    call = "acl_mem.arrays.to_device"
    numpy = _numpy(call)
    _check_stream(call, stream)
    if isinstance(array, (DeviceArray, DeviceBuffer)):
        raise TypeError(f"{call}: the source is already device memory; use empty() and "
                        "dst.buffer.copy_from(src.buffer)")
    source = numpy.asarray(array)
    result = empty(device, source.shape, source.dtype)
    try:
        result.copy_from_host(source, stream=stream)
    except BaseException:
        with contextlib.suppress(Exception):
            result.free()
        raise
    return result
