"""The native backend: the C API of libascendcl through cffi ABI mode.

Outputs are written by C into cffi-owned out-parameters; ``null_outputs`` passes
NULL instead, so the library's own NULL checks are reachable. No value is changed on
the way: the code returned is the library's.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any

import _cffi_backend
import cffi

from ..errors import FunctionNotAvailableError
from .cdef import FAST_CDEF
from .events import NativeEvents
from .loader import load_library, make_ffi
from .vmm import NativeVmm

__all__ = ["NativeBackend"]


#: Addresses are below this (64 bits).
_ADDRESS_LIMIT = 1 << 64

class NativeBackend(NativeEvents, NativeVmm):
    """Implements :class:`acl_mem._backend.Backend` with the real library."""

    name = "native"

    def __init__(self, library_dir: str | None = None, *,
                 library_path: str | None = None) -> None:
        self.ffi = make_ffi()
        if library_path is not None:  # this very file (a private copy of acl_mem's)
            self.lib, self.path = self.ffi.dlopen(library_path), library_path
        else:
            self.lib, self.path = load_library(self.ffi, "libascendcl.so", prefer=library_dir)
        _quiet_library_recorder(self.path)
        self._dvpp: Any = None
        self._mpi: Any = None
        self._lock = threading.Lock()
        _bindings.add(self)
        self._null = self.ffi.NULL
        # Parsed once: allocation and free are the calls users make most often.
        self._new = self.ffi.new
        self._cast = self.ffi.cast
        self._void_pp = self.ffi.typeof("void **")
        self._void_p = self.ffi.typeof("void *")
        self._uintptr = self.ffi.typeof("uintptr_t")
        fast = cffi.FFI()
        fast.cdef(FAST_CDEF)
        fast_lib: Any = fast.dlopen(self.path)
        self._fast = fast_lib
        # cffi's C-level newp: FFI.new is a Python wrapper around it (a frame per malloc).
        self._fast_new = _cffi_backend.newp
        self._uintptr_p = fast.typeof("uintptr_t *")
        # Looked up once: a library attribute costs a dictionary miss per call.
        self._c_malloc = fast_lib.aclrtMalloc
        self._c_free = fast_lib.aclrtFree
        self._c_memcpy = fast_lib.aclrtMemcpy
        self._c_memset = fast_lib.aclrtMemset

    def describe(self) -> dict[str, object]:
        return {"library": self.path, "soc": self.soc_name()}

    # The fake's diagnostics: the real runtime has no memory checker or hazard model.
    def checker_verify(self, when: str = "acl_mem.check()") -> list[tuple[str, str]]:
        return []

    def checker_segment_allocated(self, parent: int, start: int, requested: int,
                                  size: int) -> None:
        return None

    def checker_segment_freed(self, start: int) -> None:
        return None

    def check_pending(self, start: int, size: int, *, access: str, what: str,
                      targets: tuple[object, ...] | None = None) -> None:
        return None

    def soc_name(self) -> str:
        name = self.lib.aclrtGetSocName()
        if name == self._null:
            return ""
        text = self.ffi.string(name)
        return text.decode(errors="replace") if isinstance(text, bytes) else text

    def _side_library(self, soname: str) -> Any:
        attr = "_dvpp" if soname == "libacl_dvpp.so" else "_mpi"
        lib = getattr(self, attr)
        if lib is not None:  # loaded: no lock on the call path
            return lib
        with self._lock:
            lib = getattr(self, attr)
            if lib is None:
                lib, _ = load_library(self.ffi, soname, prefer=os.path.dirname(self.path))
                setattr(self, attr, lib)
            return lib

    def _out(self, ctype: str, null: bool) -> Any:
        return self._null if null else self.ffi.new(ctype)

    def _ptr(self, value: int) -> Any:
        # cffi would take an int past 64 bits (or a negative one) modulo 2**64: another
        # address, which the call would then act on.
        if isinstance(value, int) and not 0 <= value < _ADDRESS_LIMIT:
            raise OverflowError(f"{value:#x} is not a 64-bit address")
        return self._cast(self._void_p, value)

    def _addr(self, cdata: Any) -> int:
        return int(self.ffi.cast("uintptr_t", cdata))

    # -- runtime -----------------------------------------------------------------------------------
    def aclInit(self, config_path: str | None) -> int:
        arg = self._null if config_path is None else os.fsencode(config_path)
        return int(self.lib.aclInit(arg))

    def aclFinalize(self) -> int:
        return int(self.lib.aclFinalize())

    def aclrtSetDevice(self, deviceId: int) -> int:
        return int(self.lib.aclrtSetDevice(deviceId))

    def aclrtResetDevice(self, deviceId: int) -> int:
        return int(self.lib.aclrtResetDevice(deviceId))

    def aclrtResetDeviceForce(self, deviceId: int) -> int:
        return int(self.lib.aclrtResetDeviceForce(deviceId))

    def aclrtGetDevice(self, null_outputs: int = 0) -> tuple[int, int]:
        out = self._out("int32_t *", bool(null_outputs & 1))
        rc = int(self.lib.aclrtGetDevice(out))
        return rc, int(out[0]) if rc == 0 and out != self._null else 0

    def _function(self, name: str, since: str) -> Any:
        """A function that older releases lack: FunctionNotAvailableError if this library
        has no such symbol (cffi resolves it on first use)."""
        try:
            return getattr(self.lib, name)
        except AttributeError:
            rc, release = self.aclsysGetVersionStr("runtime")
            raise FunctionNotAvailableError(name, release if rc == 0 else "(unknown)",
                                            since) from None

    def aclrtGetLastError(self, level: int) -> int:
        return int(self.lib.aclrtGetLastError(level & 0xFFFFFFFF))  # an enum without negatives

    def aclrtPeekAtLastError(self, level: int) -> int:
        return int(self.lib.aclrtPeekAtLastError(level & 0xFFFFFFFF))

    def note_failure(self, rc: int) -> None:
        """The library keeps the thread's last error itself."""

    def aclrtGetVersion(self, null_outputs: int = 0) -> tuple[int, int, int, int]:
        parts = [self._out("int32_t *", bool(null_outputs & (1 << i))) for i in range(3)]
        rc = int(self.lib.aclrtGetVersion(*parts))
        if rc:
            return rc, 0, 0, 0
        major, minor, patch = (0 if p == self._null else int(p[0]) for p in parts)
        return rc, major, minor, patch

    def aclsysGetVersionStr(self, pkgName: str | None,
                            null_outputs: int = 0) -> tuple[int, str]:
        # The header asks for a buffer of ACL_PKG_VERSION_MAX_SIZE (128) bytes.
        out = self._null if null_outputs & 1 else self.ffi.new("char[]", 128)
        name = self._null if pkgName is None else self.ffi.new("char[]", pkgName.encode())
        rc = int(self.lib.aclsysGetVersionStr(name, out))
        if rc or out == self._null:
            return rc, ""
        return rc, self.ffi.string(out).decode(errors="replace")

    def aclrtGetRunMode(self, null_outputs: int = 0) -> tuple[int, int]:
        out = self._out("aclrtRunMode *", bool(null_outputs & 1))
        rc = int(self.lib.aclrtGetRunMode(out))
        return rc, int(out[0]) if rc == 0 and out != self._null else 0

    def control_cpu_address(self, ptr: int, size: int) -> int:
        # On the board (RC) device memory is the control CPU's own memory.
        rc, mode = self.aclrtGetRunMode()
        return ptr if rc == 0 and mode == 0 else 0

    def aclrtGetDeviceCount(self, null_outputs: int = 0) -> tuple[int, int]:
        out = self._out("uint32_t *", bool(null_outputs & 1))
        rc = int(self.lib.aclrtGetDeviceCount(out))
        return rc, int(out[0]) if rc == 0 and out != self._null else 0

    # -- allocation --------------------------------------------------------------------------------
    def _alloc(self, fn: Any, null_outputs: int, *args: Any) -> tuple[int, int]:
        if null_outputs & 1:
            return int(fn(self._null, *args)), 0
        out = self._new(self._void_pp)
        rc: int = fn(out, *args)
        return rc, int(self._cast(self._uintptr, out[0])) if rc == 0 else 0

    def aclrtMalloc(self, size: int, policy: int, null_outputs: int = 0) -> tuple[int, int]:
        if not null_outputs:
            out = self._fast_new(self._uintptr_p)
            try:
                rc: int = self._c_malloc(out, size, policy)
            except (OverflowError, TypeError):  # what the declared types convert, below
                return self._alloc(self.lib.aclrtMalloc, null_outputs, size, policy)
            return rc, out[0] if rc == 0 else 0
        return self._alloc(self.lib.aclrtMalloc, null_outputs, size, policy)

    def aclrtMallocAlign32(
        self, size: int, policy: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        return self._alloc(self.lib.aclrtMallocAlign32, null_outputs, size, policy)

    def aclrtMallocCached(
        self, size: int, policy: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        return self._alloc(self.lib.aclrtMallocCached, null_outputs, size, policy)

    def aclrtFree(self, devPtr: int) -> int:
        try:
            rc: int = self._c_free(devPtr)
        except (OverflowError, TypeError):  # a negative int or a pointer object
            rc = self.lib.aclrtFree(self._ptr(devPtr))
        return rc

    def aclrtMallocHost(self, size: int, null_outputs: int = 0) -> tuple[int, int]:
        return self._alloc(self.lib.aclrtMallocHost, null_outputs, size)

    def aclrtFreeHost(self, hostPtr: int) -> int:
        return int(self.lib.aclrtFreeHost(self._ptr(hostPtr)))

    def acldvppMalloc(self, size: int, null_outputs: int = 0) -> tuple[int, int]:
        lib = self._side_library("libacl_dvpp.so")
        return self._alloc(lib.acldvppMalloc, null_outputs, size)

    def acldvppFree(self, devPtr: int) -> int:
        return int(self._side_library("libacl_dvpp.so").acldvppFree(self._ptr(devPtr)))

    def hi_mpi_dvpp_malloc(
        self, dev_id: int, size: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        lib = self._side_library("libacl_dvpp_mpi.so")
        out = self._out("void **", bool(null_outputs & 1))
        rc = int(lib.hi_mpi_dvpp_malloc(dev_id, out, size))
        return rc, self._addr(out[0]) if rc == 0 and out != self._null else 0

    def hi_mpi_dvpp_free(self, dev_ptr: int) -> int:
        lib = self._side_library("libacl_dvpp_mpi.so")
        return int(lib.hi_mpi_dvpp_free(self._ptr(dev_ptr)))

    # -- copies and queries ------------------------------------------------------------------------
    def aclrtMemcpy(self, dst: int, destMax: int, src: int, count: int, kind: int) -> int:
        try:
            rc: int = self._c_memcpy(dst, destMax, src, count, kind)
        except (OverflowError, TypeError):
            rc = self.lib.aclrtMemcpy(self._ptr(dst), destMax, self._ptr(src), count, kind)
        return rc

    def aclrtMemset(self, devPtr: int, maxCount: int, value: int, count: int) -> int:
        try:
            rc: int = self._c_memset(devPtr, maxCount, value, count)
        except (OverflowError, TypeError):
            rc = self.lib.aclrtMemset(self._ptr(devPtr), maxCount, value, count)
        return rc

    def aclrtGetMemInfo(self, attr: int, null_outputs: int = 0) -> tuple[int, int, int]:
        free = self._out("size_t *", bool(null_outputs & 1))
        total = self._out("size_t *", bool(null_outputs & 2))
        rc = int(self.lib.aclrtGetMemInfo(attr, free, total))
        if rc or null_outputs & 3:
            return rc, 0, 0
        return rc, int(free[0]), int(total[0])

    def aclrtMemGetAddressRange(self, ptr: int, null_outputs: int = 0) -> tuple[int, int, int]:
        function = self._function("aclrtMemGetAddressRange", since="9.0.1")
        base = self._out("void **", bool(null_outputs & 1))
        size = self._out("size_t *", bool(null_outputs & 2))
        rc = int(function(self._ptr(ptr), base, size))
        if rc:
            return rc, 0, 0
        return (rc, 0 if base == self._null else self._addr(base[0]),
                0 if size == self._null else int(size[0]))

    def aclrtPointerGetAttributes(
        self, ptr: int, null_outputs: int = 0
    ) -> tuple[int, int, int, int]:
        attrs = self._out("aclrtPtrAttributes *", bool(null_outputs & 1))
        rc = int(self.lib.aclrtPointerGetAttributes(self._ptr(ptr), attrs))
        if rc or attrs == self._null:
            return rc, 0, 0, 0
        return rc, int(attrs.location.type), int(attrs.location.id), int(attrs.pageSize)

    # -- streams (§3.4) ----------------------------------------------------------------------------
    def aclrtCreateStream(self, null_outputs: int = 0) -> tuple[int, int]:
        return self._alloc(self.lib.aclrtCreateStream, null_outputs)

    def aclrtDestroyStream(self, stream: int) -> int:
        return int(self.lib.aclrtDestroyStream(self._ptr(stream)))

    def aclrtDestroyStreamForce(self, stream: int) -> int:
        return int(self.lib.aclrtDestroyStreamForce(self._ptr(stream)))

    def aclrtSynchronizeStream(self, stream: int) -> int:
        return int(self.lib.aclrtSynchronizeStream(self._ptr(stream)))

    def aclrtSynchronizeDevice(self) -> int:
        return int(self.lib.aclrtSynchronizeDevice())

    def aclrtMemcpyAsync(
        self, dst: int, destMax: int, src: int, count: int, kind: int, stream: int
    ) -> int:
        return int(self.lib.aclrtMemcpyAsync(self._ptr(dst), destMax, self._ptr(src), count,
                                             kind, self._ptr(stream)))

    def aclrtMemsetAsync(
        self, devPtr: int, maxCount: int, value: int, count: int, stream: int
    ) -> int:
        return int(self.lib.aclrtMemsetAsync(self._ptr(devPtr), maxCount, value, count,
                                             self._ptr(stream)))


def _quiet_library_recorder(path: str) -> None:
    """acl_mem's own fake library records ACL_MEM_TRACE itself in a C program; here the
    Python recorder does (acl_mem.trace), so the library's is turned off before its first
    call and nothing is written twice. Huawei's library has no such switch."""
    try:
        switch = ctypes.CDLL(path).acl_mem_fake_set_trace
    except (OSError, AttributeError):
        return
    switch.argtypes = [ctypes.c_int]
    switch.restype = ctypes.c_int
    switch(0)


#: Every binding of the process, for the fork handler.
_bindings: weakref.WeakSet[NativeBackend] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A lock another thread held at the fork stays held in the child: each is new."""
    for binding in list(_bindings):
        binding._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
