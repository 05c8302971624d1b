"""What the shim answers beyond the functions the native backend binds (acl_mem/_native/cdef.py).

Three kinds:

- :data:`FRONT_C`: host-side bookkeeping the real libascendcl.so does without the device
  (data buffers, aclDataTypeSize, aclrtDeviceGetBareTgid, aclGetRecentErrMsg). Written
  here in C and compiled into the front library: no Python starts for them.
- :data:`ENGINE`: functions the fake has no entry point for, answered by the engine on
  top of existing ones (aclFinalizeReference: the aclInit reference count, kept by the
  engine around aclInit and aclFinalize). Reached through the table like the bound
  functions.
- :data:`SERVICES`: table entries that are no ACL function: the engine's per-thread
  "recent error" text (written by the marshalling when a call fails), a way for the
  front to add to it, the exit hook that prints the leak report, and the C caller of
  the call about to be made (the front passes its return address, for the checker's
  allocation stacks: see "Sites" below).

The choices, with what the public CANN runtime source does (hicann/runtime,
``data_buffer.cpp``, ``acl.cpp``, ``runtime.cpp``):

- aclCreateDataBuffer never checks its arguments (``new aclDataBuffer(data, size)``):
  ``(NULL, 0)`` is an empty buffer and allowed; it returns NULL only when out of host
  memory. aclDestroyDataBuffer and aclUpdateDataBuffer return 100000 for NULL; the
  getters return NULL / 0 for NULL. aclGetDataBufferSize truncates to 32 bits as the
  real one does (it is deprecated for that reason); aclGetDataBufferSizeV2 does not.
- aclDataTypeSize: the runtime's table: 0 for ACL_STRING and ACL_DT_UNDEFINED, 1 for
  the 1-bit and 4-bit types, and 8 for every value it does not list (also the 6- and
  4-bit float types of newer headers, which its switch does not name).
- aclGetRecentErrMsg: NULL while the calling thread has had no failed call; afterwards
  the text of its last failed call (the call with its arguments, the error name and
  code, and acl_mem's hint), kept until the thread's next failed call: reading it does
  not clear it (the real one also returns the previous text again), so
  ``aclGetRecentErrMsg() ? aclGetRecentErrMsg() : "..."`` is safe. The pointer stays
  valid for the thread's lifetime (a thread-local buffer), the text being replaced by
  the next failure.
- aclrtDeviceGetBareTgid: the process id (``getpid()``), which is what the fake's
  sharing whitelist (aclrtMemSetPidToShareableHandle) compares; NULL -> 100000.
- fork: once Python runs, the engine registers pthread_atfork handlers. Before a fork
  from a thread that does not hold the GIL, the forking thread takes aclInit's lock,
  then the GIL (the order aclInit takes them), then PyOS_BeforeFork: no other thread is
  inside Python, the fake or aclInit at the fork; threads blocked on the GIL stay
  blocked in the parent and do not exist in the child. The parent then gets
  PyOS_AfterFork_Parent and both back; the child PyOS_AfterFork_Child (Python's own
  at-fork handlers: the fake's child rules of docs/fidelity.md row 60, fresh locks, no
  current context, the parent's pointers unknown, 107000) and a fresh aclInit lock. A
  thread that holds the GIL when it forks is Python's os.fork (which does all of this
  itself) or an extension that forks under the GIL: the handlers leave it alone. A
  fork while another thread is still starting the engine (its first call: Python and
  acl_mem loading) leaves that start half done in the child, where the thread doing it
  does not exist: the child's calls return 500000 and say why on stderr, instead of
  waiting for ever (the front library's own fork handler, registered when it loads).
  Known limit: a C thread and a Python thread forking at the same moment can deadlock
  (the C fork waits for the GIL inside glibc's fork-handler lock, which os.fork, holding
  the GIL, then waits for).
- Sites: every call through the table first hands the engine its C caller
  (``__builtin_return_address(0)`` of the exported function, a thread-local). When the
  fake's memory checker is on (ACL_MEM_CHECK=1: it records where each block was
  allocated, and the leak report and canary findings print it), the allocating calls
  (aclrtMalloc*, aclrtMallocHost, acldvppMalloc, hi_mpi_dvpp_malloc) run inside a
  Python frame made for that caller, whose file is the caller's object (``dladdr``)
  and whose function is ``symbol+0xoffset`` (line 0: no line is known); the
  marshalling's own frames are acl_mem's and left out like the rest of acl_mem. A
  caller's name is found only if the object exports it: functions of an executable
  need ``-rdynamic`` (or ``-Wl,--export-dynamic``), and ``static`` functions never
  have one; without a name the frame says the offset in the object. Calls that come
  from libffi (ctypes, cffi) get no C frame: the Python frames name the caller.
  Without the checker, when ACL_MEM_LEAK_REPORT is set at the start, each successful
  allocating call notes its caller's return address by the block's address (only the
  address: it is described when a leak is printed), so the leak report names the C
  caller of every leaked block all the same. The notes forget freed blocks in bulk,
  once more than 65536 are kept (the bound doubles while most are live).
- aclFinalizeReference: docs/runtime-model.md §3.1: count above 1 -> decrement, 0;
  count 1 -> aclFinalize; count 0 -> 100037. ``*refCount`` (if not NULL) receives the
  count afterwards. The count is the engine's: a successful aclInit sets it to 1, each
  100002 (repeat) adds one, a successful aclFinalize sets it to 0. In a Python program
  that loads the library with ctypes, aclInit calls made from Python are not counted.
"""

from __future__ import annotations

from ._decls import function_names

__all__ = ["DATA_TYPES", "ENGINE", "FRONT_C", "FRONT_C_SUPPORT", "HEADER_CONSTANTS",
           "SERVICES", "service_fields", "supported_names"]

#: Engine functions: name -> (return type, parameters), header-free (the engine's types).
ENGINE: dict[str, tuple[str, str]] = {
    "aclFinalizeReference": ("aclError", "uint64_t *refCount"),
}

#: Table entries that are services of the engine: (return type, field, parameters).
SERVICES: list[tuple[str, str, str]] = [
    ("const char *", "acl_mem_recent_error", "void"),
    ("void", "acl_mem_note_error", "const char *text"),
    ("void", "acl_mem_at_exit", "void"),
    ("void", "acl_mem_set_caller", "void *address"),
]

#: What the FRONT_C bodies use: the buffer's layout, defined in the front library only.
FRONT_C_SUPPORT = r"""
#if ACL_MEM_SHIM_LIB == 1 || ACL_MEM_SHIM_LIB == 5
/* The real struct holds the same two fields (data_buffer_internal.h). */
struct aclDataBuffer {
    void *data;
    size_t length;
};
#endif
"""

#: Front-library C functions: name -> body (the prototype comes from surface.json).
FRONT_C: dict[str, str] = {
    "aclCreateDataBuffer": """
    aclDataBuffer *buffer = (aclDataBuffer *)malloc(sizeof(aclDataBuffer));
    if (buffer == NULL) {
        acl_mem_shim_note("aclCreateDataBuffer(data=%p, size=%zu): out of host memory",
                          data, size);
        return NULL;
    }
    buffer->data = data;
    buffer->length = size;
    return buffer;""",
    "aclDestroyDataBuffer": """
    if (dataBuffer == NULL) {
        acl_mem_shim_note("aclDestroyDataBuffer(dataBuffer=NULL): ACL_ERROR_INVALID_PARAM "
                          "(100000). Pass a buffer from aclCreateDataBuffer");
        return 100000;
    }
    free((void *)dataBuffer);
    return 0;""",
    "aclUpdateDataBuffer": """
    if (dataBuffer == NULL) {
        acl_mem_shim_note("aclUpdateDataBuffer(dataBuffer=NULL, data=%p, size=%zu): "
                          "ACL_ERROR_INVALID_PARAM (100000). Pass a buffer from "
                          "aclCreateDataBuffer", data, size);
        return 100000;
    }
    dataBuffer->data = data;
    dataBuffer->length = size;
    return 0;""",
    "aclGetDataBufferAddr": """
    return dataBuffer == NULL ? NULL : dataBuffer->data;""",
    "aclGetDataBufferSize": """
    return dataBuffer == NULL ? 0U : (uint32_t)dataBuffer->length;""",
    "aclGetDataBufferSizeV2": """
    return dataBuffer == NULL ? 0U : dataBuffer->length;""",
    "aclDataTypeSize": """
    switch ((int)dataType) {
    case 13: /* ACL_STRING */
    case -1: /* ACL_DT_UNDEFINED */
        return 0U;
    case 29: /* ACL_INT4 */
    case 30: /* ACL_UINT1 */
    case 2: case 4: case 12: /* ACL_INT8, ACL_UINT8, ACL_BOOL */
    case 34: case 35: case 36: case 37: /* ACL_HIFLOAT8, ACL_FLOAT8_* */
        return 1U;
    case 1: case 6: case 7: case 27: /* ACL_FLOAT16, ACL_INT16, ACL_UINT16, ACL_BF16 */
        return 2U;
    case 0: case 3: case 8: case 33: /* ACL_FLOAT, ACL_INT32, ACL_UINT32, ACL_COMPLEX32 */
        return 4U;
    case 17: /* ACL_COMPLEX128 */
        return 16U;
    default: /* ACL_INT64, ACL_UINT64, ACL_DOUBLE, ACL_COMPLEX64 and any other value */
        return 8U;
    }""",
    "aclrtDeviceGetBareTgid": """
    if (pid == NULL) {
        acl_mem_shim_note("aclrtDeviceGetBareTgid(pid=NULL): ACL_ERROR_INVALID_PARAM "
                          "(100000)");
        return 100000;
    }
    *pid = (int32_t)getpid();
    return 0;""",
    "aclGetRecentErrMsg": """
    const struct acl_mem_shim_table *table =
        __atomic_load_n(&acl_mem_shim_table_ptr, __ATOMIC_ACQUIRE);
    const char *engine = table != NULL ? table->acl_mem_recent_error() : NULL;
    if (engine != NULL)
        return engine;
    return acl_mem_shim_front_has_recent ? acl_mem_shim_front_recent : NULL;""",
}


#: Constants of the real headers that programs using these functions name, for the
#: minimal acl/acl.h (acl_mem/shim/_csource.py); tests/test_shim_surface.py checks each
#: value against the real headers.
HEADER_CONSTANTS: dict[str, int] = {
    "ACL_ERROR_INVALID_PARAM": 100000,
    "ACL_ERROR_REPEAT_INITIALIZE": 100002,
    "ACL_ERROR_REPEAT_FINALIZE": 100037,
    "ACL_ERROR_RT_PARAM_INVALID": 107000,
    "ACL_ERROR_RT_INVALID_DEVICEID": 107001,
    "ACL_ERROR_RT_CONTEXT_NULL": 107002,
    "ACL_ERROR_RT_MEMORY_ALLOCATION": 207001,
    "ACL_ERROR_RT_CONTEXT_RELEASE_ERROR": 507007,
}
#: The aclDataType enumerators (acl/acl_base_rt.h).
DATA_TYPES: dict[str, int] = {
    "ACL_DT_UNDEFINED": -1, "ACL_FLOAT": 0, "ACL_FLOAT16": 1, "ACL_INT8": 2, "ACL_INT32": 3,
    "ACL_UINT8": 4, "ACL_INT16": 6, "ACL_UINT16": 7, "ACL_UINT32": 8, "ACL_INT64": 9,
    "ACL_UINT64": 10, "ACL_DOUBLE": 11, "ACL_BOOL": 12, "ACL_STRING": 13, "ACL_COMPLEX64": 16,
    "ACL_COMPLEX128": 17, "ACL_BF16": 27, "ACL_INT4": 29, "ACL_UINT1": 30,
    "ACL_COMPLEX32": 33, "ACL_HIFLOAT8": 34, "ACL_FLOAT8_E5M2": 35, "ACL_FLOAT8_E4M3FN": 36,
    "ACL_FLOAT8_E8M0": 37, "ACL_FLOAT6_E3M2": 38, "ACL_FLOAT6_E2M3": 39,
    "ACL_FLOAT4_E2M1": 40, "ACL_FLOAT4_E1M2": 41,
}


def supported_names() -> list[str]:
    """Every exported function that does its job (the rest fail with 200006)."""
    return [*function_names(), *ENGINE, *FRONT_C]


def service_fields() -> list[str]:
    """The service entries of the table, as struct fields."""
    return [f"    {ret} (*{name})({params});" for ret, name, params in SERVICES]
