/* A C program in the style of the public Ascend samples (acl_memory, resnet50 "sample
 * process"): init, device, stream, device and host memory, copies both ways, memset,
 * memory info, the error codes of bad input, then the teardown in reverse order.
 * tests/test_shim.py compiles it against the real headers (or tests/c/acl_min.h),
 * links it with -lascendcl from the shim and checks its output and exit status.
 *
 * Output: one "ok <step>" line per step, then "done"; a failed check prints
 * "FAIL <step>: ..." and exits with status 1. */
#include <stdio.h>
#include <string.h>
#include "acl/acl.h"
#include "steps.h"

int main(void)
{
    const size_t size = 1024 * 1024;
    int32_t deviceId = 0;
    aclrtStream stream = NULL;
    void *devPtr = NULL;
    void *hostIn = NULL;
    void *hostOut = NULL;
    void *zero = NULL;
    size_t freeBytes = 0, totalBytes = 0;
    uint32_t modelId = 0;
    size_t i;

    ACL_CHECK("init", aclInit(NULL), ACL_SUCCESS);
    ACL_CHECK("set device", aclrtSetDevice(deviceId), ACL_SUCCESS);
    ACL_CHECK("create stream", aclrtCreateStream(&stream), ACL_SUCCESS);
    ACL_CHECK("malloc", aclrtMalloc(&devPtr, size, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    ACL_CHECK("malloc host in", aclrtMallocHost(&hostIn, size), ACL_SUCCESS);
    ACL_CHECK("malloc host out", aclrtMallocHost(&hostOut, size), ACL_SUCCESS);

    for (i = 0; i < size; ++i)
        ((unsigned char *)hostIn)[i] = (unsigned char)(i * 7 + 3);
    memset(hostOut, 0, size);
    ACL_CHECK("memcpy h2d", aclrtMemcpy(devPtr, size, hostIn, size, ACL_MEMCPY_HOST_TO_DEVICE),
              ACL_SUCCESS);
    ACL_CHECK("memcpy d2h", aclrtMemcpy(hostOut, size, devPtr, size, ACL_MEMCPY_DEVICE_TO_HOST),
              ACL_SUCCESS);
    if (memcmp(hostIn, hostOut, size) != 0) {
        printf("FAIL round trip: the bytes read back differ\n");
        return 1;
    }
    printf("ok round trip\n");

    ACL_CHECK("memset", aclrtMemset(devPtr, size, 0xAB, size / 2), ACL_SUCCESS);
    ACL_CHECK("memcpy d2h after memset",
              aclrtMemcpy(hostOut, size, devPtr, size, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    if (((unsigned char *)hostOut)[0] != 0xAB || ((unsigned char *)hostOut)[size / 2 - 1] != 0xAB
            || ((unsigned char *)hostOut)[size / 2] != ((unsigned char *)hostIn)[size / 2]) {
        printf("FAIL memset contents\n");
        return 1;
    }
    printf("ok memset contents\n");

    ACL_CHECK("mem info", aclrtGetMemInfo(ACL_HBM_MEM, &freeBytes, &totalBytes), ACL_SUCCESS);
    if (totalBytes == 0 || freeBytes >= totalBytes) {
        printf("FAIL mem info: free %zu total %zu\n", freeBytes, totalBytes);
        return 1;
    }
    printf("mem info free=%zu total=%zu\n", freeBytes, totalBytes);

    /* Bad input: size 0 is ACL_ERROR_INVALID_PARAM; the pointer stays untouched. */
    ACL_CHECK("malloc size 0", aclrtMalloc(&zero, 0, ACL_MEM_MALLOC_HUGE_FIRST), 100000);
    if (zero != NULL) {
        printf("FAIL malloc size 0 wrote a pointer\n");
        return 1;
    }
    /* Outside the shim's surface: a documented error code, never a success. */
    ACL_CHECK("unsupported model load", aclmdlLoadFromFile("model.om", &modelId), 200006);

    ACL_CHECK("free", aclrtFree(devPtr), ACL_SUCCESS);
    printf("double free rc=%d\n", (int)aclrtFree(devPtr));
    ACL_CHECK("free host in", aclrtFreeHost(hostIn), ACL_SUCCESS);
    ACL_CHECK("free host out", aclrtFreeHost(hostOut), ACL_SUCCESS);
    ACL_CHECK("destroy stream", aclrtDestroyStream(stream), ACL_SUCCESS);
    ACL_CHECK("reset device", aclrtResetDevice(deviceId), ACL_SUCCESS);
    ACL_CHECK("finalize", aclFinalize(), ACL_SUCCESS);
    printf("done\n");
    return 0;
}
