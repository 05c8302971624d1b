/* aclInit/aclFinalize, devices, contexts, versions, run mode and the thread's last
 * error (docs/runtime-model.md §3.1-§3.3, §3.16, §0.1). Checks run in the runtime's
 * order; each failure leaves its text for aclGetRecentErrMsg. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "engine.h"


/* ---- aclInit / aclFinalize (§3.1) -------------------------------------------------- */

aclError aclInit(const char *configPath)
{
    AM_ARGS(aclInit);
    ENTER("aclInit");
    if (am.init_count > 0) {
        am.init_count++;
        return unlock_with(am_fail(AM_REPEAT_INITIALIZE, "aclInit",
                                   "aclInit was already called; call aclFinalize first"));
    }
    uint64_t digest = 0;
    aclError checked = AM_SUCCESS;
    aclError read = am_read_config(configPath, &digest, &checked);
    if (read != AM_SUCCESS)
        return unlock_with(am_fail(read, "aclInit", "the configuration file '%s' cannot be "
                                   "opened or is not a regular file", configPath));
    if (am.have_config && digest != am.config_digest)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclInit", "the configuration differs "
                                   "from the first successful aclInit's; a process keeps "
                                   "its first configuration"));
    if (checked != AM_SUCCESS)
        return unlock_with(am_fail(checked, "aclInit", checked == AM_INVALID_PARAM ?
                                   "err_msg_mode must be the string \"0\" or \"1\"" :
                                   checked == AM_PARSE_FILE ?
                                   "the configuration file is not JSON, or nests brackets "
                                   "more than 10 deep" :
                                   "the configuration file is not a regular file of at "
                                   "most 10 MiB"));
    am.have_config = true;
    am.config_digest = digest;
    am.init_count = 1;
    am.finalized = false;
    return unlock_with(AM_SUCCESS);
}

/* The aclInit reference count: a successful aclInit makes it 1, each repeated aclInit
 * (100002) adds one; above 1 this takes one away, at 1 it is aclFinalize, at 0 100037.
 * *refCount (if not NULL) gets the count afterwards. */
aclError aclFinalizeReference(uint64_t *refCount)
{
    AM_ARGS(aclFinalizeReference);
    ENTER("aclFinalizeReference");
    aclError code = AM_SUCCESS;
    if (am.init_count > 1) {
        am.init_count--;
    } else if (am.init_count == 0) {
        code = am_fail(AM_REPEAT_FINALIZE, "aclFinalizeReference", "the aclInit reference "
                       "count is 0: aclFinalize or aclFinalizeReference already ran, or "
                       "aclInit never did");
    } else {
        am_unlock();
        code = aclFinalize();
        am_lock();
    }
    if (refCount != NULL)
        *refCount = (uint64_t)am.init_count;
    return unlock_with(code);
}

static void release_device(struct am_device *device)
{
    device->references = 0;
    device->created = 0;
    device->primary = 0;
    for (size_t i = 1; i < am.context_count; i++) {
        struct am_context *context = am_context_at(i);
        if (context->alive && context->device == device->id)
            am_end_context(am_context_handle(i));
    }
    am_release_device_memory(device);
}

aclError aclFinalize(void)
{
    AM_ARGS(aclFinalize);
    ENTER("aclFinalize");
    if (am.finalized)
        return unlock_with(am_fail(AM_REPEAT_FINALIZE, "aclFinalize",
                                   "aclFinalize was already called"));
    for (int i = 0; i < am.device_count; i++)
        release_device(&am.devices[i]);
    am.init_count = 0;
    am.finalized = true;
    return unlock_with(am_hazard_result(AM_SUCCESS, "aclFinalize"));
}

/* ---- devices and default contexts (§3.2) ------------------------------------------- */

static bool valid_device(int32_t id)
{
    return id >= 0 && id < am.device_count;
}

aclError aclrtSetDevice(int32_t deviceId)
{
    AM_ARGS(aclrtSetDevice);
    ENTER("aclrtSetDevice");
    if (!valid_device(deviceId))
        return unlock_with(am_fail(AM_INVALID_DEVICEID, "aclrtSetDevice", AM_HINT_DEVICE_IDS,
                                   am.device_count - 1, am.device_count));
    struct am_device *device = &am.devices[deviceId];
    if (device->primary == 0) {
        if (!am_backing_ready(device))
            return unlock_with(am_fail(AM_MEMORY_ALLOCATION, "aclrtSetDevice", "the host "
                                       "refused the address space behind the fake device's "
                                       "memory (ulimit -v, or vm.overcommit_memory=2)"));
        device->primary = am_context_new(deviceId, true);
        if (device->primary == 0)
            return unlock_with(am_fail(AM_MEMORY_ALLOCATION, "aclrtSetDevice",
                                       "out of host memory"));
    }
    device->references++;
    struct am_thread *self = am_thread();
    self->ref = device->primary;
    self->ctx = 0;
    self->cur = device->primary;
    return unlock_with(AM_SUCCESS);
}

static aclError reset_device(int32_t deviceId, bool force, const char *call)
{
    ENTER(call);
    if (!valid_device(deviceId))
        return unlock_with(am_fail(AM_INVALID_DEVICEID, call, AM_HINT_DEVICE_IDS,
                                   am.device_count - 1, am.device_count));
    struct am_device *device = &am.devices[deviceId];
    if (device->references == 0)
        return unlock_with(am_fail(AM_CONTEXT_RELEASE_ERROR, call, "device %d was not set "
                                   "(aclrtSetDevice) or is reset already", (int)deviceId));
    if (force)
        device->references = 1;
    if (--device->references == 0) {
        uint64_t primary = device->primary;
        device->primary = 0;
        struct am_thread *self = am_thread();
        if (self->ref == primary) {
            self->ref = 0;
            self->cur = self->ctx;
        }
        am_end_context(primary);
        if (device->created == 0)
            am_release_device_memory(device);
    }
    return unlock_with(am_hazard_result(AM_SUCCESS, call));
}

aclError aclrtResetDevice(int32_t deviceId)
{
    AM_ARGS(aclrtResetDevice);
    return reset_device(deviceId, false, "aclrtResetDevice");
}

aclError aclrtResetDeviceForce(int32_t deviceId)
{
    AM_ARGS(aclrtResetDeviceForce);
    return reset_device(deviceId, true, "aclrtResetDeviceForce");
}

aclError aclrtGetDevice(int32_t *deviceId)
{
    AM_ARGS(aclrtGetDevice);
    ENTER("aclrtGetDevice");
    if (deviceId == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtGetDevice", "deviceId is NULL"));
    struct am_device *device = am_current_device();
    if (device == NULL)
        return unlock_with(am_fail(AM_CONTEXT_NULL, "aclrtGetDevice", AM_NO_CONTEXT, "this thread"));
    *deviceId = device->id;
    return unlock_with(AM_SUCCESS);
}

aclError aclrtGetDeviceCount(uint32_t *count)
{
    AM_ARGS(aclrtGetDeviceCount);
    ENTER("aclrtGetDeviceCount");
    if (count == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtGetDeviceCount", "count is NULL"));
    *count = (uint32_t)am.device_count;
    return unlock_with(AM_SUCCESS);
}

aclError aclrtGetRunMode(aclrtRunMode *runMode)
{
    AM_ARGS(aclrtGetRunMode);
    ENTER("aclrtGetRunMode");
    if (runMode == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtGetRunMode", "runMode is NULL"));
    *runMode = am.profile->run_mode == 0 ? ACL_DEVICE : ACL_HOST;
    return unlock_with(AM_SUCCESS);
}

const char *aclrtGetSocName(void)
{
    AM_ARGS(aclrtGetSocName);
    am_lock(); /* configure may change the profile meanwhile */
    const char *name = am.profile->soc_name; /* static: stays valid after the unlock */
    am_unlock();
    return name;
}

/* ---- contexts (§3.3) ---------------------------------------------------------------- */

aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId)
{
    AM_ARGS(aclrtCreateContext);
    ENTER("aclrtCreateContext");
    if (context == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtCreateContext", "context is NULL"));
    if (!valid_device(deviceId))
        return unlock_with(am_fail(AM_INVALID_DEVICEID, "aclrtCreateContext",
                                   AM_HINT_DEVICE_IDS, am.device_count - 1, am.device_count));
    struct am_device *device = &am.devices[deviceId];
    if (!am_backing_ready(device))
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, "aclrtCreateContext", "the host "
                                   "refused the address space behind the fake device's "
                                   "memory (ulimit -v, or vm.overcommit_memory=2)"));
    uint64_t handle = am_context_new(deviceId, false);
    if (handle == 0)
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, "aclrtCreateContext",
                                   "out of host memory"));
    device->created++;
    struct am_thread *self = am_thread();
    self->ctx = handle;
    self->ref = 0;
    self->cur = handle;
    *context = (aclrtContext)(uintptr_t)handle;
    return unlock_with(AM_SUCCESS);
}

aclError aclrtDestroyContext(aclrtContext context)
{
    AM_ARGS(aclrtDestroyContext);
    ENTER("aclrtDestroyContext");
    uint64_t handle = (uintptr_t)context;
    if (handle == 0)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtDestroyContext",
                                   "context is NULL"));
    struct am_context *found = am_context_of(handle);
    if (found == NULL || !found->alive || found->primary)
        return unlock_with(am_fail(AM_CONTEXT_NULL, "aclrtDestroyContext", "context %p is "
                                   "not a live context made by aclrtCreateContext", context));
    struct am_thread *self = am_thread();
    if (self->ctx == handle) {
        self->ctx = 0;
        self->cur = self->ref;
    }
    am_end_context(handle);
    struct am_device *device = &am.devices[found->device];
    if (--device->created == 0 && device->references == 0)
        am_release_device_memory(device);
    return unlock_with(am_hazard_result(AM_SUCCESS, "aclrtDestroyContext"));
}

aclError aclrtSetCurrentContext(aclrtContext context)
{
    AM_ARGS(aclrtSetCurrentContext);
    ENTER("aclrtSetCurrentContext");
    uint64_t handle = (uintptr_t)context;
    if (handle == 0)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtSetCurrentContext",
                                   "context is NULL"));
    struct am_context *found = am_context_of(handle);
    if ((found == NULL || !found->alive) && am.cann->contexts_checked)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, "aclrtSetCurrentContext", "context "
                                   "%p is not alive (destroyed, or its device reset)",
                                   context));
    /* 8.5.0 takes a dead or unknown context; later calls then find none. */
    struct am_thread *self = am_thread();
    self->ctx = handle;
    self->ref = 0;
    self->cur = handle;
    return unlock_with(AM_SUCCESS);
}

aclError aclrtGetCurrentContext(aclrtContext *context)
{
    AM_ARGS(aclrtGetCurrentContext);
    ENTER("aclrtGetCurrentContext");
    if (context == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtGetCurrentContext",
                                   "context is NULL"));
    struct am_thread *self = am_thread();
    uint64_t handle = self->ctx ? self->ctx : self->ref;
    if (handle == 0) {
        if (am.cann->contexts_checked)
            return unlock_with(am_fail(AM_CONTEXT_NULL, "aclrtGetCurrentContext", AM_NO_CONTEXT, "this thread"));
        *context = NULL;
        return unlock_with(AM_SUCCESS);
    }
    *context = (aclrtContext)(uintptr_t)handle;
    return unlock_with(AM_SUCCESS);
}

/* ---- versions (§0.1) ---------------------------------------------------------------- */

aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion, int32_t *patchVersion)
{
    AM_ARGS(aclrtGetVersion);
    ENTER("aclrtGetVersion");
    if (majorVersion == NULL || minorVersion == NULL || patchVersion == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtGetVersion",
                                   "an output pointer is NULL"));
    *majorVersion = am.cann->acl_version[0];
    *minorVersion = am.cann->acl_version[1];
    *patchVersion = am.cann->acl_version[2];
    return unlock_with(AM_SUCCESS);
}

aclError aclsysGetVersionStr(char *pkgName, char *versionStr)
{
    AM_ARGS(aclsysGetVersionStr);
    ENTER("aclsysGetVersionStr");
    if (pkgName == NULL || versionStr == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclsysGetVersionStr",
                                   "pkgName or versionStr is NULL"));
    /* One package is installed: the runtime (also asked for as "cann"). */
    char name[16];
    size_t length = strnlen(pkgName, sizeof name);
    bool known = false;
    if (length < sizeof name) {
        for (size_t i = 0; i <= length; i++)
            name[i] = pkgName[i] == '_' ? '-' : pkgName[i];
        known = strcmp(name, "runtime") == 0 || strcmp(name, "cann") == 0;
    }
    if (!known)
        return unlock_with(am_fail(AM_INTERNAL_ERROR, "aclsysGetVersionStr", "package '%.64s' "
                                   "is not installed (the fake has: runtime)", pkgName));
    /* The header asks for a buffer of ACL_PKG_VERSION_MAX_SIZE (128) bytes. */
    snprintf(versionStr, 128, "%s", am.cann->name);
    return unlock_with(AM_SUCCESS);
}

/* ---- the thread's last error (§3.1.2) ------------------------------------------------ */

aclError aclrtGetLastError(aclrtLastErrLevel level)
{
    AM_ARGS(aclrtGetLastError);
    am_ready();
    if (level != 0)
        return AM_INVALID_PARAM;
    struct am_thread *self = am_thread();
    aclError code = self->last_error;
    self->last_error = 0;
    return code;
}

aclError aclrtPeekAtLastError(aclrtLastErrLevel level)
{
    AM_ARGS(aclrtPeekAtLastError);
    am_ready();
    if (level != 0)
        return AM_INVALID_PARAM;
    return am_thread()->last_error;
}

/* The text of this thread's last failed call; NULL while none failed. */
__attribute__((visibility("default"))) const char *aclGetRecentErrMsg(void)
{
    AM_ARGS(aclGetRecentErrMsg);
    struct am_thread *self = am_thread();
    return self->has_message ? self->message : NULL;
}
