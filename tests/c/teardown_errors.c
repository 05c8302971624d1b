/* Teardown and error reporting as service-style Ascend programs do it: several
 * aclrtSetDevice references dropped at once with aclrtResetDeviceForce, a nested
 * aclInit released with aclFinalizeReference, the error text of the last failed call
 * (aclGetRecentErrMsg, printed by CHECK macros like the samples' ACL_CHECK), and the
 * process id that memory-sharing whitelists use (aclrtDeviceGetBareTgid).
 * tests/test_shim_programs.py runs it and checks the "ok" lines and the values printed.
 *
 * Output: "ok <step>", "<name> <value>" lines, then "done"; a failed check prints
 * "FAIL <step>: ..." and exits with status 1. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "acl/acl.h"
#include "steps.h"

#define INVALID_PARAM 100000  /* ACL_ERROR_INVALID_PARAM */

int main(void)
{
    void *devPtr = NULL;
    void *huge = NULL;
    int32_t pid = 0;
    int32_t device = -1;
    uint64_t refCount = 99;
    const char *msg = NULL;
    const char *again = NULL;

    /* No failed call yet on this thread. */
    EXPECT("no message yet", aclGetRecentErrMsg() == NULL);

    /* The process id, without any device. */
    ACL_CHECK("bare tgid", aclrtDeviceGetBareTgid(&pid), ACL_SUCCESS);
    EXPECT("bare tgid is getpid", pid == (int32_t)getpid());
    ACL_CHECK("bare tgid null", aclrtDeviceGetBareTgid(NULL), ACL_ERROR_INVALID_PARAM);
    /* Noted before Python started (no device call yet) ... */
    msg = aclGetRecentErrMsg();
    EXPECT("tgid message", msg != NULL && strstr(msg, "aclrtDeviceGetBareTgid(pid=NULL)"));

    /* aclInit three times: a count of 3; two references released, the third tears down. */
    ACL_CHECK("init", aclInit(NULL), ACL_SUCCESS);
    /* ... and still the thread's last failure once it runs; a repeated aclInit fails. */
    msg = aclGetRecentErrMsg();
    EXPECT("tgid message kept", msg != NULL && strstr(msg, "aclrtDeviceGetBareTgid"));
    ACL_CHECK("init again", aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE);
    ACL_CHECK("init third", aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE);
    msg = aclGetRecentErrMsg();
    EXPECT("repeat init message", msg != NULL && strstr(msg, "ACL_ERROR_REPEAT_INITIALIZE"));
    ACL_CHECK("finalize reference 1", aclFinalizeReference(&refCount), ACL_SUCCESS);
    EXPECT("count 2", refCount == 2);
    ACL_CHECK("finalize reference 2", aclFinalizeReference(NULL), ACL_SUCCESS);

    /* Three references to device 0, memory in it, then one forced reset drops them all. */
    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("set device 2", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("set device 3", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("malloc", aclrtMalloc(&devPtr, 4096, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    ACL_CHECK("reset force", aclrtResetDeviceForce(0), ACL_SUCCESS);
    /* Nothing left: no current device, the memory went with the device. */
    ACL_CHECK("no device after force", aclrtGetDevice(&device), ACL_ERROR_RT_CONTEXT_NULL);
    ACL_CHECK("reset after force", aclrtResetDevice(0), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    ACL_CHECK("force again", aclrtResetDeviceForce(0), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    msg = aclGetRecentErrMsg();
    EXPECT("force message", msg != NULL && strstr(msg, "aclrtResetDeviceForce(deviceId=0)"));
    ACL_CHECK("force bad id", aclrtResetDeviceForce(4096), ACL_ERROR_RT_INVALID_DEVICEID);

    /* The text of the last failed call, kept until the next failure on this thread. */
    ACL_CHECK("set device again", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("huge malloc", aclrtMalloc(&huge, (size_t)1 << 40, ACL_MEM_MALLOC_HUGE_FIRST),
              ACL_ERROR_RT_MEMORY_ALLOCATION);
    EXPECT("nothing written on failure", huge == NULL);
    msg = aclGetRecentErrMsg();
    EXPECT("oom message", msg != NULL && strstr(msg, "aclrtMalloc(") && strstr(msg, "207001"));
    printf("oom %s\n", msg);
    ACL_CHECK("malloc after", aclrtMalloc(&devPtr, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    again = aclGetRecentErrMsg();
    EXPECT("kept after success", again != NULL && strcmp(again, "") != 0
           && strstr(again, "aclrtMalloc(") != NULL);
    ACL_CHECK("free", aclrtFree(devPtr), ACL_SUCCESS);
    /* A NULL output and size 0 are the ACL layer's parameter errors (100000). */
    ACL_CHECK("malloc NULL output", aclrtMalloc(NULL, 64, ACL_MEM_MALLOC_HUGE_FIRST),
              INVALID_PARAM);
    ACL_CHECK("host NULL output", aclrtMallocHost(NULL, 64), INVALID_PARAM);
    ACL_CHECK("malloc size 0", aclrtMalloc(&huge, 0, ACL_MEM_MALLOC_HUGE_FIRST), INVALID_PARAM);
    EXPECT("nothing written for size 0", huge == NULL);
    ACL_CHECK("double free", aclrtFree(devPtr), ACL_ERROR_RT_PARAM_INVALID);
    msg = aclGetRecentErrMsg();
    EXPECT("free message", msg != NULL && strstr(msg, "aclrtFree(devPtr=0x"));
    printf("free %s\n", msg);
    /* An unsupported function is a failed call too. */
    EXPECT("unsupported", aclmdlCreateDesc() == NULL);
    msg = aclGetRecentErrMsg();
    EXPECT("unsupported message", msg != NULL && strstr(msg, "aclmdlCreateDesc"));

    ACL_CHECK("reset force last", aclrtResetDeviceForce(0), ACL_SUCCESS);
    /* The last reference: aclFinalizeReference tears down, then there is none. */
    ACL_CHECK("finalize reference 3", aclFinalizeReference(&refCount), ACL_SUCCESS);
    EXPECT("count 0", refCount == 0);
    ACL_CHECK("finalize reference 4", aclFinalizeReference(&refCount),
              ACL_ERROR_REPEAT_FINALIZE);
    ACL_CHECK("finalize after", aclFinalize(), ACL_ERROR_REPEAT_FINALIZE);
    printf("done\n");
    return 0;
}
