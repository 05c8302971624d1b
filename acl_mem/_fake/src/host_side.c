/* What the runtime answers on the host alone, and the functions acl_mem does not model.
 *
 * Data buffers: the real aclCreateDataBuffer never checks its arguments (NULL, 0 is an
 * empty buffer); destroy and update refuse NULL with 100000; the getters answer NULL or 0
 * for NULL; aclGetDataBufferSize cuts the size to 32 bits as the real one does.
 * aclDataTypeSize follows the runtime's table (8 for every value it does not list).
 * aclrtDeviceGetBareTgid is the process id, which the share whitelist compares.
 *
 * Everything else of the surface (models, operators, profiling, tensor queues ...) is an
 * unsupported call: it returns 200006 (ACL_ERROR_FEATURE_UNSUPPORTED), NULL or 0, says so
 * once per function on stderr and leaves its text for aclGetRecentErrMsg; with
 * ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED=1 it aborts instead, so a test finds the first one.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "unsupported.h"

/* ---- unsupported calls ------------------------------------------------------------------ */

/* The names said already: each stub passes its own string, so its address is the key. */
#define SAID_SLOTS 2048
static const char *said[SAID_SLOTS];

static bool first_time(const char *name)
{
    size_t slot = ((uintptr_t)name >> 3) % SAID_SLOTS;
    for (size_t probe = 0; probe < SAID_SLOTS; probe++, slot = (slot + 1) % SAID_SLOTS) {
        const char *seen = __atomic_load_n(&said[slot], __ATOMIC_ACQUIRE);
        if (seen == name)
            return false;
        if (seen == NULL) {
            const char *expected = NULL;
            if (__atomic_compare_exchange_n(&said[slot], &expected, name, false,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                return true;
            if (expected == name)
                return false;
        }
    }
    return false; /* every slot taken: stay quiet rather than flood stderr */
}

void am_unsupported(const char *name, const char *result)
{
    am_ready();
    bool aborting = __atomic_load_n(&am.abort_on_unsupported, __ATOMIC_RELAXED);
    if (aborting || first_time(name))
        fprintf(stderr, "acl_mem: %s is not supported: acl_mem's fake covers memory, "
                "devices, contexts, streams and events only; %s\n", name,
                aborting ? "aborting (ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED=1)" : result);
    if (aborting)
        abort();
    am_fail(AM_FEATURE_UNSUPPORTED, name, "not supported by acl_mem's fake library (memory, "
            "devices, contexts, streams and events only); %s", result);
}

/* For libmsprofiler.so, whose profiling calls are all unsupported. */
ACL_API void acl_mem_engine_unsupported(const char *name, const char *result);

void acl_mem_engine_unsupported(const char *name, const char *result)
{
    am_unsupported(name, result);
}

/* ---- data buffers ----------------------------------------------------------------------- */

/* The real struct holds the same two fields. */
struct aclDataBuffer {
    void *data;
    size_t length;
};

aclDataBuffer *aclCreateDataBuffer(void *data, size_t size)
{
    AM_ARGS(aclCreateDataBuffer);
    aclDataBuffer *buffer = malloc(sizeof *buffer);
    if (buffer == NULL) {
        am_fail(AM_INTERNAL_ERROR, "aclCreateDataBuffer", "out of host memory");
        return NULL;
    }
    buffer->data = data;
    buffer->length = size;
    return buffer;
}

aclError aclDestroyDataBuffer(const aclDataBuffer *dataBuffer)
{
    AM_ARGS(aclDestroyDataBuffer);
    if (dataBuffer == NULL)
        return am_fail(AM_INVALID_PARAM, "aclDestroyDataBuffer", "dataBuffer is NULL: pass a "
                       "buffer from aclCreateDataBuffer");
    free((void *)(uintptr_t)dataBuffer);
    return AM_SUCCESS;
}

aclError aclUpdateDataBuffer(aclDataBuffer *dataBuffer, void *data, size_t size)
{
    AM_ARGS(aclUpdateDataBuffer);
    if (dataBuffer == NULL)
        return am_fail(AM_INVALID_PARAM, "aclUpdateDataBuffer", "dataBuffer is NULL: pass a "
                       "buffer from aclCreateDataBuffer");
    dataBuffer->data = data;
    dataBuffer->length = size;
    return AM_SUCCESS;
}

void *aclGetDataBufferAddr(const aclDataBuffer *dataBuffer)
{
    AM_ARGS(aclGetDataBufferAddr);
    return dataBuffer == NULL ? NULL : dataBuffer->data;
}

uint32_t aclGetDataBufferSize(const aclDataBuffer *dataBuffer)
{
    AM_ARGS(aclGetDataBufferSize);
    return dataBuffer == NULL ? 0U : (uint32_t)dataBuffer->length;
}

size_t aclGetDataBufferSizeV2(const aclDataBuffer *dataBuffer)
{
    AM_ARGS(aclGetDataBufferSizeV2);
    return dataBuffer == NULL ? 0U : dataBuffer->length;
}

/* ---- host facts ------------------------------------------------------------------------- */

size_t aclDataTypeSize(aclDataType dataType)
{
    AM_ARGS(aclDataTypeSize);
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
    }
}

aclError aclrtDeviceGetBareTgid(int32_t *pid)
{
    AM_ARGS(aclrtDeviceGetBareTgid);
    if (pid == NULL)
        return am_fail(AM_INVALID_PARAM, "aclrtDeviceGetBareTgid", "pid is NULL");
    *pid = (int32_t)getpid();
    return AM_SUCCESS;
}
