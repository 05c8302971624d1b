/* The memory calls of a typical Ascend C program, run on acl_mem's fake through the
 * drop-in libascendcl.so (README, "C and C++ programs"):
 *
 *   cc examples/c/hello_acl.c -I"$(acl-mem shim --print-includedir)" \
 *      -L"$(acl-mem shim --print-libdir)" -lascendcl -o hello_acl
 *   acl-mem shim exec -- ./hello_acl
 *
 * With the CANN toolkit's headers, -I points at them instead; the program is the same. */
#include <stdio.h>
#include <string.h>
#include "acl/acl.h"

#define CHECK(expr)                                                             \
    do {                                                                        \
        aclError ret_ = (expr);                                                 \
        if (ret_ != ACL_SUCCESS) {                                              \
            fprintf(stderr, "%s failed: %d\n", #expr, (int)ret_);               \
            return 1;                                                           \
        }                                                                       \
    } while (0)

int main(void)
{
    const size_t size = 100;
    void *dev = NULL, *host = NULL, *tooBig = NULL;
    size_t freeBytes = 0, totalBytes = 0;
    char text[16] = {0};

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtMalloc(&dev, size, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMallocHost(&host, size));
    memcpy(host, "hello, device", 14);
    CHECK(aclrtMemcpy(dev, size, host, 14, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtMemcpy(text, sizeof text, dev, 14, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("read back: %s\n", text);
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &freeBytes, &totalBytes));
    printf("device 0: %zu of %zu bytes free\n", freeBytes, totalBytes);
    /* The fake's rules and codes, as on hardware: 1 TiB is more than the device has. */
    printf("aclrtMalloc(1 TiB) -> %d\n",
           (int)aclrtMalloc(&tooBig, (size_t)1 << 40, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtFreeHost(host));
    CHECK(aclrtFree(dev));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    return 0;
}
