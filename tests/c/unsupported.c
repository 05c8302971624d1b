/* Calls outside the shim's surface (tests/test_shim.py): each must fail with the
 * documented value and say so on stderr once per function, however often it is called.
 * Prints "<function> <result>" per call. Python is never started for these. */
#include <stdio.h>
#include "acl/acl.h"

int main(void)
{
    uint32_t modelId = 0;
    int i;
    for (i = 0; i < 2; ++i)
        printf("aclmdlLoadFromFile %d\n", (int)aclmdlLoadFromFile("model.om", &modelId));
    printf("aclmdlCreateDesc %s\n", aclmdlCreateDesc() == NULL ? "NULL" : "non-NULL");
    printf("aclGetTensorDescSize %zu\n", aclGetTensorDescSize(NULL));
    return 0;
}
