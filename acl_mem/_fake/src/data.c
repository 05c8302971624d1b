/* Device profiles and CANN releases: what differs between chips and between releases,
 * as data (docs/runtime-model.md §0.1, §3.5, §3.8, §3.13, §7). acl_mem.fake reads them
 * through the control API; tests compare them with the Python model's tables. */
#include <string.h>
#include <strings.h>

#include "engine.h"

const struct am_profile am_profiles[] = {
    {.name = "atlas-a2", .soc_name = "Ascend910B1",
     .description = "Atlas A2 training/inference (Ascend910B): 64 GiB HBM, 1 GiB pages",
     .padding = 32, .ddr = false, .capacity = 64 * AM_GiB, .normal_sixteenths = 1,
     .giant_pages = true, .p2p_policies = true, .dvpp = true, .mpi_dvpp = true,
     .device_count = 8, .max_streams = 1984, .run_mode = 1},
    {.name = "atlas-inference", .soc_name = "Ascend310P3",
     .description = "Atlas inference (Ascend310P): 24 GiB DDR, no 1 GiB pages, no P2P",
     .padding = 32, .ddr = true, .capacity = 24 * AM_GiB, .normal_sixteenths = 1,
     .giant_pages = false, .p2p_policies = false, .dvpp = true, .mpi_dvpp = true,
     .device_count = 4, .max_streams = 1024, .run_mode = 1},
    {.name = "ascend950", .soc_name = "Ascend950PR",
     .description = "Ascend950: padding 0 (no +32 on aclrtMalloc), no separate DVPP memory",
     .padding = 0, .ddr = false, .capacity = 128 * AM_GiB, .normal_sixteenths = 1,
     .giant_pages = false, .p2p_policies = true, .dvpp = false, .mpi_dvpp = true,
     .device_count = 8, .max_streams = 1984, .run_mode = 1},
    {.name = "atlas-200dk", .soc_name = "Ascend310",
     .description = "Atlas 200 DK (Ascend310) in RC mode: the program runs on the board's "
                    "control CPU, 4 GiB DDR, aclrtGetRunMode is ACL_DEVICE",
     .padding = 32, .ddr = true, .capacity = 4 * AM_GiB, .normal_sixteenths = 1,
     .giant_pages = false, .p2p_policies = false, .dvpp = true, .mpi_dvpp = false,
     .device_count = 1, .max_streams = 1024, .run_mode = 0},
};
const size_t am_profile_count = sizeof am_profiles / sizeof am_profiles[0];

const struct am_release am_releases[] = {
    {.name = "8.5.0", .acl_version = {1, 16, 0}, .soc_padding = false,
     .zero_count_succeeds = false, .count_checked_first = false,
     .async_context_first = false, .stream_handle_checked = false, .meminfo_max_attr = 11,
     .granularity_all_attrs = false, .retain_checks_output = false, .properties_v2 = false,
     .has_address_range = false, .physical_rejects_managed = false,
     .host_location_id_zero = false, .contexts_checked = false},
    {.name = "9.0.1", .acl_version = {1, 17, 0}, .soc_padding = false,
     .zero_count_succeeds = false, .count_checked_first = false,
     .async_context_first = false, .stream_handle_checked = false, .meminfo_max_attr = 17,
     .granularity_all_attrs = true, .retain_checks_output = true, .properties_v2 = true,
     .has_address_range = true, .physical_rejects_managed = false,
     .host_location_id_zero = true, .contexts_checked = true},
    {.name = "9.1.0", .acl_version = {1, 17, 0}, .soc_padding = true,
     .zero_count_succeeds = true, .count_checked_first = true, .async_context_first = true,
     .stream_handle_checked = true, .meminfo_max_attr = 17, .granularity_all_attrs = true,
     .retain_checks_output = true, .properties_v2 = true, .has_address_range = true,
     .physical_rejects_managed = true, .host_location_id_zero = true,
     .contexts_checked = true},
};
const size_t am_release_count = sizeof am_releases / sizeof am_releases[0];

static const struct {
    const char *alias, *name;
} aliases[] = {
    {"ascend910b", "atlas-a2"}, {"ascend310p", "atlas-inference"}, {"950", "ascend950"},
    {"ascend310", "atlas-200dk"}, {"200dk", "atlas-200dk"},
};

/* Leading and trailing blanks do not count, nor does case (as the Python model). */
static bool same_name(const char *given, const char *name)
{
    while (*given == ' ' || *given == '\t')
        given++;
    size_t length = strlen(given);
    while (length > 0 && (given[length - 1] == ' ' || given[length - 1] == '\t'))
        length--;
    return length == strlen(name) && strncasecmp(given, name, length) == 0;
}

const struct am_profile *am_profile_named(const char *name)
{
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (same_name(name, aliases[i].alias))
            name = aliases[i].name;
    for (size_t i = 0; i < am_profile_count; i++)
        if (same_name(name, am_profiles[i].name))
            return &am_profiles[i];
    return NULL;
}

const struct am_release *am_release_named(const char *name)
{
    for (size_t i = 0; i < am_release_count; i++)
        if (same_name(name, am_releases[i].name))
            return &am_releases[i];
    return NULL;
}
