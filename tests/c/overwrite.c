/* The overwrite secondary allocators make: 128 bytes copied into a block of 100. The
 * runtime pads every block, so the copy succeeds on a real device too and silently
 * writes into the padding; with ACL_MEM_CHECK=1 the fake's checker reports the copy
 * crossing the requested size and, at the free, the damaged bytes, naming
 * fill_past_the_end (exported: -rdynamic) as the allocating function.
 * tests/test_shim_programs.py runs it with and without the checker.
 *
 * Output: "<call> <result>" per call, then "done". */
#include <stdio.h>
#include <string.h>
#include "acl/acl.h"

void *fill_past_the_end(void);

void *fill_past_the_end(void)
{
    void *block = NULL;
    char host[128];
    memset(host, 0x5a, sizeof host);
    if (aclrtMalloc(&block, 100, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS)
        return NULL;
    printf("aclrtMemcpy %d\n",
           (int)aclrtMemcpy(block, 128, host, 128, ACL_MEMCPY_HOST_TO_DEVICE));
    return block;
}

int main(void)
{
    void *block;
    if (aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS) {
        printf("FAIL setup\n");
        return 1;
    }
    block = fill_past_the_end();
    if (block == NULL) {
        printf("FAIL allocation\n");
        return 1;
    }
    printf("aclrtFree %d\n", (int)aclrtFree(block));
    printf("done\n");
    return 0;
}
