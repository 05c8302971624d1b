"""``acl.util``: pyACL's conversions between Python objects and pointers (docs/pyacl.md).

* ``bytes_to_ptr(b)``: the address of the bytes object's own storage, so a copy into
  it (acl.rt.memcpy to that address) shows through ``numpy.frombuffer(b)``; ``b`` must
  stay alive while the address is used.
* ``ptr_to_bytes(ptr, size)``: a new bytes object with a copy of host memory.
* ``numpy_to_ptr(a)``, ``numpy_contiguous_to_ptr(a)``: the address of an array's data.
* ``ptr_to_numpy(ptr, shape, type)``: a writable array over host memory, no copy.

pyACL reads whatever address it is given, and crashes on device memory, which the host
cannot map in EP mode. acl_mem.pyacl reads host memory only: a device address, or a
range that is not readable host memory, raises ValueError (the error pyACL raises when a
conversion fails) instead of crashing. The numpy functions need numpy.
"""

import ctypes as _ctypes
import warnings as _warnings
from typing import Any as _Any

from .. import _backend
from .. import raw as _raw
from ..enums import MemLocationType as _MemLocationType
from ..errors import AclError as _AclError
from ..errors import FunctionNotAvailableError as _FunctionNotAvailableError
from . import _common

_MODULE = "acl.util"


def bytes_to_ptr(data: bytes, /) -> int:
    """``ptr = acl.util.bytes_to_ptr(data)``: the address of ``data``'s storage (no copy).

    Copies into that address change ``data`` itself, as with pyACL; keep ``data`` alive
    while the address is in use. Anything but bytes raises ValueError, as in pyACL.
    """
    if not isinstance(data, bytes):
        raise ValueError(f"acl.util.bytes_to_ptr: needs an byte as argument, got "
                         f"{type(data).__name__}")
    # A c_char_p made from bytes points at the object's own buffer (no copy).
    address = _ctypes.cast(_ctypes.c_char_p(data), _ctypes.c_void_p).value
    assert address is not None
    return address


def ptr_to_bytes(ptr: int, size: int, /) -> bytes:
    """``data = acl.util.ptr_to_bytes(ptr, size)``: a copy of ``size`` bytes of host memory.

    ValueError when ``ptr`` is device memory or ``[ptr, ptr+size)`` is not readable host
    memory (pyACL would crash there). ``ptr`` 0 gives ``size`` zero bytes (pyACL gives
    ``size`` uninitialised bytes).
    """
    call = "acl.util.ptr_to_bytes"
    address = _common.as_ulong(ptr, call, "ptr")
    nbytes = _common.as_ulong(size, call, "size")
    if nbytes >= 1 << 63:
        raise ValueError(f"{call}: convert c pointer to bytes failed: size {nbytes} is "
                         "negative as a Py_ssize_t")
    if address == 0 or nbytes == 0:
        return bytes(nbytes)
    return bytes(_read_host(call, address, nbytes)[0])


def numpy_to_ptr(array: _Any, /) -> int:
    """``ptr = acl.util.numpy_to_ptr(array)``: the address of the array's first element.

    Warns (category Warning) that pyACL deprecates it, and again for a non-contiguous
    array, as pyACL does. Anything but an ndarray raises ValueError.
    """
    np = _numpy("acl.util.numpy_to_ptr")
    _warnings.warn("acl.util.numpy_to_ptr will be deprecated. Please use "
                   "acl.util.bytes_to_ptr instead.", Warning, stacklevel=2)
    if not isinstance(array, np.ndarray):
        raise ValueError(f"acl.util.numpy_to_ptr: needs an ndarray as argument, got "
                         f"{type(array).__name__}")
    if not array.flags.c_contiguous:
        _warnings.warn("The input ndarray is discontiguous. Please use "
                       "acl.util.bytes_to_ptr instead.", Warning, stacklevel=2)
    return int(array.__array_interface__["data"][0])


def numpy_contiguous_to_ptr(array: _Any, /) -> tuple[int, _Any]:
    """``ptr, contiguous = acl.util.numpy_contiguous_to_ptr(array)``: the address of a
    C-contiguous version of ``array`` (``array`` itself when it already is) and that array,
    which must stay alive while the address is used. Warns that pyACL deprecates it."""
    np = _numpy("acl.util.numpy_contiguous_to_ptr")
    _warnings.warn("acl.util.numpy_contiguous_to_ptr will be deprecated. Please use "
                   "acl.util.bytes_to_ptr instead.", Warning, stacklevel=2)
    if not isinstance(array, np.ndarray):
        raise ValueError(f"acl.util.numpy_contiguous_to_ptr: needs an ndarray as argument, "
                         f"got {type(array).__name__}")
    contiguous = array if array.flags.c_contiguous else array.copy(order="C")
    return int(contiguous.__array_interface__["data"][0]), contiguous


def ptr_to_numpy(ptr: int, shape: tuple[int, ...], np_type: int, /) -> _Any:
    """``array = acl.util.ptr_to_numpy(ptr, shape, type)``: a writable numpy array over
    host memory at ``ptr`` (no copy), ``type`` a numpy type number (NPY_FLOAT32 = 11 ...).

    The memory must stay allocated while the array is used. ValueError for device memory
    or memory that is not readable host memory, for a ``shape`` that is not a tuple and
    for a type number that is not a numeric numpy type; TypeError for a dimension that
    is not an int, as in pyACL. ``ptr`` 0 gives a new zeroed array (pyACL: a new
    uninitialised one). Warns that pyACL deprecates it.
    """
    call = "acl.util.ptr_to_numpy"
    np = _numpy(call)
    _warnings.warn("acl.util.ptr_to_numpy will be deprecated. Please use "
                   "acl.util.ptr_to_bytes instead.", Warning, stacklevel=2)
    address = _common.as_ulong(ptr, call, "ptr")
    if not isinstance(shape, tuple):
        raise ValueError(f"{call}: shape is empty: it must be a tuple, got "
                         f"{type(shape).__name__}")
    dims = []
    for dim in shape:
        if not isinstance(dim, int):
            raise TypeError(f"{call}: the second argument is not list of int "
                            f"({type(dim).__name__} in shape)")
        if dim < 0:
            raise ValueError(f"{call}: negative dimensions are not allowed: {shape}")
        dims.append(int(dim))  # True is 1 to pyACL's C parser (and must be to numpy)
    number = _common.as_int(np_type, call, "type")
    dtype = _dtypes(np).get(number)
    if dtype is None:
        raise ValueError(f"{call}: {number} is not the type number of a numeric numpy type "
                         "(NPY_BOOL 0 ... NPY_CLONGDOUBLE 16, NPY_HALF 23)")
    count = 1
    for dim in dims:
        count *= dim
    nbytes = count * dtype.itemsize
    if address == 0:
        return np.zeros(tuple(dims), dtype=dtype)
    writable = True
    if nbytes:
        address = _read_host(call, address, nbytes, copy=False)[1]  # checks; RC: where
        # Readable is proven; a write through a view of read-only pages would kill the
        # process, so such a view is made read-only (the maps say, without writing).
        from .._host_memory import permits_writing

        writable = permits_writing(address, nbytes)
    memory = (_ctypes.c_char * nbytes).from_address(address)
    view = np.frombuffer(memory, dtype=dtype, count=count).reshape(tuple(dims))
    view.flags.writeable = writable
    return view


_common.define_stubs(globals(), _MODULE, "start_thread stop_thread",
                     _common.MEMORY_ONLY.format(what="pyACL's helper threads"))


# -- helpers --------------------------------------------------------------------------------------

_DTYPES: dict[int, _Any] = {}


def _numpy(call: str) -> _Any:
    try:
        import numpy
    except ImportError:
        raise ImportError(f"{call} needs numpy, which acl_mem does not install: "
                          "pip install numpy") from None
    return numpy


def _dtypes(np: _Any) -> dict[int, _Any]:
    """numpy type number -> dtype, for the numeric types (NPY_BOOL ... NPY_HALF)."""
    if not _DTYPES:
        for char in "?bBhHiIlLqQfdgFDGe":
            dtype = np.dtype(char)
            _DTYPES[int(dtype.num)] = dtype
    return _DTYPES


def _check_block(call: str, address: int, nbytes: int) -> None:
    """Device memory read by the control CPU (RC mode): the range must lie in one live
    block, or the read (or a view's writes) would reach freed memory or a neighbour."""
    try:
        base, size = _raw.aclrtMemGetAddressRange(address)
    except _FunctionNotAvailableError:
        return  # CANN 8.5.0 has no such call: the kernel's check below is all there is
    except _AclError:
        base = size = 0
    if not base <= address < address + nbytes <= base + size:
        raise ValueError(f"{call}: [{address:#x}, {address + nbytes:#x}) is not inside one "
                         "live block of device memory (freed, or past the block's end)")


def _read_host(call: str, address: int, nbytes: int, *,
               copy: bool = True) -> tuple[bytearray, int]:
    """The ``nbytes`` at ``address`` (a copy; with ``copy`` False only a scratch buffer) and
    the address this process reads them at, after making sure they are memory the process
    can read: ValueError otherwise. Device memory is readable in RC mode only."""
    if nbytes >= 1 << 63 or address + nbytes > 1 << 64:
        raise ValueError(f"{call}: {nbytes} bytes from {address:#x} run past the end of the "
                         "address space")
    try:
        where = _raw.aclrtPointerGetAttributes(address)
    except _FunctionNotAvailableError:
        where = None  # not known to the runtime: the kernel decides below
    except _AclError:
        # The runtime cannot place it: device address space no live block covers (freed
        # device memory), or an address the driver cannot classify (docs/runtime-model.md
        # §4.9). Its bytes may be anyone's.
        raise ValueError(f"{call}: {address:#x} is not memory the runtime can place (freed "
                         "device memory, or an address the driver cannot classify)") from None
    if where is not None and where.type == _MemLocationType.DEVICE:
        # RC mode: the control CPU reads device memory itself (the fake: its backing bytes).
        mapped = _backend.get().control_cpu_address(address, nbytes)
        if mapped:
            _check_block(call, address, nbytes)
            address = mapped
    if where is not None and where.type == _MemLocationType.DEVICE and not mapped:
        raise ValueError(
            f"{call}: {address:#x} is device memory (device {where.id}), which the host "
            "cannot read: acl.rt.get_run_mode() is ACL_HOST (EP mode). Copy it to host "
            "memory first (acl.rt.memcpy with ACL_MEMCPY_DEVICE_TO_HOST) and read that")
    # Queued work that still writes here races with this read (the fake reports it).
    _backend.get().check_pending(address, nbytes, access="read", what=f"{call} reads")
    # The kernel checks the range (process_vm_readv): an unmapped or protected page is
    # refused instead of crashing the process.
    # Reused from the fake's host-memory layer, which needs no device: small ranges are
    # copied by the kernel; larger ones have one byte per page read by the kernel (into
    # its own scratch, ``out`` is untouched), then PROVEN, and are copied here.
    from .._host_memory import KERNEL_COPY_LIMIT, PROVEN, REFUSED, address_of, prove_untrusted

    # Above the kernel-copy size the range is proven first (into the kernel's scratch)
    # and the bytes are copied after: no buffer of a size the range cannot have.
    small = nbytes <= KERNEL_COPY_LIMIT
    out = bytearray(nbytes if small else 1)
    found = prove_untrusted(address_of(out), address, nbytes, "src")
    if found == REFUSED:
        raise ValueError(f"{call}: [{address:#x}, {address + nbytes:#x}) is not readable "
                         "host memory (unmapped, protected, freed or device memory)")
    if found == PROVEN and copy:
        if not small:
            out = bytearray(nbytes)
        _ctypes.memmove(address_of(out), address, nbytes)
    return out, address
