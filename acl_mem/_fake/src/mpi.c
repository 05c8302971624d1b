/* libacl_dvpp_mpi.so: the DVPP V2 allocation calls, answered by the engine in
 * libascendcl.so. */
#include "engine.h"

int32_t acl_mem_engine_mpi_malloc(uint32_t dev_id, void **dev_ptr, uint64_t size,
                                  const void *caller);
int32_t acl_mem_engine_mpi_free(void *dev_ptr);

hi_s32 hi_mpi_dvpp_malloc(hi_u32 dev_id, hi_void **dev_ptr, hi_u64 size)
{
    return acl_mem_engine_mpi_malloc(dev_id, dev_ptr, size, __builtin_return_address(0));
}

hi_s32 hi_mpi_dvpp_free(hi_void *dev_ptr)
{
    return acl_mem_engine_mpi_free(dev_ptr);
}
