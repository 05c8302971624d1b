/* libacl_dvpp.so: the DVPP V1 allocation calls, answered by the engine in libascendcl.so. */
#include "engine.h"

aclError acl_mem_engine_dvpp_malloc(void **devPtr, size_t size, const void *caller);
aclError acl_mem_engine_dvpp_free(void *devPtr);

aclError acldvppMalloc(void **devPtr, size_t size)
{
    return acl_mem_engine_dvpp_malloc(devPtr, size, __builtin_return_address(0));
}

aclError acldvppFree(void *devPtr)
{
    return acl_mem_engine_dvpp_free(devPtr);
}
