/* Virtual memory from C on acl_mem's fake library: reserve, allocate physical memory,
 * map two handles back to back and copy across the seam, query the mapping, free a
 * handle while it is still mapped (its memory stays until the unmap), the pools' free
 * bytes, a queued memset racing with an unmap (a hazard, and the work is skipped), and
 * the refusals of bad arguments. tests/test_engine_programs.py runs it.
 * Output: "ok <step>" lines, "hazard-rc <code>", then "done". */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "acl/acl.h"
#include "steps.h"

#define HUGE (2u << 20)

int main(void)
{
    void *base = NULL, *attrBase = NULL;
    aclrtDrvMemHandle first = NULL, second = NULL, retained = NULL;
    aclrtPhysicalMemProp prop, described;
    size_t granularity = 0, freeBefore = 0, freeAfter = 0, total = 0, rangeSize = 0;
    aclrtPtrAttributes attributes;
    static unsigned char in[2 * HUGE], out[2 * HUGE];

    memset(&prop, 0, sizeof prop);
    prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    prop.memAttr = ACL_HBM_MEM_HUGE;
    prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;

    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("granularity", aclrtMemGetAllocationGranularity(
                  &prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &granularity), ACL_SUCCESS);
    EXPECT("2 MiB", granularity == HUGE);
    ACL_CHECK("not a multiple", aclrtMallocPhysical(&first, HUGE + 1, &prop, 0), 107000);
    ACL_CHECK("reserve", aclrtReserveMemAddress(&base, 4 * (size_t)HUGE, 0, NULL, 0),
              ACL_SUCCESS);
    ACL_CHECK("alignment", aclrtReserveMemAddress(&attrBase, HUGE, 4096, NULL, 0), 107000);
    ACL_CHECK("mem info", aclrtGetMemInfo(ACL_HBM_MEM, &freeBefore, &total), ACL_SUCCESS);
    ACL_CHECK("physical", aclrtMallocPhysical(&first, HUGE, &prop, 0), ACL_SUCCESS);
    ACL_CHECK("physical 2", aclrtMallocPhysical(&second, HUGE, &prop, 0), ACL_SUCCESS);
    ACL_CHECK("mem info after", aclrtGetMemInfo(ACL_HBM_MEM, &freeAfter, &total), ACL_SUCCESS);
    EXPECT("pools hold it", freeBefore - freeAfter == 2 * (size_t)HUGE);
    ACL_CHECK("map", aclrtMapMem(base, HUGE, 0, first, 0), ACL_SUCCESS);
    ACL_CHECK("map again", aclrtMapMem(base, HUGE, 0, second, 0), 107000);
    ACL_CHECK("map 2", aclrtMapMem((char *)base + HUGE, HUGE, 0, second, 0), ACL_SUCCESS);
    ACL_CHECK("release while mapped", aclrtReleaseMemAddress(base), 107000);

    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (unsigned char)(i * 31 + 7);
    ACL_CHECK("h2d across the seam", aclrtMemcpy(base, 2 * HUGE, in, 2 * HUGE,
                                                 ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    ACL_CHECK("d2h across the seam", aclrtMemcpy(out, 2 * HUGE, base, 2 * HUGE,
                                                 ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    EXPECT("bytes", memcmp(in, out, sizeof in) == 0);
    ACL_CHECK("past the mappings", aclrtMemcpy(out, 3 * HUGE, base, 3 * HUGE,
                                               ACL_MEMCPY_DEVICE_TO_HOST), 107000);

    ACL_CHECK("range", aclrtMemGetAddressRange((char *)base + HUGE + 5, &attrBase, &rangeSize),
              ACL_SUCCESS);
    EXPECT("range is the second mapping", attrBase == (char *)base + HUGE && rangeSize == HUGE);
    ACL_CHECK("attributes", aclrtPointerGetAttributes(base, &attributes), ACL_SUCCESS);
    EXPECT("device memory", attributes.location.type == ACL_MEM_LOCATION_TYPE_DEVICE &&
                                attributes.pageSize == HUGE);
    ACL_CHECK("retain", aclrtMemRetainAllocationHandle((char *)base + 100, &retained),
              ACL_SUCCESS);
    EXPECT("retained the first", retained == first);
    ACL_CHECK("properties", aclrtMemGetAllocationPropertiesFromHandle(second, &described),
              ACL_SUCCESS);
    EXPECT("same properties", described.memAttr == ACL_HBM_MEM_HUGE &&
                                  described.location.id == 0);

    /* Freed while mapped: the bytes stay until the unmap. */
    ACL_CHECK("free mapped", aclrtFreePhysical(first), ACL_SUCCESS);
    ACL_CHECK("free again", aclrtFreePhysical(first), 107000);
    ACL_CHECK("still readable", aclrtMemcpy(out, HUGE, base, HUGE, ACL_MEMCPY_DEVICE_TO_HOST),
              ACL_SUCCESS);
    EXPECT("still the bytes", memcmp(in, out, HUGE) == 0);
    ACL_CHECK("unmap", aclrtUnmapMem(base), ACL_SUCCESS);
    ACL_CHECK("unmapped", aclrtMemcpy(out, HUGE, base, HUGE, ACL_MEMCPY_DEVICE_TO_HOST),
              107000);

    /* Queued work on a mapping that goes: a hazard; the memset never lands. */
    ACL_CHECK("memset queued", aclrtMemsetAsync((char *)base + HUGE, HUGE, 0, HUGE, NULL),
              ACL_SUCCESS);
    printf("hazard-rc %d\n", (int)aclrtUnmapMem((char *)base + HUGE));
    ACL_CHECK("sync", aclrtSynchronizeDevice(), ACL_SUCCESS);
    ACL_CHECK("free second", aclrtFreePhysical(second), ACL_SUCCESS);
    ACL_CHECK("release", aclrtReleaseMemAddress(base), ACL_SUCCESS);
    ACL_CHECK("released", aclrtReleaseMemAddress(base), 107000);
    ACL_CHECK("mem info at the end", aclrtGetMemInfo(ACL_HBM_MEM, &freeAfter, &total),
              ACL_SUCCESS);
    EXPECT("pools whole again", freeAfter == freeBefore);
    ACL_CHECK("reset", aclrtResetDevice(0), ACL_SUCCESS);
    printf("done\n");
    return 0;
}
