"""The few C types and libc functions the Pythonic layer and the fake need, built from
``_cffi_backend`` directly instead of from C declarations parsed by ``cffi.FFI``.

``cffi.FFI()`` imports cffi's C parser (pycparser), about a quarter of ``import
acl_mem``; a C program's first call through the drop-in library pays that import.
:class:`LiteFFI` answers the ``ffi`` calls acl_mem makes (``cast``, ``new``,
``from_buffer``, ``gc``, ``buffer``, ``callback``, ``memmove``, ``typeof``, ``errno``)
for the type names in :data:`_TYPES`, with the same cdata objects cffi returns. A type
name it does not know raises KeyError at once (the suite exercises every call site).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import _cffi_backend

__all__ = ["LiteFFI", "libc_function"]

# As Any: the stubs of _cffi_backend describe cffi's own uses, not every documented form.
_backend: Any = _cffi_backend
_void = _backend.new_void_type()
_voidp = _backend.new_pointer_type(_void)
_char = _backend.new_primitive_type("char")
_uchar = _backend.new_primitive_type("unsigned char")
_int = _backend.new_primitive_type("int")
_long = _backend.new_primitive_type("long")
_ulong = _backend.new_primitive_type("unsigned long")
_size_t = _backend.new_primitive_type("size_t")
_uintptr = _backend.new_primitive_type("uintptr_t")
_charp = _backend.new_pointer_type(_char)
_iovec = _backend.new_struct_type("struct iovec")
_backend.complete_struct_or_union(_iovec, [("iov_base", _voidp, -1), ("iov_len", _size_t, -1)])
_iovecp = _backend.new_pointer_type(_iovec)

_TYPES: dict[str, Any] = {
    "void *": _voidp,
    "void **": _backend.new_pointer_type(_voidp),
    "char *": _charp,
    "char[]": _backend.new_array_type(_charp, None),
    "unsigned char[]": _backend.new_array_type(_backend.new_pointer_type(_uchar), None),
    "uintptr_t": _uintptr,
    "struct iovec *": _iovecp,
    "struct iovec[]": _backend.new_array_type(_iovecp, None),
    "struct iovec[2]": _backend.new_array_type(_iovecp, 2),
    "int(void *, void *, int)": _backend.new_function_type((_voidp, _voidp, _int), _int, False),
    "void(void *, void *)": _backend.new_function_type((_voidp, _voidp), _void, False),
}
#: C types by the names the function prototypes below use.
_NAMED = {"void *": _voidp, "int": _int, "long": _long, "unsigned long": _ulong,
          "size_t": _size_t, "unsigned char *": _backend.new_pointer_type(_uchar),
          "const struct iovec *": _iovecp}


class LiteFFI:
    """The subset of ``cffi.FFI`` acl_mem uses, without a C parser."""

    NULL = _backend.cast(_voidp, 0)
    buffer = _backend.buffer

    @staticmethod
    def typeof(cdecl: str) -> Any:
        return _TYPES[cdecl]

    @staticmethod
    def _type(cdecl: Any) -> Any:
        return _TYPES[cdecl] if isinstance(cdecl, str) else cdecl

    def cast(self, cdecl: Any, source: Any) -> Any:
        return _backend.cast(self._type(cdecl), source)

    def new(self, cdecl: Any, init: Any = None) -> Any:
        return _backend.newp(self._type(cdecl), init)

    def from_buffer(self, cdecl: Any, python_buffer: Any = None,
                    require_writable: bool = False) -> Any:
        if python_buffer is None:  # from_buffer(obj): a char[] over obj, as cffi does
            cdecl, python_buffer = "char[]", cdecl
        return _backend.from_buffer(self._type(cdecl), python_buffer, require_writable)

    @staticmethod
    def gc(cdata: Any, destructor: Callable[[Any], None] | None, size: int = 0) -> Any:
        return _backend.gcp(cdata, destructor, size)

    def callback(self, cdecl: Any, python_callable: Callable[..., Any], error: Any = None,
                 onerror: Callable[..., Any] | None = None) -> Any:
        return _backend.callback(self._type(cdecl), python_callable, error, onerror)

    @staticmethod
    def memmove(dest: Any, src: Any, n: int) -> None:
        _backend.memmove(dest, src, n)

    @property
    def errno(self) -> int:
        return int(_backend.get_errno())


_libc = _backend.load_library(None)


def libc_function(result: str, name: str, *params: str) -> Any:
    """The C library's ``name`` with the given prototype (type names of :data:`_NAMED`),
    resolved now rather than on its first call."""
    ftype = _backend.new_function_type(tuple(_NAMED[p] for p in params), _NAMED[result],
                                       False)
    return _libc.load_function(ftype, name)
