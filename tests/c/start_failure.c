/* Supported calls when the fake cannot start (tests/test_shim.py sets a start-up path
 * that points nowhere): every call must fail with the documented code, never 0, and
 * aclrtGetSocName must return NULL. Prints "<function> <rc>" per call. */
#include <stdio.h>
#include "acl/acl.h"

int main(void)
{
    void *devPtr = NULL;
    size_t freeBytes = 0, totalBytes = 0;
    printf("aclInit %d\n", (int)aclInit(NULL));
    printf("aclrtSetDevice %d\n", (int)aclrtSetDevice(0));
    printf("aclrtMalloc %d\n", (int)aclrtMalloc(&devPtr, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
    printf("aclrtGetMemInfo %d\n", (int)aclrtGetMemInfo(ACL_HBM_MEM, &freeBytes, &totalBytes));
    printf("aclrtFree %d\n", (int)aclrtFree(devPtr));
    printf("aclrtGetSocName %s\n", aclrtGetSocName() == NULL ? "NULL" : "non-NULL");
    printf("devPtr %s\n", devPtr == NULL ? "untouched" : "written");
    return 0;
}
