/* Where a leaked block was allocated, named from C: leak_here() (exported: the program
 * is linked with -rdynamic) allocates a block it never frees; hidden_leak() is static,
 * so it has no dynamic symbol and the report can only give the offset in the program.
 * With ACL_MEM_CHECK=1 and ACL_MEM_LEAK_REPORT=1 the leak report at exit names, for
 * each block, the C function that called aclrtMalloc (acl_mem/shim/_extra.py, "Sites");
 * tests/test_shim_programs.py checks it.
 *
 * Output: "leak <address> <function>" per block, then "done". */
#include <stdio.h>
#include "acl/acl.h"

void *leak_here(size_t size);

void *leak_here(size_t size)
{
    void *block = NULL;
    if (aclrtMalloc(&block, size, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS)
        return NULL;
    return block;
}

static __attribute__((noinline)) void *hidden_leak(void)
{
    void *block = NULL;
    if (aclrtMallocHost(&block, 4096) != ACL_SUCCESS)
        return NULL;
    return block;
}

int main(void)
{
    void *leaked;
    void *hidden;
    if (aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS) {
        printf("FAIL setup\n");
        return 1;
    }
    leaked = leak_here(1234);
    hidden = hidden_leak();
    if (leaked == NULL || hidden == NULL) {
        printf("FAIL allocation\n");
        return 1;
    }
    printf("leak %p leak_here\n", leaked);
    printf("leak %p hidden_leak\n", hidden);
    printf("done\n");
    return 0;
}
