/* Allocate, copy in and out, free: linked with -lacl_rt or -lascendcl only. */
#include <stdio.h>
#include <string.h>
#include "acl/acl.h"
#include "acl/acl_rt.h"

static int ok(aclError rc, const char *call)
{
    if (rc != ACL_SUCCESS)
        printf("FAIL %s -> %d\n", call, (int)rc);
    return rc == ACL_SUCCESS;
}

int main(void)
{
    char in[16] = "hello, cmake", out[16] = {0};
    void *device = NULL;
    int good = ok(aclInit(NULL), "aclInit") && ok(aclrtSetDevice(0), "aclrtSetDevice");
    if (good && ok(aclrtMalloc(&device, sizeof in, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc")) {
        good = ok(aclrtMemcpy(device, sizeof in, in, sizeof in, ACL_MEMCPY_HOST_TO_DEVICE),
                  "aclrtMemcpy in")
            && ok(aclrtMemcpy(out, sizeof out, device, sizeof in, ACL_MEMCPY_DEVICE_TO_HOST),
                  "aclrtMemcpy out");
        good = ok(aclrtFree(device), "aclrtFree") && good;
    } else {
        good = 0;
    }
    good = ok(aclrtResetDevice(0), "aclrtResetDevice") && good;
    good = ok(aclFinalize(), "aclFinalize") && good;
    printf("read back: %s\n", strcmp(in, out) == 0 ? out : "(wrong)");
    return good ? 0 : 1;
}
