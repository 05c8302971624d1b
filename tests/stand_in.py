"""Drive the native backend without hardware: a stand-in libascendcl over the fake.

``build()`` compiles ``stubs/stand_in_ascendcl.c`` into a directory laid out like a
CANN install (``lib64/libascendcl.so``, ``libacl_dvpp.so``, ``libacl_dvpp_mpi.so``);
``build_temporary()`` does so in a temporary directory removed when the process exits.
``StandIn`` fills the libraries' forwarding tables with cffi callbacks that turn C
arguments into the fake's C-shaped entry points (``acl_mem._backend.Backend``): NULL
out-pointers become ``null_outputs`` bits, outputs are written back through the
pointers. The native backend then runs its whole path (loading, marshalling, out
parameters, structs, error codes) through real C calls.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import cffi

from acl_mem._native.loader import make_ffi
from acl_mem._structs import aclrtMemAccessDesc, aclrtMemLocation, aclrtPhysicalMemProp

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "stubs" / "stand_in_ascendcl.c"
LIBRARIES = {1: "libascendcl.so", 2: "libacl_dvpp.so", 3: "libacl_dvpp_mpi.so"}
#: Returned by a callback that raised: ACL_ERROR_RT_INTERNAL_ERROR.
CALLBACK_FAILED = 507000


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_stand_in", ROOT / "stubs" /
                                                  "gen_stand_in.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def build_temporary(prefix: str = "acl_mem_stand_in_") -> Path:
    """build() into a new temporary directory that is removed when this process exits.

    Only the process that made it removes it: a forked child exiting normally leaves
    it to its parent.
    """
    destination = Path(tempfile.mkdtemp(prefix=prefix))
    owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:
            shutil.rmtree(destination, ignore_errors=True)

    atexit.register(remove)
    try:
        return build(destination)
    except BaseException:
        remove()
        raise


def build(destination: Path) -> Path:
    """Compile the three stand-in libraries into ``destination/lib64``; returns the root."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc/gcc) to build the stand-in libascendcl")
    lib64 = destination / "lib64"
    lib64.mkdir(parents=True, exist_ok=True)
    # The library of the release the fake plays lacks the functions that release lacks.
    from acl_mem._fake.config import current_cann

    release = [f"-DSTAND_IN_CANN_{current_cann().name.replace('.', '_')}"]
    for number, name in LIBRARIES.items():
        subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror",
                        f"-DSTAND_IN_LIB={number}", *release, "-o", str(lib64 / name),
                        str(SOURCE)],
                       check=True, capture_output=True, text=True)
    return destination


def _role(ffi: cffi.FFI, ctype: Any) -> str:
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


#: Pointer arguments that are inputs although C gives them no const (or cffi drops it).
_INPUT_POINTERS = {
    ("aclrtMallocPhysical", 2): "in_prop",
    ("aclrtMemGetAllocationGranularity", 0): "in_prop",
    ("aclrtMemSetAccess", 2): "in_desc",
    ("aclrtMemSetPidToShareableHandle", 1): "in_pids",
}
#: ``char *`` arguments the callee writes (a string output, not an input).
_OUTPUT_STRINGS = {("aclsysGetVersionStr", 1)}


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
    raise TypeError(f"stand-in: no writer for output struct {cname}")


class StandIn:
    """The forwarding tables of the three libraries, bound to a replaceable fake."""

    def __init__(self, root: Path) -> None:
        self.ffi = make_ffi()
        generator = _generator()
        self.ffi.cdef(generator.table_declaration())
        self.ffi.cdef("void acl_mem_stand_in_install(const struct acl_mem_stand_in_table *);")
        self.target: Any = None
        self.errors: list[BaseException] = []
        self._keep: list[Any] = []
        self._soc: Any = None
        table = self.ffi.new("struct acl_mem_stand_in_table *")
        for name in generator.function_names():
            field = dict(self.ffi.typeof("struct acl_mem_stand_in_table").fields)[name]
            callback = self._callback(name, field.type)
            self._keep.append(callback)
            setattr(table, name, callback)
        self._libs = [self.ffi.dlopen(str(root / "lib64" / lib)) for lib in LIBRARIES.values()]
        for lib in self._libs:
            lib.acl_mem_stand_in_install(table)
        self._table = table

    def _callback(self, name: str, fntype: Any) -> Any:
        ffi = self.ffi
        roles = [_INPUT_POINTERS.get((name, i))
                 or ("out_str" if (name, i) in _OUTPUT_STRINGS else _role(ffi, arg))
                 for i, arg in enumerate(fntype.args)]
        returns_pointer = fntype.result.kind == "pointer"

        def entry(*cargs: Any) -> Any:
            try:
                return forward(*cargs)
            except BaseException as exc:
                self.errors.append(exc)
                raise

        def forward(*cargs: Any) -> Any:
            if returns_pointer:
                return self._soc_name()
            inputs: list[Any] = []
            outputs: list[tuple[str, Any]] = []
            mask = 0
            for index, (role, value) in enumerate(zip(roles, cargs, strict=True)):
                if role.startswith("in_"):
                    count = int(cargs[index + 1]) if index + 1 < len(cargs) else 0
                    inputs.append(_read_input(ffi, role, value, count))
                elif role == "int":
                    inputs.append(int(value))
                elif role == "ptr":
                    inputs.append(int(ffi.cast("uintptr_t", value)))
                elif role == "str":
                    inputs.append(None if value == ffi.NULL else os.fsdecode(ffi.string(value)))
                else:
                    if value == ffi.NULL:
                        mask |= 1 << len(outputs)
                    outputs.append((role, value))
            method = getattr(self.target, name)
            if not outputs:
                return int(method(*inputs))
            rc, *values = method(*inputs, null_outputs=mask)
            if rc == 0:
                for role, pointer in outputs:
                    if role == "out_struct":
                        if pointer != ffi.NULL:
                            values = values[_write_struct(ffi, pointer, values):]
                        continue
                    value = values.pop(0)
                    if pointer == ffi.NULL:
                        continue
                    if role == "out_str":
                        data = value.encode() + b"\0"
                        ffi.memmove(pointer, data, len(data))
                    else:
                        pointer[0] = ffi.cast("void *", value) if role == "out_ptr" else value
            return rc

        error = ffi.NULL if returns_pointer else CALLBACK_FAILED
        return ffi.callback(fntype, entry, error=error)

    def _soc_name(self) -> Any:
        name = self.target.soc_name().encode()
        if self._soc is None or self.ffi.string(self._soc) != name:
            self._soc = self.ffi.new("char[]", name)
        return self._soc


#: Set by the test suite while the native backend runs on the stand-in, so that child
#: interpreters (fresh-process tests) can attach to the same libraries.
ROOT_VARIABLE = "ACL_MEM_STAND_IN_ROOT"
SUBPROCESS_PRELUDE = f"""
import os as _os, sys as _sys
if _os.environ.get({ROOT_VARIABLE!r}):
    _sys.path.insert(0, {str(ROOT / "tests")!r})
    import stand_in as _stand_in
    _stand_in.activate_from_environment()
"""
_active: StandIn | None = None


def activate_from_environment() -> StandIn:
    """In a child interpreter: bind the stand-in to a fresh fake, point the loader at it."""
    global _active
    from acl_mem._fake import FakeBackend
    from acl_mem._fake.config import current_profile

    root = Path(os.environ[ROOT_VARIABLE])
    _active = StandIn(root)
    _active.target = FakeBackend(current_profile())
    os.environ["ASCEND_HOME_PATH"] = str(root)
    return _active
