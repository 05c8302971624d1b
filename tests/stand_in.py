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

from acl_mem._native.loader import make_ffi
from acl_mem.shim._engine_runtime import LAST_ERROR_GETTERS
from acl_mem.shim._marshal import forwarder

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
        # The C-arguments -> Backend marshalling is the shim's (acl_mem/shim/_marshal.py).
        # Failures become the thread's last error, as inside the real library; the
        # getters' result is the code they report.
        noted = None if name in LAST_ERROR_GETTERS else (
            lambda rc, args: self.target.note_failure(rc))
        forward = forwarder(self.ffi, name, fntype, lambda: self.target, failed=noted,
                            names=[f"arg{i}" for i in range(len(fntype.args))])

        def entry(*cargs: Any) -> Any:
            try:
                return forward(*cargs)
            except BaseException as exc:
                self.errors.append(exc)
                raise

        error = self.ffi.NULL if fntype.result.kind == "pointer" else CALLBACK_FAILED
        return self.ffi.callback(fntype, entry, error=error)


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
