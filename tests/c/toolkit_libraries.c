/* A program linked as toolkit programs are: -lascendcl plus the profiling, operator
 * compiler, CBLAS and tensor-channel libraries (tests/test_shim.py links it so). Memory
 * works; profiling and operator compiling fail loudly with 200006.
 *
 * Output: "<call> <result>" per call, then "done". */
#include <stdio.h>
#include "acl/acl.h"
#if __has_include("acl/acl_prof.h")
#include "acl/acl_prof.h"
#include "acl/acl_op_compiler.h"
#endif

int main(void)
{
    void *block = NULL;
    static const char path[] = "./prof";
    if (aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS) {
        printf("FAIL setup\n");
        return 1;
    }
    printf("aclrtMalloc %d\n", (int)aclrtMalloc(&block, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
    printf("aclprofInit %d\n", (int)aclprofInit(path, sizeof path - 1));
    printf("aclopSetCompileFlag %d\n", (int)aclopSetCompileFlag((aclOpCompileFlag)0));
    printf("aclrtFree %d\n", (int)aclrtFree(block));
    printf("done\n");
    return 0;
}
