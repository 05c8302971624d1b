"""The shim's engine: a cffi embedding library that runs acl_mem's fake inside a C process.

``libacl_mem_shim_engine.so`` is loaded by the front libraries (acl_mem/shim/_csource.py)
on their first supported call, after they made libpython's symbols global. Its
``acl_mem_shim_engine_start()`` starts Python once (unless the process already runs it,
e.g. a Python program using ctypes: then it joins that interpreter and its fake),
imports acl_mem from where it was built, and returns the table of entry points: one
``extern "Python"`` function per bound function, marshalled by acl_mem/shim/_marshal.py
into the active backend (which it makes the fake). It returns NULL, having said why
on stderr, if any of that fails.

It is not linked against libpython, so that in a Python process whose interpreter is
statically linked it binds to that interpreter instead of loading a second one.
"""

from __future__ import annotations

import re
from typing import Any

import cffi

from .._native.cdef import TYPES
from .._native.loader import make_ffi
from ._csource import START_FAILED, c_string
from ._decls import function_names, sections, table_declaration
from ._engine_runtime import ALLOCATING
from ._extra import ENGINE as EXTRA_ENGINE
from ._extra import service_fields
from ._marshal import fast_eligible, lowered_arg, roles

__all__ = ["ENGINE", "MODULE", "READY", "engine_ffi"]

#: The engine's file name, next to the front libraries.
ENGINE = "libacl_mem_shim_engine.so"
#: The Python module name cffi gives the engine inside the interpreter.
MODULE = "_acl_mem_shim_engine"
#: What the start function returns when the fake is ready (0 is cffi's "init failed").
READY = 0x5A11
#: ... and when the init code failed and already printed why.
EXPLAINED = 1

_HI_TYPES = """typedef int hi_s32;
typedef unsigned int hi_u32;
typedef unsigned long long hi_u64;
typedef void hi_void;
"""

# The C part. Python is started here rather than by cffi so that it starts as the
# interpreter that built the shim (its program name: a venv's python finds the venv's
# site-packages, where _cffi_backend lives), with the recorded paths first on sys.path
# and the user's PYTHON* variables ignored.
_START = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
int acl_mem_shim_py_start(void);
static pthread_once_t acl_mem_shim_once = PTHREAD_ONCE_INIT;
static int acl_mem_shim_ok;

/* cffi's start-up (before Python 3.12) uses PyCapsule_Type.tp_version_tag as a spin
   lock it expects to be 0; in a running interpreter that looked up an attribute of the
   capsule type it is not, and cffi would spin (or assert) for ever. With the GIL held
   (nothing else can look types up), the tag reads 0 while cffi starts, then comes back. */
/* The build's paths (acl_mem, _cffi_backend) go first on sys.path while cffi and the
   Python part start, which import from them, and sys.path is given back afterwards: a
   process that loaded the library (ctypes, a host embedding Python, even one without
   site-packages) keeps its own. Returns a copy of sys.path to restore, or NULL. */
static PyObject *acl_mem_shim_push_paths(PyObject *path)
{
    const char *start = ACL_MEM_SHIM_PATHS, *end;
    PyObject *saved;
    Py_ssize_t at = 0;
    if (path == NULL || !PyList_Check(path))
        return NULL;
    saved = PyList_GetSlice(path, 0, PyList_GET_SIZE(path));
    if (saved == NULL) {
        PyErr_Clear();
        return NULL;
    }
    for (; *start != '\0'; start = *end ? end + 1 : end) {
        PyObject *entry;
        end = strchr(start, ':');
        if (end == NULL)
            end = start + strlen(start);
        entry = PyUnicode_DecodeFSDefaultAndSize(start, end - start);
        if (entry != NULL && PySequence_Contains(path, entry) == 0
                && PyList_Insert(path, at, entry) == 0)
            at++;
        Py_XDECREF(entry);
        PyErr_Clear();
    }
    return saved;
}

static void acl_mem_shim_pop_paths(PyObject *path, PyObject *saved)
{
    if (saved == NULL)
        return;
    if (PyList_SetSlice(path, 0, PyList_GET_SIZE(path), saved) != 0)
        PyErr_Clear();
    Py_DECREF(saved);
}

static int acl_mem_shim_start_cffi(void)
{
    int result;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *path = PySys_GetObject("path");  /* borrowed: held while in use */
    PyObject *saved;
    Py_XINCREF(path);
    saved = acl_mem_shim_push_paths(path);
    {
#if PY_VERSION_HEX < 0x030C0000
        unsigned int tag = PyCapsule_Type.tp_version_tag;
        PyCapsule_Type.tp_version_tag = 0;
#endif
        result = acl_mem_shim_py_start();
#if PY_VERSION_HEX < 0x030C0000
        PyCapsule_Type.tp_version_tag = tag;
#endif
    }
    acl_mem_shim_pop_paths(path, saved);
    Py_XDECREF(path);
    PyGILState_Release(gil);
    return result;
}

/* fork() from a C thread while other threads are inside the engine (acl_mem/shim/_extra.py,
   "fork"): the forking thread takes aclInit's lock and then the GIL, as aclInit does, so
   no other thread is inside Python or aclInit at the fork; the child then re-initialises
   Python as os.fork() does (its at-fork handlers give the fake fresh locks and empty
   devices). A thread that already holds the GIL is Python forking (os.fork: it does all
   this itself) or an extension that chose not to: nothing is done then. */
static __thread int acl_mem_shim_fork_gil_taken;
static __thread int acl_mem_shim_fork_init_locked;
static __thread PyGILState_STATE acl_mem_shim_fork_gil;

static int acl_mem_shim_python_running(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsInitialized() && !Py_IsFinalizing();
#else
    return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

static void acl_mem_shim_before_fork(void)
{
    acl_mem_shim_fork_gil_taken = 0;
    acl_mem_shim_fork_init_locked = 0;
    if (!acl_mem_shim_python_running() || PyGILState_Check())
        return;
    pthread_mutex_lock(&acl_mem_shim_init_lock);
    acl_mem_shim_fork_init_locked = 1;
    acl_mem_shim_fork_gil = PyGILState_Ensure();
    PyOS_BeforeFork();
    acl_mem_shim_fork_gil_taken = 1;
}

static void acl_mem_shim_after_fork_parent(void)
{
    if (acl_mem_shim_fork_gil_taken) {
        PyOS_AfterFork_Parent();
        PyGILState_Release(acl_mem_shim_fork_gil);
    }
    if (acl_mem_shim_fork_init_locked)
        pthread_mutex_unlock(&acl_mem_shim_init_lock);
    acl_mem_shim_fork_gil_taken = acl_mem_shim_fork_init_locked = 0;
}

static void acl_mem_shim_after_fork_child(void)
{
    /* The only thread: a lock another thread held at the fork is held by nobody now. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&acl_mem_shim_init_lock, &fresh, sizeof fresh);
    if (acl_mem_shim_fork_gil_taken) {
        PyOS_AfterFork_Child();
        /* Not PyGILState_Release: the thread state made for this thread would go, and
           with the other threads' states gone too, Python 3.11 would hand the next one
           its first thread state again, still marked in use (a fatal error). It is kept
           for this thread's later calls; only the GIL is given back. */
        (void)acl_mem_shim_fork_gil;
        PyEval_SaveThread();
    }
    acl_mem_shim_fork_gil_taken = acl_mem_shim_fork_init_locked = 0;
}

/* Every ':'-separated entry is an absolute path: no empty entry (the current directory
   on sys.path), no blank value. Anything else leaves the built-in paths in place. */
static int acl_mem_shim_absolute_paths(const char *value)
{
    if (value == NULL)
        return 0;
    for (;;) {
        const char *colon = strchr(value, ':');
        if (*value != '/')
            return 0;
        if (colon == NULL)
            return 1;
        value = colon + 1;
    }
}

static void acl_mem_shim_start_once(void)
{
    int result;
    if (!Py_IsInitialized()) {
        PyConfig config;
        PyStatus status;
        /* A path from the environment: not in a set-id process (secure_getenv). One
           that is not a list of absolute directories is not used here; the Python part
           then reports it (acl_mem_shim_py_start), and every call returns 500000. */
        const char *paths = secure_getenv("ACL_MEM_SHIM_SYS_PATH");
        PyConfig_InitPythonConfig(&config);
        config.install_signal_handlers = 0;
        config.parse_argv = 0;
        config.use_environment = 0;
        status = PyConfig_SetBytesString(&config, &config.program_name, ACL_MEM_SHIM_PYTHON);
        if (!PyStatus_Exception(status))
            status = PyConfig_SetBytesString(&config, &config.pythonpath_env,
                                             acl_mem_shim_absolute_paths(paths)
                                             ? paths : ACL_MEM_SHIM_PATHS);
        if (!PyStatus_Exception(status))
            status = Py_InitializeFromConfig(&config);
        PyConfig_Clear(&config);
        if (PyStatus_Exception(status)) {
            fprintf(stderr, "acl_mem shim: cannot start the fake: Python (%s) did not start: "
                    "%s; every call returns %d (ACL_ERROR_INTERNAL_ERROR)\n",
                    ACL_MEM_SHIM_PYTHON, status.err_msg ? status.err_msg : "?",
                    ACL_MEM_SHIM_START_FAILED);
            return;
        }
        PyEval_SaveThread();  /* cffi takes the GIL per call (PyGILState_Ensure) */
    }
    result = acl_mem_shim_start_cffi();
    acl_mem_shim_ok = result == ACL_MEM_SHIM_READY;
    if (acl_mem_shim_ok)
        pthread_atfork(acl_mem_shim_before_fork, acl_mem_shim_after_fork_parent,
                       acl_mem_shim_after_fork_child);
    if (result != ACL_MEM_SHIM_READY && result != ACL_MEM_SHIM_EXPLAINED)
        fprintf(stderr, "acl_mem shim: cannot start the fake: the embedded Python failed "
                "(cffi's report above says why); every call returns %d "
                "(ACL_ERROR_INTERNAL_ERROR)\n", ACL_MEM_SHIM_START_FAILED);
}

__attribute__((visibility("default")))
const struct acl_mem_shim_table *acl_mem_shim_engine_start(void)
{
    pthread_once(&acl_mem_shim_once, acl_mem_shim_start_once);
    return acl_mem_shim_ok ? &acl_mem_shim_table_value : NULL;
}
"""

# What the engine answers in C: the per-thread text of the last failed call
# (aclGetRecentErrMsg), the aclInit reference count (aclFinalizeReference) and the exit
# hook (the leak report). acl_mem/shim/_extra.py explains the choices.
_OWN = r"""
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
static __thread char acl_mem_shim_recent[2048];
static __thread int acl_mem_shim_has_recent;

/* Called by the marshalling (Python) and by the front libraries. */
static void acl_mem_shim_note(const char *text)
{
    snprintf(acl_mem_shim_recent, sizeof acl_mem_shim_recent, "%s", text ? text : "");
    acl_mem_shim_has_recent = 1;
}

static const char *acl_mem_shim_recent_error(void)
{
    return acl_mem_shim_has_recent ? acl_mem_shim_recent : NULL;
}

/* The C caller of the call being made on this thread (acl_mem/shim/_extra.py, "Sites"). */
static __thread void *acl_mem_shim_caller_address;

static void acl_mem_shim_set_caller(void *address)
{
    acl_mem_shim_caller_address = address;
}

static uintptr_t acl_mem_shim_caller(void)
{
    return (uintptr_t)acl_mem_shim_caller_address;
}

/* What dladdr says about a return address: its object file, the exported symbol it is
   in (NULL if none) and that symbol's address (else the object's base). Looked up one
   byte before the return address: a call ending a function returns past its end. */
static int acl_mem_shim_where(uintptr_t address, char **file, char **symbol, uintptr_t *start)
{
    Dl_info info;
    if (address == 0 || !dladdr((void *)(address - 1), &info) || info.dli_fname == NULL)
        return 0;
    *file = (char *)info.dli_fname;
    *symbol = (char *)info.dli_sname;
    *start = (uintptr_t)(info.dli_sname != NULL ? info.dli_saddr : info.dli_fbase);
    return 1;
}

static pthread_mutex_t acl_mem_shim_init_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t acl_mem_shim_init_count;

static aclError acl_mem_c_aclInit(const char *configPath)
{
    aclError rc;
    pthread_mutex_lock(&acl_mem_shim_init_lock);
    rc = acl_mem_py_aclInit(configPath);
    if (rc == 0)
        acl_mem_shim_init_count = 1;
    else if (rc == ACL_MEM_SHIM_REPEAT_INITIALIZE)
        acl_mem_shim_init_count++;
    pthread_mutex_unlock(&acl_mem_shim_init_lock);
    return rc;
}

static aclError acl_mem_c_aclFinalize(void)
{
    aclError rc;
    pthread_mutex_lock(&acl_mem_shim_init_lock);
    rc = acl_mem_py_aclFinalize();
    if (rc == 0)
        acl_mem_shim_init_count = 0;
    pthread_mutex_unlock(&acl_mem_shim_init_lock);
    return rc;
}

static aclError acl_mem_c_aclFinalizeReference(uint64_t *refCount)
{
    aclError rc = 0;
    pthread_mutex_lock(&acl_mem_shim_init_lock);
    if (acl_mem_shim_init_count > 1) {
        acl_mem_shim_init_count--;
    } else if (acl_mem_shim_init_count == 0) {
        rc = ACL_MEM_SHIM_REPEAT_FINALIZE;
        acl_mem_shim_note("aclFinalizeReference(): ACL_ERROR_REPEAT_FINALIZE (100037). "
                          "The aclInit reference count is 0: aclFinalize or "
                          "aclFinalizeReference already ran, or aclInit never did");
    } else {
        rc = acl_mem_py_aclFinalize();  /* notes its own failure */
        if (rc == 0)
            acl_mem_shim_init_count = 0;
    }
    if (refCount != NULL)
        *refCount = acl_mem_shim_init_count;
    pthread_mutex_unlock(&acl_mem_shim_init_lock);
    return rc;
}

static int acl_mem_shim_exited;

static void acl_mem_shim_at_exit(void)
{
    if (__atomic_exchange_n(&acl_mem_shim_exited, 1, __ATOMIC_ACQ_REL))
        return;
    /* A Python program finalized its interpreter before the C exit handlers ran (its
       own atexit handlers did the report); calling into Python now would start it anew. */
    if (!Py_IsInitialized())
        return;
#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing())
        return;
#else
    if (_Py_IsFinalizing())
        return;
#endif
    acl_mem_py_at_exit();
}
"""

# The Python part: runs once, inside the interpreter, when the engine starts.
_INIT = '''
import os, sys
from {module} import ffi, lib

_SYS_PATH = "ACL_MEM_SHIM_SYS_PATH"
_SYS_PATH_TAKES = "absolute directories separated by ':'"

def _override():
    # acl_mem/_env.py's rules (it cannot be imported yet: this decides where from):
    # ignored by a set-id process, blank is the default, anything else must be valid.
    if os.getuid() != os.geteuid() or os.getgid() != os.getegid():
        return None, None
    value = os.environ.get(_SYS_PATH, "").strip()
    if not value:
        return None, None
    entries = value.split(os.pathsep)
    if all(e and os.path.isabs(e) and "\\0" not in e for e in entries):
        return entries, None
    return None, value

def _start():
    override, bad = _override()
    paths = override or {paths!r}
    # A process that loaded the library (ctypes, a host embedding Python) keeps its own
    # sys.path: the entries are there for the imports below only. Modules imported later
    # come from packages already imported (their __path__), not from sys.path.
    saved = list(sys.path)
    try:
        for entry in reversed(paths):
            if entry not in sys.path:
                sys.path.insert(0, entry)
        import acl_mem
        from acl_mem.errors import SettingError
        if bad is not None:
            raise SettingError(_SYS_PATH, bad, _SYS_PATH_TAKES)
        home = os.path.dirname(os.path.dirname(os.path.abspath(acl_mem.__file__)))
        if not (os.path.isdir(paths[0]) and os.path.samefile(home, paths[0])):
            raise RuntimeError("acl_mem was imported from %s, not from %s where the shim "
                               "was built; rebuild it: acl-mem shim build" % (home, paths[0]))
        if acl_mem.__version__ != {version!r}:
            raise RuntimeError("acl_mem %s is installed, the shim was built for %s; rebuild "
                               "it: acl-mem shim build" % (acl_mem.__version__, {version!r}))
        from acl_mem import _env
        _env.flag("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED")
        from acl_mem.shim._engine_runtime import install
        install(ffi, lib)
    finally:
        sys.path[:] = saved

try:
    _start()
except BaseException as exc:
    _why = " ".join(("%s: %s" % (type(exc).__name__, exc)).split())

    @ffi.def_extern(name="acl_mem_shim_py_start")
    def _explain():
        sys.stderr.write("acl_mem shim: cannot start the fake: %s; every call returns "
                         "{failed} (ACL_ERROR_INTERNAL_ERROR)\\n" % _why)
        sys.stderr.flush()
        return {explained}
else:
    @ffi.def_extern(name="acl_mem_shim_py_start")
    def _ready():
        return {ready}
'''


def _lowered(decls: list[tuple[str, str, str]]) -> list[tuple[str, str, str, str]]:
    """``(return type, name, lowered arguments, call arguments)`` per function: pointer
    inputs and ``void **`` outputs pass to Python as integers (acl_mem/shim/_marshal.py)."""
    fields = _function_types()
    out = []
    for ret, name, args in decls:
        declared = [] if args == "void" else [a.strip() for a in args.split(",")]
        lowered, calls = [], []
        for role, text in zip(roles(name, fields[name].type), declared, strict=True):
            param = re.findall(r"\w+", text)[-1]
            kind = lowered_arg(role, "")
            lowered.append(f"{kind} {param}" if kind else text)
            calls.append(f"({kind}){param}" if kind else param)
        out.append((ret, name, ", ".join(lowered) or "void", ", ".join(calls)))
    return out


def _function_types() -> dict[str, Any]:
    abi = make_ffi()
    abi.cdef(table_declaration("acl_mem_shim_roles"))
    return dict(abi.typeof("struct acl_mem_shim_roles").fields)


def fast_names() -> list[str]:
    """The allocating calls with a fast entry (acl_mem/shim/_marshal.py, forwarder)."""
    fields = _function_types()
    return [name for name in function_names()
            if name in ALLOCATING and fast_eligible(roles(name, fields[name].type))]


def _fast_entry(ret: str, name: str, args: str, lowered_args: str,
                calls: str) -> tuple[str, str]:
    """``(extern "Python" declaration, C wrapper)`` of an allocating call's fast entry:
    with a non-NULL output, the output comes back as the result (minus the code on
    failure) and is written here; a NULL output takes the general entry."""
    declared = [a.strip() for a in args.split(",")]
    is_output = ["**" in d for d in declared]
    output = re.findall(r"\w+", declared[is_output.index(True)])[-1]
    inputs = [low.strip() for low, out in zip(lowered_args.split(","), is_output, strict=True)
              if not out]
    fast_calls = [c.strip() for c, out in zip(calls.split(","), is_output, strict=True)
                  if not out]
    extern = f'extern "Python" int64_t acl_mem_py_fast_{name}({", ".join(inputs)});'
    wrapper = "\n".join([
        f"static {ret} acl_mem_c_{name}({args})", "{",
        f"    if ({output} != NULL) {{",
        f"        int64_t result = acl_mem_py_fast_{name}({', '.join(fast_calls)});",
        "        if (result >= 0) {",
        f"            *{output} = (void *)(uintptr_t)result;",
        "            return 0;",
        "        }",
        f"        return ({ret})(-result);",
        "    }",
        f"    return acl_mem_py_{name}({calls});",
        "}"])
    return extern, wrapper


def engine_ffi(*, python: str, paths: list[str], version: str) -> cffi.FFI:
    """The engine's FFI, ready for ``emit_c_code``: ``python`` is the interpreter to start
    as, ``paths`` what goes first on sys.path (acl_mem's directory first), ``version``
    acl_mem's version."""
    ffi = cffi.FFI()
    decls = [decl for _, _, section in sections() for decl in section]
    lowered = _lowered(decls)
    # The functions' own types, for the marshalling to read the argument roles from.
    types = "\n".join(f"typedef {ret} (*acl_mem_ft_{name})({args});" for ret, name, args in decls)
    ffi.embedding_api("int acl_mem_shim_py_start(void);")
    ffi.cdef(TYPES + _HI_TYPES + types)
    ffi.cdef("\n".join(f'extern "Python" {ret} acl_mem_py_{name}({args});'
                       for ret, name, args, _ in lowered))
    fast = set(fast_names())
    entries_fast = {name: _fast_entry(ret, name, args, low, calls)
                    for (ret, name, args), (_, _, low, calls) in zip(decls, lowered, strict=True)
                    if name in fast}
    ffi.cdef("\n".join(extern for extern, _ in entries_fast.values()))
    ffi.cdef('extern "Python" void acl_mem_py_at_exit(void);\n'
             "void acl_mem_shim_note(const char *text);\n"
             "uintptr_t acl_mem_shim_caller(void);\n"
             "int acl_mem_shim_where(uintptr_t address, char **file, char **symbol,\n"
             "                       uintptr_t *start);")
    # The table: the bound functions, then the engine's own (_extra.ENGINE), then services.
    entries = [f"acl_mem_c_{name}" for name in [*function_names(), *EXTRA_ENGINE]]
    entries += ["acl_mem_shim_recent_error", "acl_mem_shim_note", "acl_mem_shim_at_exit",
                "acl_mem_shim_set_caller"]
    table = ",\n".join(f"    {entry}" for entry in entries)
    struct = table_declaration("acl_mem_shim_table").removesuffix("};")
    struct += "\n".join([*(f"    {ret} (*{name})({params});"
                           for name, (ret, params) in EXTRA_ENGINE.items()),
                         *service_fields(), "};"])
    own = {"aclInit", "aclFinalize"}  # answered in _OWN around the Python call
    source = "\n".join([
        f"#define ACL_MEM_SHIM_PYTHON {c_string(python)}",
        f"#define ACL_MEM_SHIM_PATHS {c_string(':'.join(paths))}",
        f"#define ACL_MEM_SHIM_START_FAILED {START_FAILED}",
        f"#define ACL_MEM_SHIM_READY {READY}",
        f"#define ACL_MEM_SHIM_EXPLAINED {EXPLAINED}",
        "#define ACL_MEM_SHIM_REPEAT_INITIALIZE 100002",
        "#define ACL_MEM_SHIM_REPEAT_FINALIZE 100037",
        "#include <stdint.h>", "#include <stddef.h>",
        TYPES, _HI_TYPES, types, struct,
        *[f"static {ret} acl_mem_py_{name}({args});" for ret, name, args, _ in lowered],
        *[extern.replace('extern "Python" ', "static ")
          for extern, _ in entries_fast.values()],
        "static void acl_mem_py_at_exit(void);",
        *[f"static {ret} acl_mem_c_{name}({args})\n{{\n    return acl_mem_py_{name}({calls});\n}}"
          for (ret, name, args), (_, _, _, calls) in zip(decls, lowered, strict=True)
          if name not in own and name not in fast],
        *[wrapper for _, wrapper in entries_fast.values()],
        _OWN,
        f"static const struct acl_mem_shim_table acl_mem_shim_table_value = {{\n{table}\n}};",
        _START,
    ])
    ffi.set_source(MODULE, source)
    ffi.embedding_init_code(_INIT.format(module=MODULE, paths=paths, version=version,
                                         failed=START_FAILED, explained=EXPLAINED,
                                         ready=READY))
    return ffi
