"""The C source of the shim's front libraries, generated from surface.json.

Every function the real headers export (surface.json, stubs/gen_shim_surface.py) is
defined with its exact prototype:

- **supported** (bound by acl_mem/_native/cdef.py: memory, devices, contexts, streams,
  events, VMM, run mode, versions, DVPP memory; and the engine's own,
  acl_mem/shim/_extra.py ENGINE): starts the engine on first use (Python with acl_mem,
  in this process; acl_mem/shim/_engine.py) and calls it through a table of function
  pointers. If the engine cannot start, the call returns ``START_FAILED`` = 500000
  (ACL_ERROR_INTERNAL_ERROR; NULL for aclrtGetSocName) and the reason is printed once on
  stderr: never 0. When the engine started, an exit hook prints the leak report
  (ACL_MEM_LEAK_REPORT).
- **answered in C** (acl_mem/shim/_extra.py FRONT_C: data buffers, aclDataTypeSize,
  aclGetRecentErrMsg, aclrtDeviceGetBareTgid): host-side bookkeeping, no Python.
- **unsupported** (models, operators, DVPP processing, tensor queues, profiling ...):
  returns ``UNSUPPORTED`` = 200006 (ACL_ERROR_FEATURE_UNSUPPORTED) when it returns
  aclError, NULL for a pointer, 0 for other values; prints one line on stderr naming
  the function (once per function and process); aborts instead when
  ``ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED=1``. Python is not started for these.

Every failed call leaves its text for the calling thread's aclGetRecentErrMsg: in the
engine once it runs (the marshalling writes it), before that in this library.

The same file builds each library: ``-DACL_MEM_SHIM_LIB=1`` libascendcl.so, ``2``
libacl_dvpp.so, ``3`` libacl_dvpp_mpi.so, ``4`` libmsprofiler.so (profiling, all
unsupported: its line on stderr says so; aclGetRecentErrMsg, answered by
libascendcl.so, does not see it), ``5`` libacl_rt.so: the functions of libascendcl.so
that the runtime's libacl_rt.so exports (acl_rt_exports.txt). The runtime builds it the
same way, as another front (src/acl/aclrt/acl_rt.cpp forwards each function to
``<name>Impl`` in libacl_rt_impl.so), so here it is this front built again over the
same engine: a program linked with -lacl_rt alone needs its own copy of the symbols
(ld does not link against a dependency's), and one loading both libraries gets one
fake (the engine is loaded once, by path, and started once). What each front keeps
before the engine runs (the text of a failure for aclGetRecentErrMsg, the "said once"
marks) is its own. COMPANIONS are libraries some programs also link
that hold no function of their own here: their functions are libascendcl.so's, which
each of them names as a dependency.

Without ``headers`` the types come from the surface's header-free declarations (same
ABI); with ``headers`` the real headers are included instead, so a compiler checks
every prototype against them (the tests do, as C
and as C++). The code is valid C and C++.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

from ._decls import LIBRARIES, arg_names, function_names
from ._extra import (
    DATA_TYPES,
    ENGINE,
    FRONT_C,
    FRONT_C_SUPPORT,
    HEADER_CONSTANTS,
    service_fields,
    supported_names,
)

__all__ = ["HI_TYPES", "START_FAILED", "UNSUPPORTED", "c_string", "config_header",
           "exported_by", "front_source", "library_functions", "load_surface",
           "minimal_header", "unsupported_names"]

#: What a supported call returns when the engine could not start: ACL_ERROR_INTERNAL_ERROR.
START_FAILED = 500000
#: What an unsupported call returning aclError returns: ACL_ERROR_FEATURE_UNSUPPORTED.
UNSUPPORTED = 200006
#: The hi_* types of ``hi_type.h`` (not in the wheel's headers).
HI_TYPES = """typedef int hi_s32;
typedef unsigned int hi_u32;
typedef unsigned long long hi_u64;
typedef void hi_void;"""


#: Library number -> soname of every library the shim builds from front_source().
FRONT_LIBRARIES = {**LIBRARIES, 4: "libmsprofiler.so", 5: "libacl_rt.so"}
#: Libraries whose functions are chosen by name (acl_rt_exports.txt), not by surface.json's
#: library number: libacl_rt.so holds a subset of libascendcl.so's functions.
_BY_NAME = {5: "acl_rt_exports.txt"}
#: Sonames of the toolkit's libraries for parts of the headers that libascendcl.so
#: exports here (operator compiling, CBLAS, tensor channels and queues).
COMPANIONS = ("libacl_op_compiler.so", "libacl_cblas.so", "libacl_tdt_channel.so",
              "libacl_tdt_queue.so", "libacl_rt_impl.so")


@cache
def exported_by(lib: int) -> frozenset[str]:
    """The names a library listed in _BY_NAME exports (those surface.json has)."""
    text = resources.files(__package__).joinpath(_BY_NAME[lib]).read_text()
    listed = {line.strip() for line in text.splitlines()
              if line.strip() and not line.startswith("#")}
    return frozenset(f["name"] for f in load_surface()["functions"] if f["name"] in listed)


def library_functions(lib: int) -> list[dict[str, Any]]:
    """surface.json's functions that library ``lib`` (FRONT_LIBRARIES) exports."""
    functions = load_surface()["functions"]
    if lib in _BY_NAME:
        names = exported_by(lib)
        return [f for f in functions if f["name"] in names]
    return [f for f in functions if f["lib"] == lib]


@cache
def load_surface() -> dict[str, Any]:
    """The committed surface (functions, header-free types, macros)."""
    text = resources.files(__package__).joinpath("surface.json").read_text()
    surface: dict[str, Any] = json.loads(text)
    return surface


def _start_machinery() -> str:
    # Kept in one place: finds the engine next to this library, makes libpython's
    # symbols global (so extension modules like _cffi_backend resolve them even when
    # this library was dlopen()ed RTLD_LOCAL), and starts it once.
    return r"""
static const struct acl_mem_shim_table *acl_mem_shim_table_ptr;
/* The start, once per process: 0 not begun, 1 under way (in acl_mem_shim_starter, which
   holds acl_mem_shim_start_lock), 2 over (the table is set, or the start failed and said
   why), 3 this process was forked while another thread was starting (pthread_once would
   wait for that thread for ever; see acl_mem_shim_forked_child). */
static int acl_mem_shim_start_state;
static pthread_t acl_mem_shim_starter;
static pthread_mutex_t acl_mem_shim_start_lock = PTHREAD_MUTEX_INITIALIZER;
/* The calling thread's last failure while the engine is not running (aclGetRecentErrMsg);
   once it runs, failures are noted in the engine's per-thread text instead. */
static __thread char acl_mem_shim_front_recent[1024];
static __thread int acl_mem_shim_front_has_recent;

__attribute__((unused, format(printf, 1, 2)))
static void acl_mem_shim_note(const char *format, ...)
{
    char text[sizeof acl_mem_shim_front_recent];
    const struct acl_mem_shim_table *table =
        __atomic_load_n(&acl_mem_shim_table_ptr, __ATOMIC_ACQUIRE);
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    if (table != NULL) {
        table->acl_mem_note_error(text);
        return;
    }
    memcpy(acl_mem_shim_front_recent, text, sizeof text);
    acl_mem_shim_front_has_recent = 1;
}

/* At exit, while the embedded interpreter is alive: the leak report
   (ACL_MEM_LEAK_REPORT). The engine does nothing if Python has already finalized
   (a Python program that loaded this library) and runs once per process. */
static void acl_mem_shim_at_exit(void)
{
    const struct acl_mem_shim_table *table =
        __atomic_load_n(&acl_mem_shim_table_ptr, __ATOMIC_ACQUIRE);
    if (table != NULL)
        table->acl_mem_at_exit();
}

static void acl_mem_shim_failed(const char *what, const char *detail)
{
    fprintf(stderr, "acl_mem shim: cannot start the fake: %s%s; every call of %s returns %d "
            "(ACL_ERROR_INTERNAL_ERROR)\n", what, detail, ACL_MEM_SHIM_SONAME,
            ACL_MEM_SHIM_START_FAILED);
}

/* A setting the library cannot use, in the words of acl_mem/_env.py's SettingError. */
static void acl_mem_shim_bad_setting(const char *name, const char *value, const char *takes)
{
    char detail[512], shown[160];
    size_t k;
    /* Control characters shown as '?': the message stays one line. */
    for (k = 0; value[k] != '\0' && k + 1 < sizeof shown; k++)
        shown[k] = (unsigned char)value[k] < 0x20 || value[k] == 0x7f ? '?' : value[k];
    shown[k] = '\0';
    snprintf(detail, sizeof detail, "%s='%s' is not a value acl_mem understands: it takes %s "
             "(unset or empty means the default)", name, shown, takes);
    acl_mem_shim_failed("SettingError: ", detail);
}

static int acl_mem_shim_blank(const char *value)
{
    return value == NULL || value[strspn(value, " \t\n\r\f\v")] == '\0';
}

#define ACL_MEM_SHIM_FLAG_TAKES "1, true, yes or on to enable; 0, false, no or off to disable"

/* A yes/no setting as acl_mem/_env.py reads one: 1 yes, 0 no (also when unset or blank),
   -1 anything else. Blanks around the word and letter case do not matter. */
static int acl_mem_shim_flag(const char *value)
{
    static const char *const words[] = {"0", "false", "no", "off", "1", "true", "yes", "on"};
    size_t length, k;
    if (acl_mem_shim_blank(value))
        return 0;
    value += strspn(value, " \t\n\r\f\v");
    length = strlen(value);
    while (length > 0 && strchr(" \t\n\r\f\v", value[length - 1]) != NULL)
        length--;
    for (k = 0; k < sizeof words / sizeof words[0]; k++)
        if (strlen(words[k]) == length && strncasecmp(value, words[k], length) == 0)
            return k >= 4;
    return -1;
}

/* Every ACL_MEM_SHIM_* setting the library reads before Python runs: 0 if one is unusable
   (said on stderr, in one line naming it). Paths come from secure_getenv: a set-id program
   ignores them. */
static int acl_mem_shim_settings_ok(const char **libpython)
{
    const char *abort_switch = getenv("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED");
    const char *path = secure_getenv("ACL_MEM_SHIM_LIBPYTHON");
    if (acl_mem_shim_flag(abort_switch) < 0) {
        acl_mem_shim_bad_setting("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", abort_switch,
                                 ACL_MEM_SHIM_FLAG_TAKES);
        return 0;
    }
    *libpython = ACL_MEM_SHIM_LIBPYTHON;
    if (acl_mem_shim_blank(path))
        return 1;
    if (path[0] != '/') {
        acl_mem_shim_bad_setting("ACL_MEM_SHIM_LIBPYTHON", path,
                                 "the absolute path of a shared libpython");
        return 0;
    }
    *libpython = path;
    return 1;
}

static int acl_mem_shim_python_available(void)
{
    const char *libpython;
    const char *(*version)(void);
    char expected[32];
    if (!acl_mem_shim_settings_ok(&libpython))
        return 0;
    /* Already loaded (a Python process, or loaded RTLD_LOCAL): make it global. */
    if (dlopen(libpython, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) == NULL
            && dlsym(RTLD_DEFAULT, "Py_IsInitialized") == NULL
            && dlopen(libpython, RTLD_NOW | RTLD_GLOBAL) == NULL) {
        acl_mem_shim_failed("cannot load ", dlerror());
        return 0;
    }
    /* A Python of another version in this process cannot run the engine. */
    *(void **)(&version) = dlsym(RTLD_DEFAULT, "Py_GetVersion");
    snprintf(expected, sizeof expected, "%s.", ACL_MEM_SHIM_PY_VERSION);
    if (version == NULL || strncmp(version(), expected, strlen(expected)) != 0) {
        acl_mem_shim_failed("this process runs another Python than the shim was built for: ",
                            version ? version() : "(none)");
        return 0;
    }
    return 1;
}

static void acl_mem_shim_start(void)
{
    Dl_info self;
    char path[4096];
    char *slash;
    void *engine;
    const struct acl_mem_shim_table *(*start)(void);
    if (!dladdr((void *)&acl_mem_shim_start, &self) || self.dli_fname == NULL
            || strlen(self.dli_fname) >= sizeof path - sizeof ACL_MEM_SHIM_ENGINE) {
        acl_mem_shim_failed("cannot find this library's directory", "");
        return;
    }
    strcpy(path, self.dli_fname);
    slash = strrchr(path, '/');
    strcpy(slash ? slash + 1 : path, ACL_MEM_SHIM_ENGINE);
    if (!acl_mem_shim_python_available())
        return;
    engine = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (engine == NULL) {
        acl_mem_shim_failed("cannot load the engine: ", dlerror());
        return;
    }
    *(void **)(&start) = dlsym(engine, "acl_mem_shim_engine_start");
    if (start == NULL) {
        acl_mem_shim_failed("the engine lacks acl_mem_shim_engine_start: ", dlerror());
        return;
    }
    /* The engine prints why when it returns NULL. */
    __atomic_store_n(&acl_mem_shim_table_ptr, start(), __ATOMIC_RELEASE);
}

/* In a forked child (the only thread now). A start another thread had under way stops
   here half done (Python half started or half imported): this process cannot finish it,
   and its calls fail (500000) rather than wait for a thread that does not exist. If the
   start got as far as the table, it is usable: the engine's own fork handlers ran. */
static void acl_mem_shim_forked_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    if (pthread_mutex_trylock(&acl_mem_shim_start_lock) == 0) {
        pthread_mutex_unlock(&acl_mem_shim_start_lock);  /* nobody was in there */
        return;
    }
    if (acl_mem_shim_start_state == 1 && pthread_equal(acl_mem_shim_starter, pthread_self()))
        return;  /* forked by the start itself (a subprocess of an import): it goes on */
    /* Held by a thread that does not exist here. Before the start began (state 0) there
       is nothing half done: this process starts on its own. */
    if (acl_mem_shim_start_state == 1)
        acl_mem_shim_start_state =
            __atomic_load_n(&acl_mem_shim_table_ptr, __ATOMIC_ACQUIRE) != NULL ? 2 : 3;
    memcpy(&acl_mem_shim_start_lock, &fresh, sizeof fresh);
}

/* Registered when the library is loaded, before any thread of the program can call it.
   The exit hook too (it does nothing until the engine runs): exit handlers run in reverse
   order, so the program's own, registered later (C++ static objects' destructors, which
   may free device memory), run before the leak report and the end of the trace. atexit()
   from a shared library runs at exit or when the library is unloaded, so the hook never
   outlives its code. */
__attribute__((constructor))
static void acl_mem_shim_loaded(void)
{
    pthread_atfork(NULL, NULL, acl_mem_shim_forked_child);
    atexit(acl_mem_shim_at_exit);
}

__attribute__((unused))
static const struct acl_mem_shim_table *acl_mem_shim_ready(void)
{
    const struct acl_mem_shim_table *table =
        __atomic_load_n(&acl_mem_shim_table_ptr, __ATOMIC_ACQUIRE);
    if (table != NULL)
        return table;
    pthread_mutex_lock(&acl_mem_shim_start_lock);
    if (acl_mem_shim_start_state == 0) {
        acl_mem_shim_start_state = 1;
        acl_mem_shim_starter = pthread_self();
        acl_mem_shim_start();
        acl_mem_shim_start_state = 2;
    } else if (acl_mem_shim_start_state == 3) {
        acl_mem_shim_start_state = 4;
        acl_mem_shim_failed("this process was forked while another thread was starting it",
                            "");
    }
    pthread_mutex_unlock(&acl_mem_shim_start_lock);
    return __atomic_load_n(&acl_mem_shim_table_ptr, __ATOMIC_ACQUIRE);
}

__attribute__((unused))
static void acl_mem_shim_unsupported(const char *name, int *said, const char *result)
{
    static int said_setting;
    const char *abort_switch = getenv("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED");
    int setting = acl_mem_shim_flag(abort_switch);
    int aborting = setting == 1;
    if (setting < 0 && !__atomic_exchange_n(&said_setting, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "acl_mem shim: ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED is not a value "
                "acl_mem understands (it takes %s): not aborting; the first supported call "
                "fails with %d\n", ACL_MEM_SHIM_FLAG_TAKES, ACL_MEM_SHIM_START_FAILED);
    if (aborting || !__atomic_exchange_n(said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "acl_mem shim: %s is not supported: acl_mem covers memory, devices, "
                "contexts, streams and events only; %s\n", name,
                aborting ? "aborting (ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED=1)" : result);
    if (aborting)
        abort();
    acl_mem_shim_note("%s: not supported by acl_mem's drop-in library (memory, devices, "
                      "contexts, streams and events only); %s", name, result);
}
"""


def _params_of(function: dict[str, Any]) -> str:
    params = str(function["params"])
    return params if params else ""


def _supported(function: dict[str, Any]) -> list[str]:
    name, ret = function["name"], function["ret"]
    params = _params_of(function)
    failed = "NULL" if ret.endswith("*") else "ACL_MEM_SHIM_START_FAILED"
    return [
        f"{ret} {name}({params})",
        "{",
        "    const struct acl_mem_shim_table *table = acl_mem_shim_ready();",
        "    if (table == NULL) {",
        f'        acl_mem_shim_note("{name}: ACL_ERROR_INTERNAL_ERROR ({START_FAILED}): the '
        'fake did not start (the reason is on standard error)");',
        f"        return {failed};",
        "    }",
        "    table->acl_mem_set_caller(__builtin_return_address(0));",
        f"    return table->{name}({arg_names(params or 'void')});",
        "}",
    ]


def _front_c(function: dict[str, Any]) -> list[str]:
    return [f"{function['ret']} {function['name']}({_params_of(function) or 'void'})",
            "{" + FRONT_C[function["name"]], "}"]


def _unsupported(function: dict[str, Any], number: int) -> list[str]:
    name, ret = function["name"], function["ret"]
    if ret == "void":
        result, value = "returning nothing", None
    elif ret.endswith("*"):
        result, value = "returning NULL", "NULL"
    elif ret == "aclError":
        result, value = f"returning {UNSUPPORTED} (ACL_ERROR_FEATURE_UNSUPPORTED)", \
            "ACL_MEM_SHIM_UNSUPPORTED"
    else:
        result, value = "returning 0", "acl_mem_shim_zero"
    lines = [f"{ret} {name}({_params_of(function)})", "{",
             f'    acl_mem_shim_unsupported("{name}", &acl_mem_shim_said[{number}], "{result}");']
    if value == "acl_mem_shim_zero":
        lines += [f"    {ret} acl_mem_shim_zero;",
                  "    memset(&acl_mem_shim_zero, 0, sizeof acl_mem_shim_zero);"]
    if value is not None:
        lines.append(f"    return {value};")
    return [*lines, "}"]


def front_source(headers: list[str] | None = None) -> str:
    """The C source; ``headers`` (e.g. ["acl/acl.h"]) includes the real headers instead of
    the surface's types, and keeps only the functions they declare (plus DVPP memory)."""
    surface = load_surface()
    functions = [f for f in surface["functions"]
                 if headers is None or f["lib"] in (2, 3) or f["header"] in headers]
    by_name = {f["name"]: f for f in surface["functions"]}
    bound = [by_name[name] for name in function_names()]
    out = ["/* Generated by acl_mem/shim/_csource.py from acl_mem/shim/surface.json. */",
           "#ifndef _GNU_SOURCE", "#define _GNU_SOURCE", "#endif",
           *[f"#include <{h}>" for h in ("dlfcn.h", "pthread.h", "stdarg.h", "stdbool.h",
                                         "stddef.h", "stdint.h", "stdio.h", "stdlib.h",
                                         "string.h", "strings.h", "unistd.h")],
           '#include "acl_mem_shim_config.h"',
           f"#define ACL_MEM_SHIM_START_FAILED {START_FAILED}",
           f"#define ACL_MEM_SHIM_UNSUPPORTED {UNSUPPORTED}",
           f"#if ACL_MEM_SHIM_LIB < 1 || ACL_MEM_SHIM_LIB > {len(FRONT_LIBRARIES)}",
           f"#error define ACL_MEM_SHIM_LIB as one of {sorted(FRONT_LIBRARIES)}", "#endif"]
    out += [f'#if ACL_MEM_SHIM_LIB == {lib}\n#define ACL_MEM_SHIM_SONAME "{soname}"\n#endif'
            for lib, soname in FRONT_LIBRARIES.items()]
    if headers is None:
        out.append("typedef int aclError;")
        out += [f"#define {name} {value}" for name, value in surface["macros"].items()]
        out += list(surface["types"].values())
    else:
        out += [f'#include "{header}"' for header in headers]
    out += [HI_TYPES, "#ifdef __cplusplus", 'extern "C" {', "#endif"]
    out.append("struct acl_mem_shim_table {")
    out += [f"    {f['ret']} (*{f['name']})({_params_of(f) or 'void'});"
            for f in [*bound, *(by_name[name] for name in ENGINE)]]
    out += service_fields()
    out.append("};")
    out.append(_start_machinery())
    out.append(FRONT_C_SUPPORT)
    out.append(f"__attribute__((unused)) static int acl_mem_shim_said[{len(functions)}];")
    supported = set(supported_names())
    for lib in FRONT_LIBRARIES:
        out.append(f"\n#if ACL_MEM_SHIM_LIB == {lib}")
        names = exported_by(lib) if lib in _BY_NAME else None
        for number, function in enumerate(functions):
            if (function["name"] in names) if names is not None else function["lib"] == lib:
                out += (_front_c(function) if function["name"] in FRONT_C
                        else _supported(function) if function["name"] in supported
                        else _unsupported(function, number))
        out.append("#endif")
    out += ["#ifdef __cplusplus", "}", "#endif"]
    return "\n".join(out) + "\n"


def config_header(*, libpython: str, py_version: str, engine: str) -> str:
    """``acl_mem_shim_config.h``: what the front libraries learn at build time."""
    return "\n".join([
        "/* Written by acl_mem/shim/_build.py. */",
        f"#define ACL_MEM_SHIM_LIBPYTHON {c_string(libpython)}",
        f"#define ACL_MEM_SHIM_PY_VERSION {c_string(py_version)}",
        f"#define ACL_MEM_SHIM_ENGINE {c_string(engine)}",
    ]) + "\n"


def c_string(text: str) -> str:
    """A C string literal of ``text`` (UTF-8, anything unusual octal-escaped)."""
    return '"' + "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\?' else f"\\{b:03o}"
                         for b in text.encode()) + '"'


def unsupported_names() -> list[str]:
    """Every exported function that fails loudly."""
    supported = set(supported_names())
    return [f["name"] for f in load_surface()["functions"] if f["name"] not in supported]



def minimal_header() -> str:
    """A header-free stand-in for ``acl/acl.h``: every exported prototype, the enums of
    acl_mem/_native/cdef.py (memory, copies, attributes) and the surface's types.

    For building C programs where the real headers are absent (the tests do when
    ACL_MEM_HEADERS_DIR is unset); the enum values are checked against the real headers
    by tests/test_native_headers.py.
    """
    from .._native.cdef import TYPES

    surface = load_surface()
    defined = set(re.findall(r"}\s*(\w+)\s*;", TYPES))
    defined |= set(re.findall(r"typedef [^;{}]*?(\w+)\s*;", TYPES))
    out = ["/* Generated by acl_mem/shim/_csource.py: a minimal acl/acl.h for the shim. */",
           "#ifndef ACL_MEM_SHIM_MINIMAL_ACL_H", "#define ACL_MEM_SHIM_MINIMAL_ACL_H",
           "#include <stddef.h>", "#include <stdint.h>", "#include <stdbool.h>",
           "#ifdef __cplusplus", 'extern "C" {', "#endif",
           "#define ACL_SUCCESS 0",
           f"#define ACL_ERROR_FEATURE_UNSUPPORTED {UNSUPPORTED}",
           f"#define ACL_ERROR_INTERNAL_ERROR {START_FAILED}",
           *[f"#define {name} {value}" for name, value in HEADER_CONSTANTS.items()],
           TYPES.strip()]
    out += [f"#define {name} {value}" for name, value in surface["macros"].items()]
    out += [text for name, text in surface["types"].items() if name not in defined]
    # aclDataType is an int here (surface.json); its enumerators as constants of that type.
    out += ["enum {", *[f"    {name} = {value}," for name, value in DATA_TYPES.items()], "};"]
    # The DVPP memory functions are declared in their own headers (acl_mem/shim/_prefix.py).
    out += [f"{f['ret']} {f['name']}({_params_of(f)});" for f in surface["functions"]
            if f["lib"] not in (2, 3)]
    out += ["#ifdef __cplusplus", "}", "#endif", "#endif"]
    return "\n".join(out) + "\n"
