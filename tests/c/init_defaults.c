/* Start-up as the public Ascend samples write it: the run mode asked before aclInit
 * (to pick host or device copies), aclInit with the sample's "acl.json" (argv[1]; the
 * acllite helpers pass ""), the default context that aclrtSetDevice makes current, and
 * the default stream (NULL) for synchronisation and asynchronous copies.
 * tests/test_shim_programs.py runs it with a JSON file and with "", and checks the lines
 * printed.
 *
 * Output: "ok <step>", "<name> <value>" lines, then "done"; a failed check prints
 * "FAIL <step>: ..." and exits with status 1. */
#include <stdio.h>
#include <string.h>
#include "acl/acl.h"
#include "steps.h"

int main(int argc, char **argv)
{
    const char *aclConfigPath = argc > 1 ? argv[1] : "acl.json";
    aclrtRunMode runMode = ACL_HOST;
    aclrtContext context = NULL;
    char hostIn[256];
    char hostOut[256];
    void *devPtr = NULL;
    int32_t deviceId = -1;
    size_t i;

    /* Before aclInit: the run mode is known already (no device needed). */
    ACL_CHECK("run mode", aclrtGetRunMode(&runMode), ACL_SUCCESS);
    printf("runMode %d\n", (int)runMode);
    ACL_CHECK("init with config", aclInit(aclConfigPath), ACL_SUCCESS);
    ACL_CHECK("init again", aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE);

    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("current context", aclrtGetCurrentContext(&context), ACL_SUCCESS);
    if (context == NULL) {
        printf("FAIL default context: aclrtGetCurrentContext gave NULL after aclrtSetDevice\n");
        return 1;
    }
    printf("ok default context\n");
    ACL_CHECK("get device", aclrtGetDevice(&deviceId), ACL_SUCCESS);
    printf("device %d\n", (int)deviceId);

    /* The default stream: NULL. */
    for (i = 0; i < sizeof hostIn; ++i)
        hostIn[i] = (char)(i ^ 0x5A);
    memset(hostOut, 0, sizeof hostOut);
    ACL_CHECK("malloc", aclrtMalloc(&devPtr, sizeof hostIn, ACL_MEM_MALLOC_HUGE_FIRST),
              ACL_SUCCESS);
    ACL_CHECK("async h2d on default stream",
              aclrtMemcpyAsync(devPtr, sizeof hostIn, hostIn, sizeof hostIn,
                               ACL_MEMCPY_HOST_TO_DEVICE, NULL),
              ACL_SUCCESS);
    ACL_CHECK("sync default stream", aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    ACL_CHECK("async d2h on default stream",
              aclrtMemcpyAsync(hostOut, sizeof hostOut, devPtr, sizeof hostIn,
                               ACL_MEMCPY_DEVICE_TO_HOST, NULL),
              ACL_SUCCESS);
    ACL_CHECK("sync default stream again", aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    if (memcmp(hostIn, hostOut, sizeof hostIn) != 0) {
        printf("FAIL default stream round trip: the bytes read back differ\n");
        return 1;
    }
    printf("ok default stream round trip\n");
    ACL_CHECK("memset async on default stream",
              aclrtMemsetAsync(devPtr, sizeof hostIn, 0, 16, NULL), ACL_SUCCESS);
    ACL_CHECK("sync device", aclrtSynchronizeDevice(), ACL_SUCCESS);

    ACL_CHECK("free", aclrtFree(devPtr), ACL_SUCCESS);
    ACL_CHECK("reset device", aclrtResetDevice(0), ACL_SUCCESS);
    ACL_CHECK("finalize", aclFinalize(), ACL_SUCCESS);
    printf("done\n");
    return 0;
}
