"""C arguments to the Backend protocol and back (acl_mem._backend.Backend).

A C entry point gets cffi cdata: ints, pointers, ``char *``, structs. :func:`forwarder`
turns one bound function (a name from acl_mem/_native/cdef.py and its cffi function
type) into a Python function of those cdata that calls the backend's C-shaped method:
NULL out-pointers become ``null_outputs`` bits, outputs are written back through the
pointers only on success, and ``const``-less input pointers (structs, pid lists) are
read into acl_mem._structs objects. Used by the shim's engine (C programs on the fake)
and by the test suite's stand-in libascendcl (the native backend on the fake).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import cffi

from .._structs import aclrtMemAccessDesc, aclrtMemLocation, aclrtPhysicalMemProp

__all__ = ["forwarder", "roles"]

#: Pointer arguments that are inputs although C gives them no const (or cffi drops it).
_INPUT_POINTERS = {
    ("aclrtMallocPhysical", 2): "in_prop",
    ("aclrtMemGetAllocationGranularity", 0): "in_prop",
    ("aclrtMemSetAccess", 2): "in_desc",
    ("aclrtMemSetPidToShareableHandle", 1): "in_pids",
}
#: ``char *`` arguments the callee writes (a string output, not an input).
_OUTPUT_STRINGS = {("aclsysGetVersionStr", 1)}


def _role(ctype: Any) -> str:
    if ctype.kind in ("primitive", "enum"):
        return "int"
    item = ctype.item
    if item.kind == "void":
        return "ptr"
    if item.cname == "char":
        return "str"
    if item.kind == "pointer":
        return "out_ptr"
    if item.kind == "struct":
        return "out_struct"
    return "out_int"


def roles(name: str, fntype: Any) -> list[str]:
    """What each argument of ``name`` is: an input (int, ptr, str, in_*) or an output."""
    return [_INPUT_POINTERS.get((name, i))
            or ("out_str" if (name, i) in _OUTPUT_STRINGS else _role(arg))
            for i, arg in enumerate(fntype.args)]


def _read_prop(value: Any) -> aclrtPhysicalMemProp:
    return aclrtPhysicalMemProp(
        int(value.handleType), int(value.allocationType), int(value.memAttr),
        aclrtMemLocation(int(value.location.id), int(value.location.type)), int(value.reserve))


def _read_input(ffi: cffi.FFI, role: str, value: Any, count: int) -> Any:
    if value == ffi.NULL:
        return None
    if role == "in_prop":
        return _read_prop(value)
    if role == "in_pids":
        return [int(value[i]) for i in range(count)]
    return [aclrtMemAccessDesc(int(value[i].flags),
                               aclrtMemLocation(int(value[i].location.id),
                                                int(value[i].location.type)),
                               bytes(ffi.buffer(value[i].rsv)))
            for i in range(count)]


def _write_struct(ffi: cffi.FFI, target: Any, values: list[Any]) -> int:
    """Fill an output struct from the backend's outputs; returns how many it used."""
    cname = ffi.typeof(target).item.cname
    if cname == "aclrtPtrAttributes":
        target.location.type, target.location.id, target.pageSize = values[:3]
        return 3
    if cname == "aclrtPhysicalMemProp":
        prop = values[0]
        target.handleType, target.allocationType = prop.handleType, prop.allocationType
        target.memAttr, target.reserve = prop.memAttr, prop.reserve
        target.location.id, target.location.type = prop.location.id, prop.location.type
        return 1
    raise TypeError(f"acl_mem marshalling: no writer for output struct {cname}")


def forwarder(ffi: cffi.FFI, name: str, fntype: Any,
              target: Callable[[], Any]) -> Callable[..., Any]:
    """A Python function of ``fntype``'s C arguments that calls ``target().<name>``.

    ``target`` is looked up on every call, so the backend can be replaced. A function
    returning a pointer (aclrtGetSocName) returns a ``char[]`` kept alive for good, as
    the real library returns a static string.
    """
    if fntype.result.kind == "pointer":
        return _soc_name_forwarder(ffi, target)
    arg_roles = roles(name, fntype)
    if all(role in ("int", "ptr") for role in arg_roles):
        return _inputs_only(ffi, name, arg_roles, target)
    return _general(ffi, name, arg_roles, target)


def _soc_name_forwarder(ffi: cffi.FFI, target: Callable[[], Any]) -> Callable[..., Any]:
    kept: dict[bytes, Any] = {}

    def soc_name() -> Any:
        name = str(target().soc_name()).encode()
        if name not in kept:
            kept[name] = ffi.new("char[]", name)
        return kept[name]

    return soc_name


def _inputs_only(ffi: cffi.FFI, name: str, arg_roles: list[str],
                 target: Callable[[], Any]) -> Callable[..., Any]:
    # The hot calls (aclrtFree, aclrtMemcpy, aclrtMemset ...): ints and addresses only.
    cast = ffi.cast
    pointers = tuple(i for i, role in enumerate(arg_roles) if role == "ptr")

    def call(*cargs: Any) -> int:
        args = list(cargs)
        for i in pointers:
            args[i] = int(cast("uintptr_t", args[i]))
        return int(getattr(target(), name)(*args))

    return call


def _general(ffi: cffi.FFI, name: str, arg_roles: list[str],
             target: Callable[[], Any]) -> Callable[..., Any]:
    null = ffi.NULL
    cast = ffi.cast

    def call(*cargs: Any) -> int:
        inputs: list[Any] = []
        outputs: list[tuple[str, Any]] = []
        mask = 0
        for index, (role, value) in enumerate(zip(arg_roles, cargs, strict=True)):
            if role == "int":
                inputs.append(int(value))
            elif role == "ptr":
                inputs.append(int(cast("uintptr_t", value)))
            elif role.startswith("in_"):
                count = int(cargs[index + 1]) if index + 1 < len(cargs) else 0
                inputs.append(_read_input(ffi, role, value, count))
            elif role == "str":
                inputs.append(None if value == null else os.fsdecode(ffi.string(value)))
            else:
                if value == null:
                    mask |= 1 << len(outputs)
                outputs.append((role, value))
        method = getattr(target(), name)
        if not outputs:
            return int(method(*inputs))
        rc, *values = method(*inputs, null_outputs=mask)
        if rc == 0:
            _write_outputs(ffi, outputs, values)
        return int(rc)

    return call


def _write_outputs(ffi: cffi.FFI, outputs: list[tuple[str, Any]], values: list[Any]) -> None:
    null = ffi.NULL
    for role, pointer in outputs:
        if role == "out_struct":
            if pointer != null:
                values = values[_write_struct(ffi, pointer, values):]
            continue
        value = values.pop(0)
        if pointer == null:
            continue
        if role == "out_str":
            data = str(value).encode() + b"\0"
            ffi.memmove(pointer, data, len(data))
        else:
            pointer[0] = ffi.cast("void *", value) if role == "out_ptr" else value
