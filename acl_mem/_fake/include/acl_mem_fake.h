/* acl_mem's fake libascendcl: the control API beside the ACL calls.
 *
 * A C or C++ program linked against the fake needs none of this: the ACL calls behave
 * as on an Atlas host. These functions let a test pick the device and release the fake
 * plays and start over between cases. Each returns 0, or 100000 for an argument it
 * refuses (nothing is changed then).
 */
#ifndef ACL_MEM_FAKE_H
#define ACL_MEM_FAKE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ACL_MEM_FAKE_API __attribute__((visibility("default")))

/* What the fake plays now. */
struct acl_mem_fake_description {
    char profile[32];
    char soc_name[32];
    char cann[16];
    /* Why a setting (ACL_MEM_FAKE_PROFILE, ACL_MEM_FAKE_CANN) could not be used; "" if
     * none. While it is set every ACL call fails with 507000 and says so. */
    char setting_error[256];
    int32_t device_count;
    uint64_t capacity; /* bytes per device */
    int32_t address_space_reserved; /* device addresses can never be host addresses */
};

/* Forget every device, context, allocation and aclInit, as a new process would; the
 * settings are read again from the environment unless configure() chose them. */
ACL_MEM_FAKE_API int acl_mem_fake_reset(void);

/* Play `profile` (a profile name or SoC family) and `cann` ("8.5.0", "9.0.1", "9.1.0"),
 * NULL for the environment's choice (ACL_MEM_FAKE_PROFILE, ACL_MEM_FAKE_CANN) or the
 * default; device_count 0 and capacity 0 keep the profile's. Then reset(). */
ACL_MEM_FAKE_API int acl_mem_fake_configure(const char *profile, const char *cann,
                                            int device_count, uint64_t capacity);

ACL_MEM_FAKE_API int acl_mem_fake_describe(struct acl_mem_fake_description *out);

/* The reason every call fails, or NULL when the settings are usable. */
ACL_MEM_FAKE_API const char *acl_mem_fake_setting_error(void);

/* How many calls so far hit a function the C engine does not model yet (they fail with
 * 207000), and in *last (when not NULL) the name of the latest. Goes once every
 * function is modelled. */
ACL_MEM_FAKE_API unsigned long acl_mem_fake_pending_hits(const char **last);

#ifdef __cplusplus
}
#endif

#endif
