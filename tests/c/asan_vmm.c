/* Built with -fsanitize=address by tests/test_shim_asan.py: device memory, pinned
 * memory and a virtual-memory mapping at a fixed address of the VMM window, with copies
 * both ways, in a process where AddressSanitizer's shadow memory already occupies the
 * start of that window. Prints "ok" and exits 0 when every call behaved. */
#include <stdio.h>
#include <string.h>
#include "acl/acl.h"

#define CHECK(expr)                                                             \
    do {                                                                        \
        aclError ret_ = (expr);                                                 \
        if (ret_ != ACL_SUCCESS) {                                              \
            printf("FAIL %s: %d\n", #expr, (int)ret_);                          \
            return 1;                                                           \
        }                                                                       \
    } while (0)

int main(void)
{
    const size_t size = 2u << 20;
    void *dev = NULL, *host = NULL, *va = NULL;
    void *const fixed = (void *)(17ULL << 40); /* past the shadow, inside the window */
    aclrtDrvMemHandle handle = NULL;
    aclrtPhysicalMemProp prop;
    char out[32] = {0};

    memset(&prop, 0, sizeof prop);
    prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    prop.memAttr = ACL_HBM_MEM_HUGE;
    prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtMalloc(&dev, size, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMallocHost(&host, size));
    strcpy((char *)host, "through the device");
    CHECK(aclrtMemcpy(dev, size, host, 32, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtReserveMemAddress(&va, size, 0, fixed, 0));
    if (va != fixed) {
        printf("FAIL reserved %p, asked for %p\n", va, fixed);
        return 1;
    }
    CHECK(aclrtMallocPhysical(&handle, size, &prop, 0));
    CHECK(aclrtMapMem(va, size, 0, handle, 0));
    CHECK(aclrtMemcpy(va, size, dev, 32, ACL_MEMCPY_DEVICE_TO_DEVICE));
    CHECK(aclrtMemcpy(out, sizeof out, va, 32, ACL_MEMCPY_DEVICE_TO_HOST));
    if (strcmp(out, "through the device") != 0) {
        printf("FAIL read back %s\n", out);
        return 1;
    }
    CHECK(aclrtUnmapMem(va));
    CHECK(aclrtFreePhysical(handle));
    CHECK(aclrtReleaseMemAddress(va));
    CHECK(aclrtFreeHost(host));
    CHECK(aclrtFree(dev));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("ok\n");
    return 0;
}
