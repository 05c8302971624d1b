"""Addresses of host objects for the Pythonic layer (cffi, no driver involved)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from typing import TYPE_CHECKING, Any

import _cffi_backend

from ._cffi_lite import LiteFFI

__all__ = ["BufferSlots", "HostSpan", "ffi", "freed_variant", "host_bytes", "host_span"]

# Types built at import (acl_mem/_cffi_lite.py): no C parser, nothing parsed on a call path.
ffi = LiteFFI()
#: What ffi.from_buffer(obj) and ffi.cast("uintptr_t", ...) pass to cffi's C functions,
#: which host_span calls directly (the ffi methods add a Python call each, on every copy).
_CHAR_ARRAY = ffi.typeof("char[]")
_UINTPTR = ffi.typeof("uintptr_t")
_from_buffer = _cffi_backend.from_buffer
_cast = _cffi_backend.cast
class HostSpan:
    """Address and length of a buffer-protocol object, kept alive while in use."""

    __slots__ = ("address", "keepalive", "nbytes")

    def __init__(self, address: int, nbytes: int, keepalive: Any) -> None:
        self.address = address
        self.nbytes = nbytes
        self.keepalive = keepalive


def host_span(obj: object, *, writable: bool, call: str, name: str) -> HostSpan:
    """The bytes behind ``obj`` (bytes, bytearray, memoryview, numpy array ...).

    TypeError when ``obj`` has no buffer; ValueError when it is not contiguous or not
    writable where it must be written.
    """
    return HostSpan(*host_bytes(obj, writable, call, name))


def host_bytes(obj: object, writable: bool, call: str, name: str) -> tuple[int, int, Any]:
    """:func:`host_span` as ``(address, nbytes, keepalive)``, for the copy path (no object
    to build)."""
    try:
        cdata = _from_buffer(_CHAR_ARRAY, obj, writable)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(
            f"{call}: {name} must be an acl_mem buffer or a buffer-protocol object "
            f"(bytes, bytearray, memoryview, numpy array), got {type(obj).__name__}"
        ) from None
    except BufferError:
        raise ValueError(f"{call}: {name} is read-only but is written to") from None
    except ValueError as exc:
        # numpy reports a read-only array as a ValueError too: say which it is.
        if writable and _readonly(obj):
            raise ValueError(f"{call}: {name} is read-only but is written to") from None
        raise ValueError(f"{call}: {name} must be C-contiguous ({exc})") from None
    return int(_cast(_UINTPTR, cdata)), len(cdata), cdata


def _readonly(obj: object) -> bool:
    try:
        return memoryview(obj).readonly  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _python_api(name: str, restype: Any, *argtypes: Any) -> Any:
    """A private ctypes binding of a Python C API function: it keeps the GIL and raises
    what the call raised. (Setting ``argtypes`` on ``ctypes.pythonapi.<name>`` would
    change that shared object for every other user in the process.)"""
    import ctypes

    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


# -- the buffer protocol on Python 3.10 / 3.11 -----------------------------------------------------
#
# A class written in Python exports buffers through PEP 688 (``__buffer__`` /
# ``__release_buffer__``) only from Python 3.12. Before, the C slot ``bf_getbuffer``
# must come from a base type. Subclassing a C type that exports memory does not work
# here: cffi's buffer type is not subclassable, a ctypes array conflicts with the
# buffer classes' ``__slots__`` layout and needs one class per size, and both export a
# fixed pointer that would stay exported after free(). So on 3.10 / 3.11 a base type
# with no fields of its own is made with ``PyType_FromSpec`` (stable since 3.9), its
# two buffer slots pointing at cffi callbacks: ``bf_getbuffer`` calls the instance's
# ``__buffer__`` and fills the caller's view from the memoryview it returns (what
# CPython 3.12 does for ``__buffer__``), so that memoryview keeps the export alive;
# ``bf_releasebuffer`` does nothing, but its presence tells consumers (numpy) to hold
# the export instead of the object. One limit: an exception raised by ``__buffer__``
# cannot cross a C callback (cffi clears it, and ctypes turns an error set through it
# into a Python exception at once); it is reported as a RuntimeWarning and the caller
# sees a SystemError. A freed buffer avoids that path: see freed_variant.

if sys.version_info >= (3, 12) or TYPE_CHECKING:

    class BufferSlots:
        """Base of classes with ``__buffer__``: nothing to add, CPython reads PEP 688."""

        __slots__ = ()

else:

    def _report_export_error(exc_type: type[BaseException], exc: BaseException,
                             tb: Any) -> None:
        # A warning is the only channel left: the C caller cannot receive the exception.
        with contextlib.suppress(BaseException):
            warnings.warn(f"buffer export refused: {exc_type.__name__}: {exc} (Python "
                          f"{sys.version_info[0]}.{sys.version_info[1]} reports it as a "
                          "SystemError)", RuntimeWarning, stacklevel=2)

    def _buffer_slots() -> type:
        try:
            import ctypes

            ctypes.pythonapi  # noqa: B018
        except (ImportError, AttributeError):  # not CPython: view() still works
            return type("BufferSlots", (), {"__slots__": ()})

        class _Slot(ctypes.Structure):
            _fields_ = (("slot", ctypes.c_int), ("pfunc", ctypes.c_void_p))

        class _Spec(ctypes.Structure):
            _fields_ = (("name", ctypes.c_char_p), ("basicsize", ctypes.c_int),
                        ("itemsize", ctypes.c_int), ("flags", ctypes.c_uint),
                        ("slots", ctypes.POINTER(_Slot)))

        get_buffer = _python_api("PyObject_GetBuffer", ctypes.c_int, ctypes.py_object,
                                 ctypes.c_void_p, ctypes.c_int)
        release_buffer = _python_api("PyBuffer_Release", None, ctypes.c_void_p)
        from_spec = _python_api("PyType_FromSpec", ctypes.py_object, ctypes.POINTER(_Spec))
        as_object, py_object, uintptr = ctypes.cast, ctypes.py_object, ffi.typeof("uintptr_t")

        def getbuffer(exporter: Any, view: Any, flags: int) -> int:
            obj = as_object(int(ffi.cast(uintptr, exporter)), py_object).value
            exported = type(obj).__buffer__(obj, flags)
            # view->obj (the second field) is NULL until the view is filled; a failing
            # slot must leave it so, or the caller never releases what it holds.
            owner = ffi.cast("void **", view) + 1
            owner[0] = ffi.NULL
            try:
                # The view's owner becomes ``exported``: releasing the view releases it.
                return int(get_buffer(exported, int(ffi.cast(uintptr, view)), flags))
            except BaseException:
                # An interrupt after the view was filled: give it back, then fail.
                if owner[0] != ffi.NULL:
                    release_buffer(int(ffi.cast(uintptr, view)))
                raise

        def releasebuffer(exporter: Any, view: Any) -> None:
            return None

        callbacks = (
            ffi.callback("int(void *, void *, int)", getbuffer, error=-1,
                         onerror=_report_export_error),
            ffi.callback("void(void *, void *)", releasebuffer),
        )
        py_bf_getbuffer, py_bf_releasebuffer = 1, 2  # typeslots.h
        slots = (_Slot * 3)(
            (py_bf_getbuffer, int(ffi.cast(uintptr, callbacks[0]))),
            (py_bf_releasebuffer, int(ffi.cast(uintptr, callbacks[1]))),
            (0, None),
        )
        name = b"acl_mem._hostbuf.BufferSlots"
        default_flags, basetype = 1 << 18, 1 << 10  # Py_TPFLAGS_DEFAULT, _BASETYPE
        spec = _Spec(name, object.__basicsize__, 0, default_flags | basetype, slots)
        cls: type = from_spec(ctypes.byref(spec))
        # The type refers to the callbacks and (before 3.12) to the name: kept with it.
        cls._keep = (callbacks, slots, spec, name)  # type: ignore[attr-defined]
        return cls

    BufferSlots = _buffer_slots()


# -- a freed buffer's export error on Python 3.10 / 3.11 -------------------------------------------
#
# ``memoryview()`` of a freed buffer must raise FreedBufferError, which a Python callback in
# ``bf_getbuffer`` cannot do (above). A C function can: ``PyObject_Size(obj)`` calls
# ``type(obj).__len__`` and returns -1 with its exception set. So a freed buffer becomes an
# instance of a subclass (same layout, so ``__class__`` may be assigned) whose own buffer
# slot is ``PyObject_Size`` and whose ``__len__`` always raises: the slot's extra arguments
# (view, flags) are ignored, as the C calling conventions of CPython's platforms allow,
# and the view is never filled because the call never succeeds.

_TP_AS_BUFFER = 20 * 8  # offsetof(PyTypeObject, tp_as_buffer), 64-bit CPython 3.10 / 3.11


def freed_variant(cls: type, refuse: Any) -> type | None:
    """A subclass of ``cls`` for its freed instances whose export raises what
    ``refuse(obj)`` raises (it must always raise); None where not needed (3.12+: PEP 688)
    or not safely possible (not 64-bit CPython, or the type's layout is not the one
    checked here)."""
    if sys.version_info >= (3, 12) or sys.maxsize != (1 << 63) - 1:
        return None
    keep = getattr(BufferSlots, "_keep", None)
    if keep is None or sys.implementation.name != "cpython":
        return None
    import ctypes

    def __len__(self: Any) -> int:
        refuse(self)
        raise RuntimeError("freed_variant: refuse() returned")  # never 0: see above

    freed = type(cls.__name__, (cls,), {"__slots__": (), "__len__": __len__,
                                        "__module__": cls.__module__,
                                        "__qualname__": cls.__qualname__})
    expected = int(ffi.cast("uintptr_t", keep[0][0]))  # BufferSlots' bf_getbuffer callback
    mine = ctypes.c_void_p.from_address(id(freed) + _TP_AS_BUFFER).value
    theirs = ctypes.c_void_p.from_address(id(cls) + _TP_AS_BUFFER).value
    # Patched only if the offset really holds this heap type's own buffer procs, filled
    # from BufferSlots: anything else means another layout, and the SystemError stays.
    if not mine or mine == theirs or ctypes.c_void_p.from_address(mine).value != expected:
        return None
    ctypes.c_void_p.from_address(mine).value = ctypes.cast(ctypes.pythonapi.PyObject_Size,
                                                           ctypes.c_void_p).value
    return freed


# -- DLPack ----------------------------------------------------------------------------------------
#
# A capsule named "dltensor" (or "dltensor_versioned") holds a DLManagedTensor built
# here with cffi; ``keep`` (the exporter's memoryview, or a copy) stays in ``_EXPORTS``
# until the consumer calls the tensor's deleter, or until the capsule dies unconsumed.
# The Python C API calls go through ctypes.pythonapi, which keeps the GIL; the two
# destructors are cffi callbacks, which take the GIL from any thread. Being Python code,
# they cannot run while the thread has an exception set: a consumer that drops an
# unconsumed capsule on its own error path (numpy only does when out of memory) loses
# that exception and leaves the export held.

_DLPACK_CDEF = """
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data; DLDevice device; int32_t ndim; DLDataType dtype;
    int64_t *shape; int64_t *strides; uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor; void *manager_ctx; void (*deleter)(struct DLManagedTensor *);
} DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version; void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *);
    uint64_t flags; DLTensor dl_tensor;
} DLManagedTensorVersioned;
typedef struct { DLManagedTensor managed; int64_t shape[1]; int64_t strides[1]; }
    acl_dl_legacy;
typedef struct { DLManagedTensorVersioned managed; int64_t shape[1]; int64_t strides[1]; }
    acl_dl_versioned;
"""
_KDLCPU = 1
_KDLUINT = 1
_FLAG_IS_COPIED = 2  # DLPACK_FLAG_BITMASK_IS_COPIED
_NAMES = {False: b"dltensor", True: b"dltensor_versioned"}
#: Live exports by the address of their DLManagedTensor(Versioned): (struct, keep).
_EXPORTS: dict[int, tuple[Any, Any]] = {}
_dlpack: dict[str, Any] = {}
_dlpack_lock = threading.Lock()


def _fresh_dlpack_lock_in_child() -> None:
    global _dlpack_lock
    _dlpack_lock = threading.Lock()  # a parent thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_dlpack_lock_in_child)


def _dlpack_setup() -> dict[str, Any]:
    with _dlpack_lock:
        if _dlpack:
            return _dlpack
        import ctypes

        import cffi  # its C parser only for DLPack, on first use

        dl = cffi.FFI()
        dl.cdef(_DLPACK_CDEF)
        new = _python_api("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                          ctypes.c_void_p)
        # The capsule is passed as an address: its destructor runs during its deallocation,
        # when a new reference to it must not be made.
        is_valid = _python_api("PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p,
                               ctypes.c_char_p)
        get_pointer = _python_api("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_char_p)
        exports, names, uintptr = _EXPORTS, tuple(_NAMES.values()), dl.typeof("uintptr_t")

        def deleter(managed: Any) -> None:
            # The consumer is done (it may call from any thread): drop the struct and
            # the export it kept.
            exports.pop(int(dl.cast(uintptr, managed)), None)

        def capsule_destructor(capsule: Any) -> None:
            # A capsule that was never consumed still owns its tensor ("used_*" names
            # belong to a consumer, which calls the deleter itself).
            address = int(dl.cast(uintptr, capsule))
            for name in names:
                if is_valid(address, name):
                    exports.pop(get_pointer(address, name) or 0, None)

        _dlpack.update(
            ffi=dl, new=new, uintptr=uintptr,
            deleters={False: dl.callback("void(DLManagedTensor *)", deleter),
                      True: dl.callback("void(DLManagedTensorVersioned *)", deleter)},
            destructor=dl.callback("void(void *)", capsule_destructor),
        )
        return _dlpack


def dlpack_capsule(address: int, nbytes: int, keep: Any, *, versioned: bool,
                   copied: bool) -> Any:
    """A DLPack capsule of ``nbytes`` bytes at ``address`` as a 1-D uint8 CPU tensor.

    ``keep`` keeps those bytes valid (a memoryview of them, or the copy they are in)
    until the consumer calls the deleter, or until the capsule dies unconsumed.
    ``versioned`` makes a DLPack 1.0 ``dltensor_versioned`` capsule, else the legacy
    ``dltensor`` one.
    """
    dl = _dlpack_setup()
    ffi_dl = dl["ffi"]
    holder = ffi_dl.new("acl_dl_versioned *" if versioned else "acl_dl_legacy *")
    managed = holder.managed
    tensor = managed.dl_tensor
    tensor.data = ffi_dl.cast("void *", address)
    tensor.device.device_type = _KDLCPU
    tensor.device.device_id = 0
    tensor.ndim = 1
    tensor.dtype.code = _KDLUINT
    tensor.dtype.bits = 8
    tensor.dtype.lanes = 1
    holder.shape[0] = nbytes
    holder.strides[0] = 1  # in elements; given, as DLPack 1.2 deprecates NULL strides
    tensor.shape = holder.shape
    tensor.strides = holder.strides
    tensor.byte_offset = 0
    managed.deleter = dl["deleters"][versioned]
    if versioned:
        managed.version.major, managed.version.minor = 1, 0
        managed.flags = _FLAG_IS_COPIED if copied else 0
    key = int(ffi_dl.cast(dl["uintptr"], ffi_dl.addressof(managed)))
    _EXPORTS[key] = (holder, keep)
    try:
        return dl["new"](key, _NAMES[versioned], int(ffi_dl.cast(dl["uintptr"],
                                                                 dl["destructor"])))
    except BaseException:
        _EXPORTS.pop(key, None)
        raise
