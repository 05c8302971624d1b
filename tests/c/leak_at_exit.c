/* A program that forgets to free: two device blocks and one pinned host block are
 * live when it returns from main (no aclrtFree, no reset, no aclFinalize), as in a
 * sample whose error path skips its cleanup. With ACL_MEM_LEAK_REPORT=1 the shim prints
 * the fake's leak report on standard error at exit, as acl_mem does for a Python
 * program; tests/test_shim_programs.py checks it names each block printed here.
 *
 * Output: "leak <address> <size>" per block, then "done". */
#include <stdio.h>
#include "acl/acl.h"

int main(void)
{
    void *first = NULL;
    void *second = NULL;
    void *host = NULL;
    void *freed = NULL;
    if (aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS
            || aclrtMalloc(&first, 1000, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS
            || aclrtMalloc(&second, 3 << 20, ACL_MEM_MALLOC_NORMAL_ONLY) != ACL_SUCCESS
            || aclrtMallocHost(&host, 4096) != ACL_SUCCESS
            || aclrtMalloc(&freed, 64, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS
            || aclrtFree(freed) != ACL_SUCCESS) {
        printf("FAIL setup\n");
        return 1;
    }
    printf("leak %p 1000\n", first);
    printf("leak %p %d\n", second, 3 << 20);
    printf("leak %p 4096\n", host);
    printf("freed %p\n", freed);
    printf("done\n");
    return 0;
}
