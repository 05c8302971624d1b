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

from .. import _backend
from .._structs import aclrtMemAccessDesc, aclrtMemLocation, aclrtPhysicalMemProp

__all__ = ["fast_eligible", "forwarder", "lowered_arg", "roles"]

_HERE = os.path.dirname(os.path.abspath(__file__))
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


#: Output structs and how many of the backend's outputs each one takes.
_STRUCT_OUTPUTS = {"aclrtPtrAttributes": 3, "aclrtPhysicalMemProp": 1}


def _write_struct(cname: str, target: Any, values: tuple[Any, ...]) -> None:
    """Fill an output struct from the backend's outputs."""
    if cname == "aclrtPtrAttributes":
        target.location.type, target.location.id, target.pageSize = values
        return
    prop = values[0]
    target.handleType, target.allocationType = prop.handleType, prop.allocationType
    target.memAttr, target.reserve = prop.memAttr, prop.reserve
    target.location.id, target.location.type = prop.location.id, prop.location.type


def forwarder(ffi: cffi.FFI, name: str, fntype: Any, target: Callable[[], Any],
              *, lowered: bool = False,
              failed: Callable[[int, dict[str, object]], None] | None = None,
              names: list[str] | None = None,
              sited: Callable[..., Any] | None = None,
              noted: Callable[[int], None] | None = None,
              fast: bool = False) -> Callable[..., Any]:
    """A Python function of ``fntype``'s C arguments that calls ``target().<name>``.

    ``target`` is looked up on every call, so the backend can be replaced. A function
    returning a pointer (aclrtGetSocName) returns a ``char[]`` kept alive for good, as
    the real library returns a static string. ``lowered``: the caller passes ``void *``
    inputs as ``uintptr_t`` and ``void **`` outputs as ``uintptr_t *`` (see
    :func:`lowered_arg`), so that no pointer is converted in Python.

    ``failed``, given with the parameters' C ``names``, is called when the call returns
    a non-zero code, with the code and the input arguments by name (ints, addresses as
    ints, strings): the shim's aclGetRecentErrMsg text is made from them.

    ``sited(plain, *args)`` is called instead when the backend's memory checker is on
    (the shim runs the call inside a frame naming its C caller); ``noted(pointer)`` hears
    the first pointer output of each successful call (the shim notes who allocated it).

    ``fast`` (lowered, for a function :func:`fast_eligible` accepts): the function takes
    the inputs only and returns the output on success, minus the code on failure; the
    shim's engine calls it when the output pointer is not NULL and writes the output in
    C, which saves making and writing a pointer object per call.

    The function is generated as Python source, one per C function: a C call into the
    fake pays for the fake's work, not for a loop over argument roles.
    """
    if fntype.result.kind == "pointer":
        return _soc_name_forwarder(ffi, target)
    if failed is not None and (names is None or len(names) != len(fntype.args)):
        raise ValueError(f"forwarder({name}): failed needs one name per argument, got {names}")
    source = _source(name, roles(name, fntype),
                     [arg.item.cname.removeprefix("struct ") if arg.kind == "pointer" else ""
                      for arg in fntype.args], lowered, names if failed is not None else None,
                     sited=sited is not None, noted=noted is not None, fast=fast)
    namespace: dict[str, Any] = {
        "target": target, "NULL": ffi.NULL, "cast": ffi.cast, "string": ffi.string,
        "memmove": ffi.memmove, "fsdecode": os.fsdecode, "VOIDP": ffi.typeof("void *"),
        "UINTPTR": ffi.typeof("uintptr_t"), "read_input": _read_input, "ffi": ffi,
        "write_struct": _write_struct, "failed": failed, "sited": sited, "noted": noted,
    }
    # Named as a file of acl_mem's: the checker leaves the frame out of allocation stacks.
    if target is _backend.get:
        # The active backend read as acl_mem.raw reads it: no call once there is one.
        source = source.replace("target()", "(_backend._active or target())")
        namespace["_backend"] = _backend
    exec(compile(source, os.path.join(_HERE, f"<marshalling of {name}>"), "exec"), namespace)
    function: Callable[..., Any] = namespace[name]
    return function


def lowered_arg(role: str, declared: str) -> str:
    """The C type a lowered forwarder takes for an argument of ``role`` declared so."""
    return {"ptr": "uintptr_t", "out_ptr": "uintptr_t *"}.get(role, declared)


def _sited(name: str, plain: str) -> str:
    """``plain`` (the source of function ``name``) as two functions: ``name`` hands the
    call to ``sited(plain_<name>, backend, ...)`` while the fake's checker is on."""
    header, body = plain.split("\n", 1)
    args = header[header.index("(") + 1:header.rindex(")")]
    # One backend lookup serves the checker test and the call (no wrapper frame).
    plain = plain.replace(f"def {name}(", f"def plain_{name}(backend, ", 1).replace(
        "target().", "backend.")
    body = body.replace("target().", "backend.")
    # The common case (checker off) runs plain's body inline: no second frame.
    return "\n".join([
        plain,
        header,
        "    backend = target()",
        # The fake's state read directly (the checker property costs a call); any other
        # backend has no checker.
        "    try: checking = backend._state.checker is not None",
        "    except AttributeError: checking = False",
        "    if checking:",
        f"        return sited(plain_{name}, backend, {args})",
        body])


def fast_eligible(arg_roles: list[str]) -> bool:
    """Whether a function can have a fast entry (see forwarder): plain inputs and one
    ``void **`` output."""
    outputs = [r for r in arg_roles if r not in ("int", "ptr")]
    return outputs == ["out_ptr"]


def _fast_source(name: str, arg_roles: list[str], names: list[str] | None,
                 noted: bool) -> str:
    """The fast entry of ``name``: the inputs only; returns the output on success,
    minus the code on failure (the engine's C writes the output)."""
    params = [f"a{i}" for i, role in enumerate(arg_roles) if role != "out_ptr"]
    call = f"target().{name}({', '.join(params)})"
    lines = [f"def {name}({', '.join(params)}):", f"    result = {call}",
             "    if result[0] == 0:"]
    if noted:
        lines.append("        noted(result[1])")
    lines.append("        return result[1]")
    if names is not None:
        described = ", ".join(f"{names[i]!r}: a{i}" for i, role in enumerate(arg_roles)
                              if role != "out_ptr")
        lines.append(f"    failed(result[0], {{{described}}})")
    lines += ["    return -result[0]", ""]
    return "\n".join(lines)


def _source(name: str, arg_roles: list[str], pointees: list[str], lowered: bool,
            names: list[str] | None = None, *, sited: bool = False, noted: bool = False,
            fast: bool = False) -> str:
    """The Python source of the forwarder of ``name`` (see forwarder); with ``names``, a
    failed call calls ``failed(rc, {name: input, ...})``. With ``sited`` it is two
    functions: ``name`` hands the call to ``sited(plain, ...)`` while the checker is on."""
    if fast:
        plain = _fast_source(name, arg_roles, names, noted)
        return _sited(name, plain) if sited else plain
    if sited:
        return _sited(name, _source(name, arg_roles, pointees, lowered, names, noted=noted))
    params = [f"a{i}" for i in range(len(arg_roles))]
    body: list[str] = []
    inputs: list[str] = []
    described: list[str] = []  # "'name': expression" of each plain input
    writes: list[str] = []
    taken = 0  # outputs of the backend's result written so far (after rc)
    outputs = 0
    for i, role in enumerate(arg_roles):
        arg = f"a{i}"
        if role in ("int", "ptr", "str") and names is not None:
            expression = {"int": arg, "ptr": arg if lowered else f"int(cast(UINTPTR, {arg}))",
                          "str": f"(None if {arg} == NULL else fsdecode(string({arg})))"}[role]
            described.append(f"{names[i]!r}: {expression}")
        if role == "int":
            inputs.append(arg)
        elif role == "ptr":
            inputs.append(arg if lowered else f"int(cast(UINTPTR, {arg}))")
        elif role == "str":
            inputs.append(f"(None if {arg} == NULL else fsdecode(string({arg})))")
        elif role.startswith("in_"):
            count = f"a{i + 1}" if i + 1 < len(arg_roles) else "0"
            inputs.append(f"read_input(ffi, {role!r}, {arg}, int({count}))")
        else:
            bit = 1 << outputs
            outputs += 1
            body.append(f"    if {arg} == NULL: mask |= {bit}")
            if role == "out_struct":
                used = _STRUCT_OUTPUTS[pointees[i]]
                values = f"result[{taken + 1}:{taken + 1 + used}]"
                writes.append(f"        if not mask & {bit}: "
                              f"write_struct({pointees[i]!r}, {arg}, {values})")
                taken += used
                continue
            value = f"result[{taken + 1}]"
            taken += 1
            if role == "out_str":
                written = f"data = str({value}).encode() + b'\\0'; memmove({arg}, data, len(data))"
            elif role == "out_ptr" and not lowered:
                written = f"{arg}[0] = cast(VOIDP, {value})"
            else:
                written = f"{arg}[0] = {value}"
            if noted and role == "out_ptr" and taken == 1:
                written += f"; noted({value})"
            writes.append(f"        if not mask & {bit}: {written}")
    lines = [f"def {name}({', '.join(params)}):"]
    note = f"failed({{rc}}, {{{{{', '.join(described)}}}}})" if names is not None else ""
    if not outputs:
        call = f"target().{name}({', '.join(inputs)})"
        if not note:
            return "\n".join([*lines, f"    return {call}", ""])
        return "\n".join([*lines, f"    rc = {call}", f"    if rc: {note.format(rc='rc')}",
                          "    return rc", ""])
    plain = f"target().{name}({', '.join(inputs)})"
    masked = f"target().{name}({', '.join([*inputs, 'null_outputs=mask'])})"
    lines += ["    mask = 0", *body,
              f"    result = {masked} if mask else {plain}",
              "    if result[0] == 0:", *writes]
    if note:
        lines += ["    else:", f"        {note.format(rc='result[0]')}"]
    lines += ["    return result[0]", ""]
    return "\n".join(lines)


def _soc_name_forwarder(ffi: cffi.FFI, target: Callable[[], Any]) -> Callable[..., Any]:
    kept: dict[bytes, Any] = {}

    def soc_name() -> Any:
        name = str(target().soc_name()).encode()
        if name not in kept:
            kept[name] = ffi.new("char[]", name)
        return kept[name]

    return soc_name
